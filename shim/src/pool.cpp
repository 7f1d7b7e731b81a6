// pool.cpp -- max_pool2d's CPU forward for the layout trainrun's models use: a contiguous NCHW (or CHW) float32 or
// bfloat16 input, no padding, no dilation, floor mode. ATen's kernel (aten/src/ATen/native/cpu/MaxPoolKernel.cpp,
// cpu_max_pool) walks every output element on its own, with a branch per input element; here each output row is
// one pass over its input rows with selects instead of branches, which the compiler vectorises (-O3, an AVX2 and an
// AVX-512 clone chosen at run time). This forward is where a convnet's step spent most of its ATen time.
//
// The result is ATen's bit for bit, values and indices: per output element the same scan (rows top to bottom, each
// left to right) and the same rule -- an element is taken when it is greater than the maximum so far or is NaN, so
// the last NaN wins and a tie keeps the first -- and the same index (ih * W + iw within the plane). A bfloat16 NaN
// comes out as 0x7FC0, as ATen's float -> BFloat16 conversion writes it.
//
// It is installed as the CPU kernel of aten::max_pool2d_with_indices (the op autograd records for max_pool2d, in
// nn::MaxPool2d and in TorchScript models alike), so the backward is ATen's own max_pool2d_with_indices_backward
// over these indices. Every other case (padding, dilation, ceil_mode, channels-last, other dtypes, sizes ATen
// rejects) goes to ATen's own kernel through the op's out= variant, which keeps its registration.
// TRAINRUN_ATEN_MAX_POOL=1 leaves ATen's kernel in place (for comparing the two: bench/).
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <tuple>

#include "internal.hpp"

namespace {

std::atomic<int64_t> g_fast_calls{0};  // forwards the fast path computed (trs_max_pool2d_check reads it)

inline float load(float v) { return v; }
inline float load(c10::BFloat16 v)
{
    const uint32_t bits = static_cast<uint32_t>(v.x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
inline void store(float *dst, float v) { *dst = v; }
inline void store(c10::BFloat16 *dst, float v)
{
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    // exact: v is one of the inputs; a NaN becomes the canonical one, as c10::BFloat16(float) makes it
    dst->x = (v != v) ? static_cast<uint16_t>(0x7FC0) : static_cast<uint16_t>(bits >> 16);
}

// One output row of a 2x2 window with stride 2: r0, r1 are input rows 2*oh and 2*oh + 1; base = (2*oh) * W.
template <typename T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void row_2x2(
    const T *__restrict r0, const T *__restrict r1, T *__restrict out, int64_t *__restrict idx, int64_t ow_n,
    int64_t base, int64_t w)
{
    for (int64_t ow = 0; ow < ow_n; ow++) {
        const float a = load(r0[2 * ow]), b = load(r0[2 * ow + 1]);
        const float c = load(r1[2 * ow]), d = load(r1[2 * ow + 1]);
        float m = a;  // the first element is always taken (it beats -inf, or is -inf at the same index)
        int32_t code = 0;
        bool t = (b > m) | (b != b);
        m = t ? b : m;
        code = t ? 1 : code;
        t = (c > m) | (c != c);
        m = t ? c : m;
        code = t ? 2 : code;
        t = (d > m) | (d != d);
        m = t ? d : m;
        code = t ? 3 : code;
        store(out + ow, m);
        idx[ow] = base + 2 * ow + (code & 1) + static_cast<int64_t>(code >> 1) * w;
    }
}

// Any kernel and stride without padding: ATen's scan, element for element.
template <typename T>
void plane_generic(const T *in, T *out, int64_t *idx, int64_t h, int64_t w, int64_t oh_n, int64_t ow_n, int64_t kh,
                   int64_t kw, int64_t sh, int64_t sw)
{
    (void)h;
    for (int64_t oh = 0; oh < oh_n; oh++) {
        const int64_t ih0 = oh * sh;
        for (int64_t ow = 0; ow < ow_n; ow++) {
            const int64_t iw0 = ow * sw;
            float m = -std::numeric_limits<float>::infinity();
            int64_t mi = ih0 * w + iw0;
            for (int64_t ih = ih0; ih < ih0 + kh; ih++) {
                for (int64_t iw = iw0; iw < iw0 + kw; iw++) {
                    const float v = load(in[ih * w + iw]);
                    const bool t = (v > m) | (v != v);
                    m = t ? v : m;
                    mi = t ? ih * w + iw : mi;
                }
            }
            store(out + oh * ow_n + ow, m);
            idx[oh * ow_n + ow] = mi;
        }
    }
}

template <typename T>
void pool_planes(const T *in, T *out, int64_t *idx, int64_t planes, int64_t h, int64_t w, int64_t oh_n,
                 int64_t ow_n, int64_t kh, int64_t kw, int64_t sh, int64_t sw)
{
    const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, h * w));
    const bool two = kh == 2 && kw == 2 && sh == 2 && sw == 2;
    at::parallel_for(0, planes, grain, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; p++) {
            const T *pin = in + p * h * w;
            T *pout = out + p * oh_n * ow_n;
            int64_t *pidx = idx + p * oh_n * ow_n;
            if (two) {
                for (int64_t oh = 0; oh < oh_n; oh++)
                    row_2x2<T>(pin + 2 * oh * w, pin + (2 * oh + 1) * w, pout + oh * ow_n, pidx + oh * ow_n, ow_n,
                               2 * oh * w, w);
            } else {
                plane_generic<T>(pin, pout, pidx, h, w, oh_n, ow_n, kh, kw, sh, sw);
            }
        }
    });
}

