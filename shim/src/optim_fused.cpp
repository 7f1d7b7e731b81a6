// optim_fused.cpp -- Adam and AdamW whose step() makes one pass over each parameter's elements (read p, g, m, v;
// write p, m, v) where torch::optim's makes about eight ATen calls, each a dispatch and a pass over memory.
//
// The result is bit for bit torch::optim's: per element the same float operations in the same order with the same
// roundings as ATen 1.13's CPU kernels for libtorch's sequence (torch/csrc/api/src/optim/adamw.cpp, adam.cpp):
//
//   AdamW, weight_decay != 0:  p.mul_(1 - lr * wd)                         p = p * f(1 - lr*wd)
//   Adam,  weight_decay != 0:  grad = grad.add(p, wd)                      g = fma(p, f(wd), g)        (1)
//   exp_avg.mul_(b1).add_(grad, 1 - b1)                                    m = fma(g, f(1-b1), m * f(b1))   (1)
//   exp_avg_sq.mul_(b2).addcmul_(grad, grad, 1 - b2)                       v = fma(f(1-b2) * g, g, v * f(b2)) (2)
//   denom = (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)                      d = sqrt(v) / f(sqrt(bc2)) + f(eps)
//   p.addcdiv_(exp_avg, denom, -lr / bc1)                                  p = p + f(-lr/bc1) * m / d
//
// In libtorch 2.x the step to equal is Python 2.x's single-tensor Adam (torch/optim/adam.py, the CPU default),
// which differs from the above in two places (compat.hpp, TRS_ADAM_PYTHON_2X / TRS_SQRT_VML):
//
//   exp_avg.lerp_(grad, 1 - b1)         w = f(1-b1); |w| < 0.5: m = fma(w, g - m, m)
//                                                    else:     m = fma(w - 1, g - m, g)   (ATen's lerp_vec)
//   denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(eps)    sqrt(v) is MKL VML's vmsSqrt (high
//                                       accuracy, not always correctly rounded) in ATen built with MKL
//
// Where the fused pass does not apply, the 2.x reference step below runs that sequence in ATen ops; libtorch 2.x's
// own torch::optim::Adam::step does not (it keeps 1.x's mul_/add_ for exp_avg).
//
// f(x): libtorch's double scalar rounded to float, as ATen does for a float tensor; bc1 = 1 - b1^step and
// bc2 = 1 - b2^step in double, as libtorch computes them. (1) ATen's add with alpha is vec::fmadd, one rounding.
// (2) addcmul's `self + value * t1 * t2` is contracted by the compiler of ATen's AVX2/AVX512 kernels into
// fma(value * t1, t2, self). This file is compiled with -ffp-contract=off (CMakeLists.txt), so the compiler fuses
// nothing on its own: each fma above is written as one, every other operation rounds on its own.
//
// Whether the libtorch at hand computes exactly that (its CPU capability: ATEN_CPU_CAPABILITY=default has no FMA at
// all) is checked once per process against torch::optim on a probe (fused_adam_supported); where it does not, or the
// CPU has no AVX2/FMA, trs_optimizer_create uses torch::optim's own classes. A step falls back to torch::optim's own
// step() whenever any parameter, gradient or state tensor is not a contiguous float32 CPU tensor, or for amsgrad or
// a closure. The state is libtorch's own (Adam/AdamWParamState in state_), so state_dict, checkpoints and resume are
// the same as with torch::optim.
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "internal.hpp"

