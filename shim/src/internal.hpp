// internal.hpp -- shim-private definitions shared by the shim's translation units. Never included from C.
#pragma once

#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "compat.hpp"
#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* the test-only entry points, defined here too */

// One interface over the two kinds of model (DESIGN.md "Models"): a sequential model built from layer specs
// (`seq`), or a TorchScript module loaded from an archive (`jit`, null for a YAML model). The rest of the shim
// goes through parameters() / forward() / train() / is_training() and trs::state_dict(), never through seq or jit.
struct trs_model {
    torch::nn::Sequential seq;                // YAML model (empty for TorchScript)
    std::unique_ptr<torch::jit::Module> jit;  // TorchScript model (torch::jit::load), or null
    std::vector<torch::Tensor> debug_leak;  // debug.leak_bytes_per_step: tensors kept alive on purpose
    int64_t debug_leak_bytes = 0;
    int64_t debug_eval_leak_bytes = 0;  // debug.leak_bytes_per_eval_batch
    std::vector<int64_t> input_shape;  // per sample
    // The input's dtype: float32 features, or int64 token ids (a TorchScript module whose forward fails on float32
    // and runs on int64: an embedding). Decided by the dry forward at load; the steps refuse the other one.
    torch::ScalarType input_dtype = torch::kFloat32;
    int64_t output_dim = 0;             // size of the output's last dim (classes)
    std::vector<int64_t> output_shape;  // per sample: [C] or [T, C] (dry forward at creation)
    torch::Device device{torch::kCPU};  // where parameters, buffers, gradients, optimizer state and EMA live
    std::string err;

    // Parameters in PyTorch's parameters() order (module by module, depth first): the optimizer's order.
    std::vector<torch::Tensor> parameters() const;
    // forward(x); a TorchScript module's result must be a tensor (checked at load).
    torch::Tensor forward(const torch::Tensor &x);
    // nn.Module.train(on) / .training, for every submodule.
    void train(bool on);
    bool is_training() const;
};

struct trs_optimizer {
    trs_model *model = nullptr;
    trs_optim_kind kind = TRS_OPT_SGD;
    std::unique_ptr<torch::optim::Optimizer> opt;
    std::string err;
};

struct trs_ema {
    trs_model *model = nullptr;
    trs_ema_options opts{};
    std::vector<std::string> names;    // state_dict names, in state_dict order
    std::vector<torch::Tensor> live;   // the model's state_dict tensors (the module's own handles)
    std::vector<torch::Tensor> avg;    // the EMA's tensors: same shapes; float entries fp32; never require grad
    std::vector<char> averaged;        // 1: averaged on update; 0: copied (integer buffers, buffers: copy)
    int64_t updates = 0;
    std::string err;
};

