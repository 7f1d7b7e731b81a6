// compat.hpp -- the one place where the shim depends on the libtorch version (Debian's 1.13.1 and PyTorch 2.11.0's
// wheel are the two lanes CI builds, docs/libtorch.md). Every other file calls what is defined here; no other file
// tests TORCH_VERSION_* or AT_MKL_ENABLED.
//
// What differs, and where it is used:
//   optimizer state key    state_ maps TensorImpl* -> state; the key is the address as a std::string in 1.x and
//                          the void* itself in 2.x (optim_state_key: state.cpp, optim_fused.cpp).
//   Allocator::allocate    `const` in 1.x, not const from 2.3 (TRS_ALLOCATE_CONST: memory.cpp).
//   autocast state         per-backend calls in 1.13 (set_cpu_enabled, set_enabled for CUDA, ...), one call
//                          taking the device type from 2.4 (set_autocast_enabled(device, ...)) (step.cpp).
//   CUDA device index      getDeviceStats/emptyCache take int in 1.x, c10::DeviceIndex in 2.x (device.cpp).
//   interop thread count   at::get_num_interop_threads() is int in 1.x, size_t in 2.x (core.cpp casts it).
//   CUDA memory history    torch::cuda::_record_memory_history / _memory_snapshot_pickled exist from 2.1
//                          (TRS_HAVE_CUDA_MEMORY_SNAPSHOT: device.cpp).
//   Adam's reference step  what trainrun must equal bit for bit: libtorch's own torch::optim::Adam(W)::step in
//                          1.13 (the 1.13 reference traces are Python 1.13's, which does the same operations), and
//                          Python 2.x's single-tensor Adam in 2.x (exp_avg.lerp_, bias_correction2 ** 0.5) whose
//                          C++ twin libtorch 2.x does not have (TRS_ADAM_PYTHON_2X: optim_fused.cpp).
//   warning handler        process(SourceLocation, msg, verbatim) and c10::Warning:: in 1.x; process(const
//                          c10::Warning &) and c10::WarningUtils:: from 2.0 (QuietWarning: pool.cpp).
//   float sqrt kernel      ATen built with MKL (the 2.x wheels) computes a float tensor's sqrt with MKL VML's
//                          vmsSqrt in high-accuracy mode, not with a correctly rounded vector sqrt; the fused Adam
//                          step calls the same function (TRS_SQRT_VML: optim_fused.cpp).
#pragma once

#include <ATen/Config.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

#define TRS_TORCH_AT_LEAST(major, minor) \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if TRS_TORCH_AT_LEAST(2, 3)
#define TRS_ALLOCATE_CONST
#else
#define TRS_ALLOCATE_CONST const
#endif

#if TRS_TORCH_AT_LEAST(2, 0)
#define TRS_ADAM_PYTHON_2X 1
#else
#define TRS_ADAM_PYTHON_2X 0
#endif

#if AT_MKL_ENABLED()
#define TRS_SQRT_VML 1
#else
#define TRS_SQRT_VML 0
#endif

#if defined(TRS_WITH_CUDA) && TRS_TORCH_AT_LEAST(2, 1)
#define TRS_HAVE_CUDA_MEMORY_SNAPSHOT 1
#else
#define TRS_HAVE_CUDA_MEMORY_SNAPSHOT 0
#endif

namespace trs::compat {

// The key of parameter p in torch::optim::Optimizer::state() (Map: that map's type).
template <typename Map>
typename Map::key_type optim_state_key(const at::Tensor &p)
{
    using Key = typename Map::key_type;
    if constexpr (std::is_same_v<Key, std::string>) {
        std::ostringstream o;  // c10::guts::to_string's formatting in 1.x (gone from 2.x's headers)
        o << static_cast<const void *>(p.unsafeGetTensorImpl());
        return o.str();
    } else
        return static_cast<Key>(p.unsafeGetTensorImpl());
}

// The device-index parameter type of the CUDA caching allocator's calls.
#if TORCH_VERSION_MAJOR >= 2
using CudaDeviceIndex = c10::DeviceIndex;
#else
using CudaDeviceIndex = int;
#endif

// This thread's autocast state for one backend (CPU or CUDA): enabled flag and the lower-precision dtype.
inline bool autocast_enabled(c10::DeviceType t)
{
#if TRS_TORCH_AT_LEAST(2, 4)
    return at::autocast::is_autocast_enabled(t);
#else
    return t == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType t)
{
#if TRS_TORCH_AT_LEAST(2, 4)
    return at::autocast::get_autocast_dtype(t);
#else
    return t == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast(c10::DeviceType t, bool on, at::ScalarType dtype)
{
#if TRS_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(t, on);
    at::autocast::set_autocast_dtype(t, dtype);
#else
    if (t == c10::DeviceType::CUDA) {
        at::autocast::set_enabled(on);
        at::autocast::set_autocast_gpu_dtype(dtype);
    } else {
        at::autocast::set_cpu_enabled(on);
        at::autocast::set_autocast_cpu_dtype(dtype);
    }
#endif
}

// While alive, warnings whose message contains `drop` are not passed on; every other warning goes to the handler
// that was in place (the process-wide one: c10's handler is not per thread).
class QuietWarning : public c10::WarningHandler {
  public:
    explicit QuietWarning(const char *drop)
        : drop_(drop),
#if TRS_TORCH_AT_LEAST(2, 0)
          prev_(c10::WarningUtils::get_warning_handler())
    {
        c10::WarningUtils::set_warning_handler(this);
    }
    ~QuietWarning() override { c10::WarningUtils::set_warning_handler(prev_); }
    void process(const c10::Warning &w) override
    {
        if (w.msg().find(drop_) == std::string::npos) prev_->process(w);
    }
#else
          prev_(c10::Warning::get_warning_handler())
    {
        c10::Warning::set_warning_handler(this);
    }
    ~QuietWarning() override { c10::Warning::set_warning_handler(prev_); }
    void process(const c10::SourceLocation &loc, const std::string &msg, const bool verbatim) override
    {
        if (msg.find(drop_) == std::string::npos) prev_->process(loc, msg, verbatim);
    }
#endif
    QuietWarning(const QuietWarning &) = delete;
    QuietWarning &operator=(const QuietWarning &) = delete;

  private:
    const char *drop_;
    c10::WarningHandler *prev_;
};

}  // namespace trs::compat