namespace {

// One parameter's float constants, each rounded from libtorch's double where ATen rounds it.
struct AdamConsts {
    float decay;  // AdamW: p * decay, decay = 1 - lr * weight_decay
    float wd;     // Adam: g + wd * p
    float beta1, one_minus_beta1, beta2, one_minus_beta2;
    float lerp_coeff;  // 2.x: w or w - 1 (w = f(1 - beta1)), as ATen's lerp_vec picks by |w| < 0.5
    bool lerp_small;   // 2.x: |w| < 0.5
    float sqrt_bc2;    // sqrt(1 - beta2^step)
    float eps;
    float neg_step_size;  // -lr / (1 - beta1^step)
};

enum class Decay { none, decoupled, coupled };

#if TRS_SQRT_VML
// MKL VML's single-precision sqrt as ATen calls it (ATen/cpu/vml.h: VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE),
// found in the process (libtorch_cpu exports it); null if absent, and then the fused pass is not used.
using VmsSqrt = void (*)(int n, const float *a, float *r, long long mode);
constexpr long long kVmlMode = 0x2 | 0x140000 | 0x100;
VmsSqrt vms_sqrt()
{
    static const VmsSqrt f = reinterpret_cast<VmsSqrt>(dlsym(RTLD_DEFAULT, "vmsSqrt"));
    return f;
}
constexpr int64_t kSqrtBlock = 256;  // elements per VML call: the results do not depend on the block

// MKL's per-thread thread count (mkl_set_num_threads_local, exported by libtorch_cpu as MKL_Set_Num_Threads_Local),
// held at 1 while a chunk of the fused pass runs. Without it, every 256-element vmsSqrt call with intra-op threads
// > 1 opens MKL's own OpenMP region -- a team wake-up, or a nested region inside at::parallel_for -- which costs more
// than the sqrt itself. VML's sqrt is elementwise, so the result does not depend on how MKL splits it.
using MklSetNumThreadsLocal = int (*)(int);
class SequentialMkl {
  public:
    SequentialMkl() : set_(fn()), prev_(set_ ? set_(1) : 0) {}
    ~SequentialMkl()
    {
        if (set_) set_(prev_);  // 0 = back to the global count
    }
    SequentialMkl(const SequentialMkl &) = delete;
    SequentialMkl &operator=(const SequentialMkl &) = delete;

  private:
    static MklSetNumThreadsLocal fn()
    {
        static const MklSetNumThreadsLocal f =
            reinterpret_cast<MklSetNumThreadsLocal>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
        return f;
    }
    MklSetNumThreadsLocal set_;
    int prev_;
};
#endif

// The first and second moments of one element, in libtorch's version's rounding (header comment).
__attribute__((target("avx2,fma"))) inline float first_moment(float m, float g, const AdamConsts &c)
{
#if TRS_ADAM_PYTHON_2X
    return c.lerp_small ? std::fma(c.lerp_coeff, g - m, m) : std::fma(c.lerp_coeff, g - m, g);
#else
    return std::fma(g, c.one_minus_beta1, m * c.beta1);
#endif
}

__attribute__((target("avx2,fma"))) inline float second_moment(float v, float g, const AdamConsts &c)
{
    return std::fma(c.one_minus_beta2 * g, g, v * c.beta2);
}

// The element loop: plain float code the compiler vectorizes (AVX2; the fma()s become vfmadd, the rest stays
// unfused under -ffp-contract=off). n elements from index 0 of each array; the arrays do not overlap.
template <Decay D>
__attribute__((target("avx2,fma"))) void adam_elements(float *__restrict p, const float *__restrict g,
                                                       float *__restrict m, float *__restrict v, int64_t n,
                                                       const AdamConsts c)
{
#if TRS_SQRT_VML
    // in blocks: moments (and decayed p) first, then VML's sqrt of the block's v, then the update
    float root[kSqrtBlock];
    const VmsSqrt vsqrt = vms_sqrt();
    const SequentialMkl sequential;
    for (int64_t b = 0; b < n; b += kSqrtBlock) {
        const int64_t nb = std::min(kSqrtBlock, n - b);
        float *__restrict pb = p + b;
        float *__restrict mb = m + b;
        float *__restrict vb = v + b;
        const float *__restrict gb = g + b;
        for (int64_t i = 0; i < nb; i++) {
            float pi = pb[i];
            float gi = gb[i];
            if constexpr (D == Decay::decoupled) pi = pi * c.decay;
            if constexpr (D == Decay::coupled) gi = std::fma(pi, c.wd, gi);
            mb[i] = first_moment(mb[i], gi, c);
            vb[i] = second_moment(vb[i], gi, c);
            pb[i] = pi;
        }
        vsqrt(static_cast<int>(nb), vb, root, kVmlMode);
        for (int64_t i = 0; i < nb; i++) {
            const float denom = root[i] / c.sqrt_bc2 + c.eps;
            pb[i] = pb[i] + c.neg_step_size * mb[i] / denom;
        }
    }
#else
    for (int64_t i = 0; i < n; i++) {
        float pi = p[i];
        float gi = g[i];
        if constexpr (D == Decay::decoupled) pi = pi * c.decay;
        if constexpr (D == Decay::coupled) gi = std::fma(pi, c.wd, gi);
        const float mi = first_moment(m[i], gi, c);
        const float vi = second_moment(v[i], gi, c);
        const float denom = std::sqrt(vi) / c.sqrt_bc2 + c.eps;
        p[i] = pi + c.neg_step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
#endif
}

// Over threads as ATen's TensorIterator splits an elementwise op: chunks of at least GRAIN_SIZE elements, serial
// below that or with one intra-op thread. The arithmetic does not depend on where a chunk starts.
template <Decay D>
void adam_tensor(float *p, const float *g, float *m, float *v, int64_t n, const AdamConsts &c)
{
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
        adam_elements<D>(p + begin, g + begin, m + begin, v + begin, end - begin, c);
    });
}

