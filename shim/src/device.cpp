// device.cpp -- where tensors live: the CPU or one CUDA device. Moving a model, staging host batches, reading a
// step's scalars back, the CUDA generators' states, and the CUDA caching allocator's statistics and cache release.
// Only the allocator calls need a CUDA build (TRS_WITH_CUDA); the rest is device-generic libtorch that the CPU path
// runs too (on the CPU, to_device and to_host return their argument, so a `device: cpu` run allocates and computes
// exactly what it did before devices existed).
#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "internal.hpp"

#ifdef TRS_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif
#if TRS_HAVE_CUDA_MEMORY_SNAPSHOT
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

namespace {

int cuda_count() { return static_cast<int>(torch::cuda::device_count()); }  // 0 in CPU-only builds

void check_cuda_index(int index)
{
    const int n = cuda_count();
    if (index < 0 || index >= n)
        throw trs::invalid("no CUDA device " + std::to_string(index) + ": this process sees " + std::to_string(n) +
                           (trs_cuda_built() ? " CUDA device(s)"
                                             : " (this trainrun was built against a CPU-only libtorch)"));
}

// The default generator of CUDA device `index` (torch.cuda.default_generators[index]); device-generic API of
// libtorch 1.13 and 2.x alike, no CUDA header needed.
at::Generator cuda_generator(int index)
{
    check_cuda_index(index);
    return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
}

}  // namespace

// ------------------------------------------------------------------------------------------------ tensors

torch::Tensor trs::to_device(const torch::Tensor &host, const torch::Device &dev)
{
    if (dev.is_cpu()) return host;
    return host.pin_memory().to(dev, host.scalar_type(), /*non_blocking=*/true);
}

torch::Tensor trs::to_host(const torch::Tensor &t)
{
    if (t.is_cpu()) return t.contiguous();
    return t.to(torch::kCPU).contiguous();
}

void trs::copy_from_host(torch::Tensor &dst, const void *src, size_t nbytes)
{
    if (nbytes == 0) return;
    torch::NoGradGuard no_grad;
    if (dst.is_cpu()) {
        std::memcpy(dst.data_ptr(), src, nbytes);  // parameters, buffers and state are contiguous
        return;
    }
    dst.copy_(torch::from_blob(const_cast<void *>(src), dst.sizes(), dst.scalar_type()));
}

size_t trs::Scalars::add(const torch::Tensor &t)
{
    tensors_.push_back(t.detach().reshape({}));
    return tensors_.size() - 1;
}

void trs::Scalars::fetch()
{
    values_.assign(tensors_.size(), 0.0);
    if (tensors_.empty()) return;
    if (tensors_[0].is_cpu()) {
        for (size_t i = 0; i < tensors_.size(); i++)
            values_[i] = tensors_[i].is_floating_point() ? tensors_[i].item<double>()
                                                          : static_cast<double>(tensors_[i].item<int64_t>());
        return;
    }
    // The step's synchronisation point on a CUDA device: one stack on the device, one blocking copy to the host.
    std::vector<torch::Tensor> d;
    d.reserve(tensors_.size());
    for (const auto &t : tensors_) d.push_back(t.to(torch::kFloat64));
    const torch::Tensor host = torch::stack(d).to(torch::kCPU);
    std::memcpy(values_.data(), host.data_ptr<double>(), sizeof(double) * values_.size());
}

// ------------------------------------------------------------------------------------------------ the ABI