// One value per dimension from an IntArrayRef of 1 or 2 (ATen's rule); `fallback` for an empty one.
bool pair_of(at::IntArrayRef a, int64_t fallback_h, int64_t fallback_w, int64_t &h, int64_t &w)
{
    if (a.empty()) {
        h = fallback_h;
        w = fallback_w;
        return true;
    }
    if (a.size() == 1) {
        h = w = a[0];
        return true;
    }
    if (a.size() == 2) {
        h = a[0];
        w = a[1];
        return true;
    }
    return false;
}

std::tuple<at::Tensor, at::Tensor> aten_max_pool2d(const at::Tensor &self, at::IntArrayRef kernel,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   at::IntArrayRef dilation, bool ceil_mode)
{
    at::Tensor out = at::empty({0}, self.options());
    at::Tensor idx = at::empty({0}, self.options().dtype(at::kLong));
    at::max_pool2d_with_indices_out(out, idx, self, kernel, stride, padding, dilation, ceil_mode);
    return std::make_tuple(out, idx);
}

// The forward, or an undefined pair when the case is not the fast path's.
std::tuple<at::Tensor, at::Tensor> fast_max_pool2d(const at::Tensor &self, at::IntArrayRef kernel,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   at::IntArrayRef dilation, bool ceil_mode)
{
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    if (ceil_mode || !self.defined() || self.device().type() != at::kCPU) return {};
    if (self.scalar_type() != at::kFloat && self.scalar_type() != at::kBFloat16) return {};
    if (self.dim() != 3 && self.dim() != 4) return {};
    if (!pair_of(kernel, 0, 0, kh, kw) || !pair_of(stride, kh, kw, sh, sw) || !pair_of(padding, 0, 0, ph, pw) ||
        !pair_of(dilation, 1, 1, dh, dw))
        return {};
    if (kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || ph != 0 || pw != 0 || dh != 1 || dw != 1) return {};
    if (!self.is_contiguous() || self.suggest_memory_format() != at::MemoryFormat::Contiguous) return {};
    const int64_t h = self.size(-2), w = self.size(-1);
    if (h < kh || w < kw || self.numel() == 0) return {};
    const int64_t oh_n = (h - kh) / sh + 1, ow_n = (w - kw) / sw + 1;
    const int64_t planes = self.numel() / (h * w);
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    shape[shape.size() - 2] = oh_n;
    shape[shape.size() - 1] = ow_n;
    at::Tensor out = at::empty(shape, self.options());
    at::Tensor idx = at::empty(shape, self.options().dtype(at::kLong));
    if (self.scalar_type() == at::kFloat)
        pool_planes<float>(self.data_ptr<float>(), out.data_ptr<float>(), idx.data_ptr<int64_t>(), planes, h, w,
                           oh_n, ow_n, kh, kw, sh, sw);
    else
        pool_planes<c10::BFloat16>(self.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(),
                                   idx.data_ptr<int64_t>(), planes, h, w, oh_n, ow_n, kh, kw, sh, sw);
    g_fast_calls.fetch_add(1, std::memory_order_relaxed);
    return std::make_tuple(out, idx);
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices_cpu(const at::Tensor &self, at::IntArrayRef kernel,
                                                               at::IntArrayRef stride, at::IntArrayRef padding,
                                                               at::IntArrayRef dilation, bool ceil_mode)
{
    auto fast = fast_max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
    if (std::get<0>(fast).defined()) return fast;
    return aten_max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
}

// The registration, never destroyed: it must outlive every model, to the end of the process. Held here so that it
// stays reachable (LeakSanitizer counts an unreachable one as a leak).
torch::Library *g_cpu_kernels = nullptr;

}  // namespace