bool cpu_float_contiguous(const torch::Tensor &t, const torch::Tensor &like)
{
    return t.defined() && t.layout() == torch::kStrided && t.device().is_cpu() &&
           t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.sizes().equals(like.sizes());
}

// Adam (Decoupled = false: L2 added to the gradient) or AdamW (true: decoupled decay), with libtorch's options,
// state and serialization; only step() is its own: the fused pass where it applies (fuse and fusable()), the
// reference step of this libtorch version otherwise.
template <class Base, class Options, class State, bool Decoupled>
class FusedAdam final : public Base, public trs::FusedStep {
  public:
    FusedAdam(std::vector<torch::optim::OptimizerParamGroup> groups, const Options &defaults, bool fuse)
        : Base(std::move(groups), defaults), fuse_(fuse)
    {
    }

    torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override
    {
        last_step_fused = false;
        if (!fuse_ || closure != nullptr || !fusable()) return reference_step(closure);
        torch::NoGradGuard no_grad;
        for (auto &group : this->param_groups_) {
            const auto &o = static_cast<const Options &>(group.options());
            const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
            const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
            for (auto &p : group.params()) {
                const torch::Tensor &grad = p.grad();
                if (!grad.defined()) continue;
                State &s = state_of(p, false);
                s.step(s.step() + 1);
                const double bias_correction1 = 1 - std::pow(beta1, s.step());
                const double bias_correction2 = 1 - std::pow(beta2, s.step());
                const double step_size = lr / bias_correction1;
                AdamConsts c;
                c.decay = static_cast<float>(1 - lr * wd);
                c.wd = static_cast<float>(wd);
                c.beta1 = static_cast<float>(beta1);
                c.one_minus_beta1 = static_cast<float>(1 - beta1);
                c.lerp_small = std::abs(c.one_minus_beta1) < 0.5f;
                c.lerp_coeff = c.lerp_small ? c.one_minus_beta1 : c.one_minus_beta1 - 1.0f;
                c.beta2 = static_cast<float>(beta2);
                c.one_minus_beta2 = static_cast<float>(1 - beta2);
                c.sqrt_bc2 = static_cast<float>(bias_correction2_sqrt(bias_correction2));
                c.eps = static_cast<float>(eps);
                c.neg_step_size = static_cast<float>(-step_size);
                float *pp = p.template data_ptr<float>();
                const float *gp = grad.template data_ptr<float>();
                float *mp = s.exp_avg().template data_ptr<float>();
                float *vp = s.exp_avg_sq().template data_ptr<float>();
                const int64_t n = p.numel();
                if (wd == 0) adam_tensor<Decay::none>(pp, gp, mp, vp, n, c);
                else if (Decoupled) adam_tensor<Decay::decoupled>(pp, gp, mp, vp, n, c);
                else adam_tensor<Decay::coupled>(pp, gp, mp, vp, n, c);
                // written in place, as ATen's in-place ops would have: autograd sees the new versions
                p.unsafeGetTensorImpl()->bump_version();
                s.exp_avg().unsafeGetTensorImpl()->bump_version();
                s.exp_avg_sq().unsafeGetTensorImpl()->bump_version();
            }
        }
        last_step_fused = true;
        return {};
    }