namespace trs {

// Thread-local message for handle-less calls (trs_last_error()).
std::string &last_error();

// The exception funnel: every exported function body runs inside TRS_GUARD(errstring, { ... }). Nothing escapes:
// c10 errors map to TRS_E_RUNTIME (message without the C++ backtrace), bad_alloc to TRS_E_NOMEM,
// trs::invalid to TRS_E_INVALID, trs::comm_failure to TRS_E_DIST, anything else to TRS_E_RUNTIME.
struct invalid : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A collective of a process group failed (peer gone, timeout): TRS_E_DIST.
struct comm_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Check a TorchScript archive's bytes (a zip as torch.jit.save writes it) before libtorch reads them: the zip
// structure, every pickle, the code's class bodies (archive.cpp). Returns the bytes libtorch is to load (the
// archive without its .debug_pkl source maps). Throws trs::invalid naming `file` and the entry.
std::string check_archive(const std::string &file, const unsigned char *data, size_t n);

// Store an error message without letting an exception (bad_alloc while copying) escape: used by the macros below,
// which run at the ABI boundary.
// "[a, b, c]": a shape as the shim's messages write it.
inline std::string shape_str(c10::IntArrayRef s)
{
    std::string o = "[";
    for (size_t i = 0; i < s.size(); i++) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + "]";
}

inline void set_error(std::string &dst, const char *msg) noexcept
{
    try {
        dst = msg;
    } catch (...) {
    }
}

// Install the counting CPU allocator (once per process; every later call is a no-op). Called by every shim entry
// point that can allocate tensors, so nothing the shim creates escapes the count. Never throws: a failure to
// install (out of memory) leaves libtorch's allocator in place and the counts at 0.
void install_counting_allocator() noexcept;

// Install trainrun's CPU kernels in the dispatcher (once per process; pool.cpp): max_pool2d's forward for
// contiguous NCHW float32 / bfloat16 without padding, bit for bit ATen's. Called where models are made. Never
// throws: a failure leaves ATen's kernels in place.
void install_cpu_kernels() noexcept;

// Tags the allocations of this scope with a trs_mem_phase (thread-local; worker threads of the intra-op pool
// see the newest scope's phase), restoring the previous one when the scope ends.
struct PhaseScope {
    int prev_thread, prev_global;
    explicit PhaseScope(int phase);
    ~PhaseScope();
    PhaseScope(const PhaseScope &) = delete;
    PhaseScope &operator=(const PhaseScope &) = delete;
};

// Restores a module's train/eval mode when the scope ends, however it ends.
struct ModeRestore {
    trs_model &m;
    bool was;
    explicit ModeRestore(trs_model &mod) : m(mod), was(mod.is_training()) {}
    ~ModeRestore()
    {
        try {
            m.train(was);
        } catch (...) {  // a TorchScript module sets an attribute per submodule; nothing may escape a destructor
        }
    }
    ModeRestore(const ModeRestore &) = delete;
    ModeRestore &operator=(const ModeRestore &) = delete;
};

// The model's parameters and buffers in PyTorch state_dict order (module by module: its parameters, then its
// buffers, then its children's, depth first), named as PyTorch names them ("0.weight", "1.running_mean",
// "layer1.bn1.num_batches_tracked", ...).
std::vector<std::pair<std::string, torch::Tensor>> state_dict(const trs_model &m);

// Swaps the storage of the model's parameters and buffers with an EMA's for the lifetime of the scope
// (Tensor::set_data on both sides: metadata and storage pointers change hands, no bytes are copied). The
// destructor swaps back, however the scope ends. Takes a NoGradGuard of its own.
struct EmaSwap {
    trs_ema *ema;
    explicit EmaSwap(trs_ema *e);
    ~EmaSwap();
    EmaSwap(const EmaSwap &) = delete;
    EmaSwap &operator=(const EmaSwap &) = delete;
};

// Whether TorchScript forwards run with the graph executor's optimisations (torchscript.cpp: off unless
// TRAINRUN_JIT_OPTIMIZE=1, a bench-only switch), and the one place a TorchScript forward is called, under that
// setting (thread-local in libtorch, so set per call).
bool jit_optimize();
torch::Tensor jit_forward(torch::jit::Module &m, const torch::Tensor &x);

// ---- the fused Adam/AdamW step (optim_fused.cpp)

// Implemented by the optimizers of make_adam(w): whether the last step() ran the fused pass over every parameter
// (false: the reference step ran, for a tensor or an option the fused pass does not cover).
struct FusedStep {
    bool last_step_fused = false;
    virtual ~FusedStep() = default;
};

// The CPU has AVX2 and FMA and the fused step equals the reference step bit for bit on a probe in this process
// (its ATen CPU capability); checked once, later calls return the answer.
bool fused_adam_supported();

// torch::optim::AdamW / Adam with the same options, state and serialization, whose step() is the fused pass per
// parameter where `fuse` (only where fused_adam_supported()) and the tensors allow, and otherwise the reference
// step of this libtorch version (optim_fused.cpp, compat.hpp): libtorch's own in 1.x, Python's sequence in 2.x.
std::unique_ptr<torch::optim::Optimizer> make_adamw(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                    const torch::optim::AdamWOptions &defaults, bool fuse);
std::unique_ptr<torch::optim::Optimizer> make_adam(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                   const torch::optim::AdamOptions &defaults, bool fuse);

// Average the parameters' gradients over the group in place (throws; dist.cpp), inside trs_train_step when its
// options name a group: the gradients are flattened, in parameter order, into float32 buckets of at most
// `bucket_bytes` (DistributedDataParallel's bucket_cap_mb, 25 MiB by default when bucket_bytes is 0; a parameter is
// never split), each bucket is all-reduced (sum) and divided by the world size. A parameter without a gradient
// contributes zeros (and gets a zero gradient). `nonfinite` (may be NULL): in, 1 if this rank's loss was not finite;
// out, the number of ranks whose loss was not finite (it travels as one more element of the last bucket).
void average_grads(trs_dist &d, trs_model &m, size_t bucket_bytes, int *nonfinite);

// ---- devices (device.cpp): the only code that knows whether tensors are on the CPU or a CUDA device.

// A host tensor (e.g. the caller's batch memory wrapped by from_blob) on `dev`. The CPU: the tensor itself (no copy,
// no allocation). CUDA: copied into pinned host memory (the caching host allocator, which keeps each block until
// the copy that reads it has completed) and from there to the device with non_blocking, so the host does not wait.
torch::Tensor to_device(const torch::Tensor &host, const torch::Device &dev);

// A tensor's values in contiguous host memory: the tensor itself when it already is a contiguous CPU tensor,
// else a copy (a device tensor: a synchronising device-to-host copy).
torch::Tensor to_host(const torch::Tensor &t);

// Overwrite `dst` (any device, contiguous) with nbytes of host memory laid out as dst: memcpy on the CPU, a copy
// through the host on a device. nbytes must equal dst's size in bytes (checked by the callers).
void copy_from_host(torch::Tensor &dst, const void *src, size_t nbytes);

// The scalars that leave a step, read back together. Each add() takes a one-element tensor of any dtype and
// returns its index; fetch() reads them all. On the CPU each value is read in place (item(): no copy, no
// allocation). On a CUDA device they are converted to float64 and stacked on the device, then copied to the host
// in one transfer: the one synchronisation of a step with the device, as loss.item() is in a PyTorch loop. Counts
// travel as doubles, exact below 2^53.
class Scalars {
  public:
    size_t add(const torch::Tensor &t);
    void fetch();
    double get(size_t i) const { return values_.at(i); }
    int64_t count(size_t i) const { return static_cast<int64_t>(values_.at(i)); }

