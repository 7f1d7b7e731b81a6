// core.cpp -- errors, version, seeding and thread settings: the process-global part of the shim.
#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <ATen/Parallel.h>

#include <cstdlib>

#include "internal.hpp"

#ifndef TRS_TORCH_VERSION
#define TRS_TORCH_VERSION TORCH_VERSION
#endif

std::string &trs::last_error()
{
    thread_local std::string msg;
    return msg;
}

extern "C" const char *trs_last_error(void) { return trs::last_error().c_str(); }

extern "C" const char *trs_torch_version(void) { return TRS_TORCH_VERSION; }

extern "C" trs_status trs_manual_seed(uint64_t seed)
{
    std::string &err = trs::last_error();
    trs::install_counting_allocator();
    TRS_GUARD(err, {
        torch::manual_seed(seed);
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_set_deterministic(int on)
{
    std::string &err = trs::last_error();
    TRS_GUARD(err, {
#ifdef TRS_WITH_CUDA
        // cuBLAS is deterministic only with a fixed workspace configuration, read when its handle is created;
        // libtorch's deterministic mode refuses cuBLAS calls without it (PyTorch's reproducibility notes).
        if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
#endif
        at::globalContext().setDeterministicAlgorithms(on != 0, false);
        at::globalContext().setDeterministicCuDNN(on != 0);
        if (on) at::globalContext().setBenchmarkCuDNN(false);  // autotuning may choose differently per run
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_get_cudnn_flags(int *deterministic, int *benchmark)
{
    std::string &err = trs::last_error();
    TRS_GUARD(err, {
        if (deterministic) *deterministic = at::globalContext().deterministicCuDNN() ? 1 : 0;
        if (benchmark) *benchmark = at::globalContext().benchmarkCuDNN() ? 1 : 0;
        err.clear();
        return TRS_OK;
    })
}

namespace {
// OpenBLAS exports these; they are looked up at run time so other BLAS builds (reference BLAS, MKL) still link.
// libtorch built with MKL (the PyPI wheels) links MKL in statically and exports mkl_get_max_threads but not
// mkl_set_num_threads: at::set_num_threads sets MKL's count to intra_op there, and blas reads that back.
using blas_set_fn = void (*)(int);
using blas_get_fn = int (*)(void);
}  // namespace

extern "C" trs_status trs_set_threads(int intra_op, int inter_op, int blas)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, intra_op >= 1, "intra_op threads must be >= 1, got " + std::to_string(intra_op));
    TRS_CHECK_ARG(err, inter_op >= 0, "inter_op threads must be >= 0, got " + std::to_string(inter_op));
    TRS_CHECK_ARG(err, blas >= 0, "blas threads must be >= 0, got " + std::to_string(blas));
    trs::install_counting_allocator();
    TRS_GUARD(err, {
        if (blas > 0) {
            if (auto set = reinterpret_cast<blas_set_fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
                set(blas);
        }
        at::set_num_threads(intra_op);
        if (inter_op > 0 && static_cast<int>(at::get_num_interop_threads()) != inter_op)
            at::set_num_interop_threads(inter_op);
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_get_threads(int *intra_op, int *inter_op, int *blas)
{
    std::string &err = trs::last_error();
    TRS_GUARD(err, {
        if (intra_op) *intra_op = at::get_num_threads();
        if (inter_op) *inter_op = static_cast<int>(at::get_num_interop_threads());
        if (blas) {
            auto get = reinterpret_cast<blas_get_fn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
            if (!get) get = reinterpret_cast<blas_get_fn>(dlsym(RTLD_DEFAULT, "mkl_get_max_threads"));
            *blas = get ? get() : -1;
        }
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_set_malloc_thresholds(int64_t mmap_threshold, int64_t trim_threshold)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, mmap_threshold >= 0 && mmap_threshold <= (int64_t{32} << 20),
                  "mmap_threshold must be in [0, 32 MiB], got " + std::to_string(mmap_threshold));
    TRS_CHECK_ARG(err, trim_threshold >= 0 && trim_threshold <= INT32_MAX,
                  "trim_threshold must be in [0, 2^31), got " + std::to_string(trim_threshold));
#if defined(__GLIBC__)
    TRS_GUARD(err, {
        if (mmap_threshold > 0 && mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) != 1) {
            /* sanitizer allocators (ASan's) do not implement mallopt: not the caller's error */
            err = "mallopt(M_MMAP_THRESHOLD, " + std::to_string(mmap_threshold) + ") refused by this allocator";
            return TRS_E_RUNTIME;
        }
        if (trim_threshold > 0 && mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim_threshold)) != 1) {
            err = "mallopt(M_TRIM_THRESHOLD, " + std::to_string(trim_threshold) + ") refused by this allocator";
            return TRS_E_RUNTIME;
        }
        err.clear();
        return TRS_OK;
    })
#else
    err = "malloc thresholds: not glibc, left alone";
    return TRS_E_RUNTIME;
#endif
}