  private:
    bool fuse_;

    static double bias_correction2_sqrt(double bc2)
    {
#if TRS_ADAM_PYTHON_2X
        return std::pow(bc2, 0.5);  // Python 2.x: bias_correction2 ** 0.5
#else
        return std::sqrt(bc2);
#endif
    }

    // p's state, made as libtorch makes it on a parameter's first step.
    State &state_of(const torch::Tensor &p, bool amsgrad)
    {
        const auto key = trs::compat::optim_state_key<std::decay_t<decltype(this->state_)>>(p);
        auto it = this->state_.find(key);
        if (it == this->state_.end()) {
            auto s = std::make_unique<State>();
            s->step(0);
            s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
            s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
            if (amsgrad) s->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
            this->state_[key] = std::move(s);
            it = this->state_.find(key);
        }
        return static_cast<State &>(*it->second);
    }

    // The step trainrun must equal bit for bit (compat.hpp): libtorch's own in 1.x; in 2.x Python's
    // _single_tensor_adam (torch/optim/adam.py) for capturable=False, maximize=False, in ATen ops.
    torch::Tensor reference_step(torch::optim::Optimizer::LossClosure closure)
    {
#if TRS_ADAM_PYTHON_2X
        torch::Tensor loss;
        if (closure != nullptr) {
            torch::AutoGradMode enable_grad(true);
            loss = closure();
        }
        torch::NoGradGuard no_grad;
        for (auto &group : this->param_groups_) {
            const auto &o = static_cast<const Options &>(group.options());
            const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
            const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
            for (auto &p : group.params()) {
                if (!p.grad().defined()) continue;
                torch::Tensor grad = p.grad();
                State &s = state_of(p, o.amsgrad());
                s.step(s.step() + 1);
                if (wd != 0) {
                    if (Decoupled) p.mul_(1 - lr * wd);
                    else grad = grad.add(p, wd);
                }
                s.exp_avg().lerp_(grad, 1 - beta1);
                s.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
                const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(s.step()));
                const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(s.step()));
                const double step_size = lr / bias_correction1;
                const double bc2_sqrt = bias_correction2_sqrt(bias_correction2);
                torch::Tensor denom;
                if (o.amsgrad()) {
                    torch::Tensor max_sq = s.max_exp_avg_sq();
                    at::maximum_out(max_sq, max_sq, s.exp_avg_sq());
                    denom = (max_sq.sqrt() / bc2_sqrt).add_(eps);
                } else {
                    denom = (s.exp_avg_sq().sqrt() / bc2_sqrt).add_(eps);
                }
                p.addcdiv_(s.exp_avg(), denom, -step_size);
            }
        }
        return loss;
#else
        return Base::step(closure);