void trs::install_cpu_kernels() noexcept
{
    static std::once_flag once;
    try {
        std::call_once(once, [] {
            const char *env = std::getenv("TRAINRUN_ATEN_MAX_POOL");
            if (env && std::strcmp(env, "1") == 0) return;
            // the dispatcher warns once when a kernel replaces another; this replacement is deliberate
            trs::compat::QuietWarning quiet("Overriding a previously registered kernel");
            g_cpu_kernels = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
            g_cpu_kernels->impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices_cpu));
        });
    } catch (...) {
        // ATen's kernel stays in place: slower, the same results
    }
}

extern "C" trs_status trs_max_pool2d_check(int bfloat16, const int64_t *shape, int ndim, int kernel, int stride,
                                           uint64_t seed, int *fast, int *equal)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, shape != nullptr && (ndim == 3 || ndim == 4) && fast != nullptr && equal != nullptr,
                  "shape (3 or 4 dims), fast and equal are required");
    trs::install_counting_allocator();
    trs::install_cpu_kernels();
    TRS_GUARD(err, {
        at::Generator gen = at::detail::createCPUGenerator(seed);
        at::Tensor x = at::randint(-4, 5, at::IntArrayRef(shape, static_cast<size_t>(ndim)), gen,
                                   at::TensorOptions().dtype(at::kFloat));  // small integers: many ties
        // a sprinkling of NaN, +inf and -inf, and a NaN with its own payload
        at::Tensor u = at::rand(x.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
        x = at::where(u < 0.02, at::full({}, std::numeric_limits<float>::quiet_NaN()), x);
        x = at::where((u >= 0.02) & (u < 0.04), at::full({}, std::numeric_limits<float>::infinity()), x);
        x = at::where((u >= 0.04) & (u < 0.08), at::full({}, -std::numeric_limits<float>::infinity()), x);
        x = x + at::rand(x.sizes(), gen, at::TensorOptions().dtype(at::kFloat)) * 0.25 * (u > 0.5);
        if (x.numel() > 0) {
            uint32_t payload = 0x7FA01234u;  // a quiet NaN whose payload a copy keeps and a bf16 rounding drops
            float nan;
            std::memcpy(&nan, &payload, sizeof nan);
            x.view(-1)[0].fill_(nan);
        }
        if (bfloat16) {
            x = x.to(at::kBFloat16);  // the conversion makes every NaN 0x7FC0: put two with payloads back
            at::Tensor raw = x.view(at::kShort).view(-1);
            if (raw.numel() > 2) {
                raw[1].fill_(static_cast<int16_t>(0x7FA1));
                raw[2].fill_(static_cast<int16_t>(static_cast<uint16_t>(0xFFC3)));
            }
        }
        const int64_t before = g_fast_calls.load();
        auto got = at::max_pool2d_with_indices(x, {kernel, kernel}, {stride, stride}, {0, 0}, {1, 1}, false);
        *fast = g_fast_calls.load() > before ? 1 : 0;
        auto want = aten_max_pool2d(x, {kernel, kernel}, {stride, stride}, {0, 0}, {1, 1}, false);
        const at::Tensor &a = std::get<0>(got), &b = std::get<0>(want);
        bool same = a.sizes() == b.sizes() && a.strides() == b.strides() && a.scalar_type() == b.scalar_type() &&
                    at::equal(std::get<1>(got), std::get<1>(want));
        if (same && a.numel() > 0) {  // the bits, NaNs included
            const auto nb = static_cast<size_t>(a.numel()) * a.element_size();
            same = std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), nb) == 0;
        }
        *equal = same ? 1 : 0;
        return TRS_OK;
    });
}