extern "C" int trs_cuda_built(void)
{
#ifdef TRS_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

extern "C" trs_status trs_cuda_device_count(int *count)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, count != nullptr, "count is NULL");
    *count = 0;
    TRS_GUARD(err, {
        *count = cuda_count();
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_model_to_device(trs_model *model, trs_device_type type, int index)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, type == TRS_DEVICE_CPU || type == TRS_DEVICE_CUDA,
                  "unknown device type " + std::to_string(static_cast<int>(type)));
    TRS_GUARD(err, {
        torch::Device dev(torch::kCPU);
        if (type == TRS_DEVICE_CUDA) {
            check_cuda_index(index);
            dev = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
        }
        if (model->jit) model->jit->to(dev);  // jit::Module::to: set_data on each parameter and buffer, as nn
        else model->seq->to(dev);  // nn.Module.to: parameters and buffers in place (set_data), identities kept
        for (auto &t : model->debug_leak) t = t.to(dev);
        model->device = dev;
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_model_device(trs_model *model, trs_device_type *type, int *index)
{
    if (!model) return TRS_E_INVALID;
    if (type) *type = model->device.is_cuda() ? TRS_DEVICE_CUDA : TRS_DEVICE_CPU;
    if (index) *index = model->device.is_cuda() ? static_cast<int>(model->device.index()) : -1;
    return TRS_OK;
}

extern "C" trs_status trs_cuda_rng_state_size(int index, size_t *nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, nbytes != nullptr, "nbytes is NULL");
    TRS_GUARD(err, {
        auto gen = cuda_generator(index);
        std::lock_guard<std::mutex> lock(gen.mutex());
        *nbytes = static_cast<size_t>(gen.get_state().numel());
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_cuda_rng_get_state(int index, void *dst, size_t nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, dst != nullptr, "dst is NULL");
    TRS_GUARD(err, {
        auto gen = cuda_generator(index);
        std::lock_guard<std::mutex> lock(gen.mutex());
        const torch::Tensor st = gen.get_state();  // a uint8 CPU tensor (seed and Philox offset)
        if (static_cast<size_t>(st.numel()) != nbytes)
            throw trs::invalid("CUDA generator " + std::to_string(index) + " has a state of " +
                               std::to_string(st.numel()) + " bytes, not " + std::to_string(nbytes));
        std::memcpy(dst, st.data_ptr(), nbytes);
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_cuda_rng_set_state(int index, const void *src, size_t nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, src != nullptr, "src is NULL");
    TRS_GUARD(err, {
        auto gen = cuda_generator(index);
        std::lock_guard<std::mutex> lock(gen.mutex());
        const size_t want = static_cast<size_t>(gen.get_state().numel());
        if (nbytes != want)
            throw trs::invalid("a CUDA generator state of " + std::to_string(nbytes) + " bytes was given; this " +
                               "libtorch's is " + std::to_string(want) + " bytes (saved by another libtorch version?)");
        torch::Tensor st = torch::empty({static_cast<int64_t>(nbytes)}, torch::kUInt8);
        std::memcpy(st.data_ptr(), src, nbytes);
        gen.set_state(st);
        err.clear();
        return TRS_OK;
    })
}

// ------------------------------------------------------------------------------------------------ CUDA allocator
//
// The one place that depends on the libtorch version for CUDA. getDeviceStats(device) returns
// c10::cuda::CUDACachingAllocator::DeviceStats in libtorch 1.x (parameter int) and c10::CachingDeviceAllocator::
// DeviceStats in recent 2.x (parameter c10::DeviceIndex); emptyCache() takes no argument in 1.x and a defaulted
// MempoolId_t in recent 2.x. Both DeviceStats have allocated_bytes / reserved_bytes as arrays of Stat {current,
// peak, ...} indexed by StatType, whose AGGREGATE (all pools) is 0 in every version: `auto` and index 0 compile
// against both; the switch below is the device-index parameter type. A device the allocator has not been
// initialised for (CUDA never used in this process) makes getDeviceStats throw: its figures stay 0.
#ifdef TRS_WITH_CUDA
namespace {
namespace cca = c10::cuda::CUDACachingAllocator;
using DeviceIndexArg = trs::compat::CudaDeviceIndex;
constexpr size_t kAggregate = 0;  // StatType::AGGREGATE
}  // namespace
#endif

void trs::cuda_memory_stats(trs_memory_stats *s)
{
#ifdef TRS_WITH_CUDA
    const int n = std::min(cuda_count(), TRS_MAX_CUDA_DEVICES);
    s->cuda_devices = n;
    for (int d = 0; d < n; d++) {
        try {
            const auto st = cca::getDeviceStats(static_cast<DeviceIndexArg>(d));
            s->cuda_allocated_bytes[d] = st.allocated_bytes[kAggregate].current;
            s->cuda_reserved_bytes[d] = st.reserved_bytes[kAggregate].current;
            s->cuda_peak_allocated_bytes[d] = st.allocated_bytes[kAggregate].peak;
        } catch (const c10::Error &) {  // the allocator was never initialised: nothing allocated on the device
        }
    }
#else
    (void)s;
#endif
}

extern "C" trs_status trs_cuda_memory_info(int index, int64_t *free_bytes, int64_t *total_bytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, free_bytes != nullptr && total_bytes != nullptr, "free_bytes or total_bytes is NULL");
    *free_bytes = *total_bytes = 0;
    TRS_GUARD(err, {
        check_cuda_index(index);
#ifdef TRS_WITH_CUDA
        c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
        size_t f = 0, t = 0;
        C10_CUDA_CHECK(cudaMemGetInfo(&f, &t));
        *free_bytes = static_cast<int64_t>(f);
        *total_bytes = static_cast<int64_t>(t);
#endif
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_cuda_empty_cache(void)
{
    std::string &err = trs::last_error();
    TRS_GUARD(err, {
#ifdef TRS_WITH_CUDA
        if (cuda_count() > 0) cca::emptyCache();
#endif
        err.clear();
        return TRS_OK;
    })
}

// ---- the caching allocator's memory history (torch.cuda.memory._record_memory_history / _snapshot): libtorch
// 2.1+ in CUDA builds only (compat.hpp, TRS_HAVE_CUDA_MEMORY_SNAPSHOT).

extern "C" int trs_cuda_memory_snapshot_built(void) { return TRS_HAVE_CUDA_MEMORY_SNAPSHOT; }

#if !TRS_HAVE_CUDA_MEMORY_SNAPSHOT
namespace {

// What the history and snapshot calls answer in a build without them.
[[noreturn]] void throw_no_memory_snapshot()
{
    throw trs::invalid("memory snapshots need a CUDA build against libtorch 2.1 or later (this shim: libtorch " +
                       std::string(trs_torch_version()) + (trs_cuda_built() ? ", CUDA)" : ", CPU only)"));
}

}  // namespace
#endif

extern "C" trs_status trs_cuda_memory_record_history(int enable, int64_t max_entries)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, max_entries >= 1, "max_entries must be >= 1, got " + std::to_string(max_entries));
    TRS_GUARD(err, {
#if TRS_HAVE_CUDA_MEMORY_SNAPSHOT
        if (cuda_count() == 0) throw trs::invalid("memory history needs a CUDA device: this process sees none");
        if (enable)  // every allocation and free, with its C++ stack (Python's default context "all")
            torch::cuda::_record_memory_history(std::optional<std::string>("all"), std::optional<std::string>("all"),
                                                "all", static_cast<size_t>(max_entries));
        else
            torch::cuda::_record_memory_history(std::optional<std::string>(), std::optional<std::string>("all"),
                                                "all", static_cast<size_t>(max_entries));
#else
        (void)enable;
        throw_no_memory_snapshot();
#endif
        err.clear();
        return TRS_OK;
    })
}

extern "C" trs_status trs_cuda_memory_snapshot(void **data, size_t *nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, data != nullptr && nbytes != nullptr, "data or nbytes is NULL");
    *data = nullptr;
    *nbytes = 0;
    TRS_GUARD(err, {
#if TRS_HAVE_CUDA_MEMORY_SNAPSHOT
        if (cuda_count() == 0) throw trs::invalid("a memory snapshot needs a CUDA device: this process sees none");
        const std::string pickled = torch::cuda::_memory_snapshot_pickled();
        void *buf = std::malloc(pickled.size() ? pickled.size() : 1);
        if (!buf) throw std::bad_alloc();
        std::memcpy(buf, pickled.data(), pickled.size());
        *data = buf;
        *nbytes = pickled.size();
#else
        throw_no_memory_snapshot();
#endif
        err.clear();
        return TRS_OK;
    })
}