#endif
    }

    // Every parameter with a gradient, its gradient and its state (if any yet) are contiguous float32 CPU tensors
    // of the parameter's shape, no group uses amsgrad, and (with MKL) VML's sqrt is there.
    bool fusable()
    {
#if TRS_SQRT_VML
        if (vms_sqrt() == nullptr) return false;
#endif
        for (auto &group : this->param_groups_) {
            if (static_cast<const Options &>(group.options()).amsgrad()) return false;
            for (auto &p : group.params()) {
                const torch::Tensor &grad = p.grad();
                if (!grad.defined()) continue;
                if (!cpu_float_contiguous(p, p) || !cpu_float_contiguous(grad, p)) return false;
                auto it = this->state_.find(trs::compat::optim_state_key<std::decay_t<decltype(this->state_)>>(p));
                if (it == this->state_.end()) continue;
                const auto &s = static_cast<const State &>(*it->second);
                if (!cpu_float_contiguous(s.exp_avg(), p) || !cpu_float_contiguous(s.exp_avg_sq(), p)) return false;
            }
        }
        return true;
    }
};

using FusedAdamW = FusedAdam<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>;
using FusedAdamL2 = FusedAdam<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState, false>;

// Deterministic probe values in [-scale, scale] (an LCG: the global generator is not touched, so a run's random
// stream is the same whether the probe ran or not).
torch::Tensor probe_values(uint64_t &state, int64_t n, float scale)
{
    torch::Tensor t = torch::empty({n}, torch::kFloat32);
    float *d = t.data_ptr<float>();
    for (int64_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        d[i] = scale * (static_cast<float>(state >> 40) / static_cast<float>(1ULL << 24) * 2.0f - 1.0f);
    }
    return t;
}

// The fused pass and the reference step, same start, same gradients, a few steps: equal bit for bit?
template <class Fused, class Options>
bool probe_matches(double weight_decay)
{
    // 100 elements: whole vectors and a tail for AVX2 (16 a loop) and AVX512 (32); gradients over 7 magnitudes.
    constexpr int64_t n = 100;
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    const torch::Tensor p0 = probe_values(rng, n, 1.0f);
    torch::Tensor a = p0.clone().requires_grad_(true), b = p0.clone().requires_grad_(true);
    const auto opts = Options(1e-2).betas({0.9, 0.999}).eps(1e-8).weight_decay(weight_decay);
    Fused fa({torch::optim::OptimizerParamGroup({a})}, opts, true);
    Fused rb({torch::optim::OptimizerParamGroup({b})}, opts, false);
    for (int step = 0; step < 4; step++) {
        const torch::Tensor g = probe_values(rng, n, std::pow(10.0f, static_cast<float>(step % 7 - 4)));
        a.mutable_grad() = g.clone();
        b.mutable_grad() = g.clone();
        fa.step();
        rb.step();
        if (!fa.last_step_fused || !torch::equal(a, b)) return false;
    }
    return true;
}

bool probe()
{
    torch::NoGradGuard no_grad;
    using namespace torch::optim;
    for (double wd : {0.0, 1e-2})
        if (!probe_matches<FusedAdamW, AdamWOptions>(wd) || !probe_matches<FusedAdamL2, AdamOptions>(wd))
            return false;
    return true;
}

}  // namespace

bool trs::fused_adam_supported()
{
    static std::once_flag once;
    static bool ok = false;
    std::call_once(once, [] {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
        try {
            ok = probe();
        } catch (...) {
            ok = false;  // e.g. out of memory: torch::optim's own step then
        }
    });
    return ok;
}

std::unique_ptr<torch::optim::Optimizer> trs::make_adamw(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                         const torch::optim::AdamWOptions &defaults, bool fuse)
{
    return std::make_unique<FusedAdamW>(std::move(groups), defaults, fuse);
}

std::unique_ptr<torch::optim::Optimizer> trs::make_adam(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                        const torch::optim::AdamOptions &defaults, bool fuse)
{
    return std::make_unique<FusedAdamL2>(std::move(groups), defaults, fuse);
}