  private:
    std::vector<torch::Tensor> tensors_;
    std::vector<double> values_;
};

// CUDA allocator statistics into s->cuda_* (CUDA builds; nothing otherwise). Called by trs_memory_stats_get.
void cuda_memory_stats(trs_memory_stats *s);

}  // namespace trs

#define TRS_GUARD(errstr, ...)                                                                  \
    try {                                                                                       \
        __VA_ARGS__                                                                             \
    } catch (const trs::invalid &e_) {                                                          \
        trs::set_error((errstr), e_.what());                                                    \
        return TRS_E_INVALID;                                                                   \
    } catch (const trs::comm_failure &e_) {                                                     \
        trs::set_error((errstr), e_.what());                                                    \
        return TRS_E_DIST;                                                                      \
    } catch (const c10::Error &e_) {                                                            \
        trs::set_error((errstr), e_.what_without_backtrace());                                  \
        return TRS_E_RUNTIME;                                                                   \
    } catch (const std::bad_alloc &) {                                                          \
        trs::set_error((errstr), "out of memory");                                              \
        return TRS_E_NOMEM;                                                                     \
    } catch (const std::exception &e_) {                                                        \
        trs::set_error((errstr), e_.what());                                                    \
        return TRS_E_RUNTIME;                                                                   \
    } catch (...) {                                                                             \
        trs::set_error((errstr), "unknown C++ exception");                                      \
        return TRS_E_RUNTIME;                                                                   \
    }

// Fail with TRS_E_INVALID and `msg` (a std::string expression) into `errstr` unless `cond` holds. Building the
// message may allocate: it is caught here, since this check often stands outside TRS_GUARD.
#define TRS_CHECK_ARG(errstr, cond, msg)                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            try {                                                                               \
                (errstr) = (msg);                                                               \
            } catch (...) {                                                                     \
            }                                                                                   \
            return TRS_E_INVALID;                                                               \
        }                                                                                       \
    } while (0)

namespace trs {

// The body of an entry point that reads one value out of a handle (a model, an EMA, an optimizer) into *out:
// TRS_E_INVALID for a NULL handle, or for a NULL out with `null_msg` ("count is NULL") in the handle's message;
// otherwise *out = value(), under TRS_GUARD (a libtorch error becomes the handle's message and status).
template <class Handle, class T, class Value>
trs_status read_out(Handle *h, T *out, const char *null_msg, Value value)
{
    if (!h) return TRS_E_INVALID;
    TRS_CHECK_ARG(h->err, out != nullptr, null_msg);
    TRS_GUARD(h->err, {
        *out = value();
        return TRS_OK;
    })
}

}  // namespace trs
