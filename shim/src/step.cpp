// step.cpp -- the train and eval steps. Tensors are born from the caller's batch view inside these functions and
// die with their scope; only the scalars of trs_step_result leave. On a CUDA device the batch is staged through
// pinned memory (trs::to_device) and the scalars come back in one copy (trs::Scalars::fetch): a train step
// synchronises with the device once, after backward (and clipping) and before the optimizer step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include "internal.hpp"

namespace {

// Validate a batch view against the model and wrap it as tensors on the model's device (the CPU: no copy): x, and
// y (cross_entropy) or the float targets [N, K] (the other losses). Labels are range-checked on the host.
struct BatchTensors {
    torch::Tensor x, y;
};

trs_loss_kind loss_kind(const trs_step_options *o)
{
    const trs_loss_kind k = o ? o->loss : TRS_LOSS_CROSS_ENTROPY;
    if (k != TRS_LOSS_CROSS_ENTROPY && k != TRS_LOSS_BCE_WITH_LOGITS && k != TRS_LOSS_MSE && k != TRS_LOSS_SMOOTH_L1)
        throw trs::invalid("unknown loss kind " + std::to_string(static_cast<int>(k)));
    return k;
}

// The input of a batch view, checked against the model's per-sample input shape and wrapped (no copy).
torch::Tensor wrap_input(const trs_model &m, const trs_batch *b)
{
    if (!b) throw trs::invalid("batch must not be NULL");
    if ((b->x == nullptr) == (b->x_ids == nullptr))
        throw trs::invalid("exactly one of batch->x (float32) and batch->x_ids (int64) must be set");
    if (b->ndim < 2 || b->ndim > TRS_MAX_DIMS)
        throw trs::invalid("batch ndim " + std::to_string(b->ndim) + " is outside [2, " +
                           std::to_string(TRS_MAX_DIMS) + "]: the input is [N, ...]");
    std::vector<int64_t> shape(b->shape, b->shape + b->ndim);
    if (shape[0] <= 0) throw trs::invalid("batch size must be > 0");
    for (int d = 1; d < b->ndim; d++)
        if (shape[d] <= 0) throw trs::invalid("batch dim " + std::to_string(d) + " is " + std::to_string(shape[d]));
    if (!m.input_shape.empty()) {
        if (b->ndim - 1 != static_cast<int>(m.input_shape.size()))
            throw trs::invalid("batch has " + std::to_string(b->ndim) + " dims; the model takes " +
                               std::to_string(m.input_shape.size() + 1));
        for (int d = 1; d < b->ndim; d++)
            if (shape[d] != m.input_shape[d - 1])
                throw trs::invalid("batch dim " + std::to_string(d) + " is " + std::to_string(shape[d]) +
                                   "; the model takes " + std::to_string(m.input_shape[d - 1]));
    }
    if (b->x_ids && m.input_dtype != torch::kInt64 && m.jit)
        throw trs::invalid("batch->x_ids holds int64 token ids, but the model takes float32 inputs (batch->x)");
    if (b->x && m.input_dtype == torch::kInt64)
        throw trs::invalid("batch->x holds float32 inputs, but the model takes int64 token ids (batch->x_ids): its "
                           "forward fails on float32");
    if (b->x) return trs::to_device(torch::from_blob(const_cast<float *>(b->x), shape, torch::kFloat32), m.device);
    return trs::to_device(torch::from_blob(const_cast<int64_t *>(b->x_ids), shape, torch::kInt64), m.device);
}

// The targets' shape as the view describes it: y_shape, or the defaults [N] (class indices) / [N, K].
std::vector<int64_t> target_shape(const trs_model &m, const trs_batch *b, int64_t n, bool classes)
{
    if (b->y_ndim < 0 || b->y_ndim > TRS_MAX_DIMS)
        throw trs::invalid("batch->y_ndim " + std::to_string(b->y_ndim) + " is outside [0, " +
                           std::to_string(TRS_MAX_DIMS) + "]");
    if (b->y_ndim == 0) return classes ? std::vector<int64_t>{n} : std::vector<int64_t>{n, m.output_dim};
    std::vector<int64_t> s(b->y_shape, b->y_shape + b->y_ndim);
    if (s[0] != n)
        throw trs::invalid("the targets' shape " + trs::shape_str(s) + " does not start with the batch size " +
                           std::to_string(n));
    for (int64_t v : s)
        if (v <= 0) throw trs::invalid("the targets' shape " + trs::shape_str(s) + " has a size < 1");
    return s;
}

// Validate a batch view and wrap it (no copy) as tensors: x (float32 or int64), and y (cross_entropy: int64 class
// indices) or the float targets (the other losses).
BatchTensors wrap_batch(const trs_model &m, const trs_batch *b, trs_loss_kind kind)
{
    BatchTensors t;
    t.x = wrap_input(m, b);
    const int64_t n = t.x.size(0);
    if (kind == TRS_LOSS_CROSS_ENTROPY) {
        if (!b->y) throw trs::invalid("cross_entropy needs batch->y (int64 class indices)");
        const std::vector<int64_t> ys = target_shape(m, b, n, true);
        int64_t cnt = 1;
        for (int64_t v : ys) cnt *= v;
        const int64_t per = cnt / n;
        for (int64_t i = 0; i < cnt; i++)
            if ((b->y[i] < 0 || b->y[i] >= m.output_dim) && b->y[i] != TRS_IGNORE_INDEX) {
                std::string where = "batch index " + std::to_string(i / per);
                if (per > 1) where += ", position " + std::to_string(i % per);
                throw trs::invalid("label " + std::to_string(b->y[i]) + " at " + where + " is outside [0, " +
                                   std::to_string(m.output_dim) + ") and is not the ignore_index -100");
            }
        t.y = trs::to_device(torch::from_blob(const_cast<int64_t *>(b->y), ys, torch::kInt64), m.device);
    } else {
        if (!b->target) throw trs::invalid("this loss needs batch->target (float32 [N, K])");
        t.y = trs::to_device(
            torch::from_blob(const_cast<float *>(b->target), target_shape(m, b, n, false), torch::kFloat32), m.device);
    }
    return t;
}

// The outputs must meet the targets: cross_entropy's y is the output's shape without its last (class) dim; the
// float targets have the output's shape.
void check_output(const torch::Tensor &out, const torch::Tensor &y, trs_loss_kind kind)
{
    const c10::IntArrayRef os = out.sizes(), ys = y.sizes();
    if (kind == TRS_LOSS_CROSS_ENTROPY) {
        if (os.size() < 2 || !os.slice(0, os.size() - 1).equals(ys))
            throw trs::invalid("the model's output " + trs::shape_str(os) + " cannot meet class targets " + trs::shape_str(ys) +
                               ": cross_entropy takes outputs [N, C] with targets [N], or [N, T, C] with [N, T]");
    } else if (!os.equals(ys)) {
        throw trs::invalid("the model's output " + trs::shape_str(os) + " cannot meet targets " + trs::shape_str(ys) +
                           ": this loss needs both of the same shape");
    }
}

// The loss of outputs `out` against targets `y`, after check_output.
torch::Tensor loss_of(const torch::Tensor &out, const torch::Tensor &y, const trs_step_options *o)
{
    check_output(out, y, loss_kind(o));
    namespace F = torch::nn::functional;
    switch (loss_kind(o)) {
    case TRS_LOSS_BCE_WITH_LOGITS: return F::binary_cross_entropy_with_logits(out, y);
    case TRS_LOSS_MSE: return F::mse_loss(out, y);
    case TRS_LOSS_SMOOTH_L1: return F::smooth_l1_loss(out, y, F::SmoothL1LossFuncOptions().beta(1.0));
    case TRS_LOSS_CROSS_ENTROPY:
    default: {
        // [N, T, C] logits are flattened to [N*T, C] (class dim last), as F.cross_entropy(logits.reshape(-1, C),
        // targets.reshape(-1)) in PyTorch; for [N, C] both reshapes are the tensors themselves.
        const auto opts = F::CrossEntropyFuncOptions()
                              .ignore_index(TRS_IGNORE_INDEX)
                              .label_smoothing(o ? o->label_smoothing : 0.0);
        if (out.dim() == 2) return F::cross_entropy(out, y, opts);
        return F::cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1}), opts);
    }
    }
}

// Where one batch's counts wait in a Scalars until it is fetched (-1: not counted for this loss).
struct CountSlots {
    long correct = -1, topk = -1, sse = -1, sae = -1, targets = -1;
    int64_t elements = 0, rows = 0;  // rows: targets counted without a fetch (bce rows, regression samples)
};

// The counts of trs_step_result for one batch's outputs, queued in `sc` (read with add_counts after sc.fetch()),
// and, when `counts` is given, the per-class arrays (copied to the host here: an eval-only extra transfer on a
// device; the confusion matrix is counted on the host, as CUDA's bincount has no deterministic implementation).
CountSlots count(const torch::Tensor &out0, const torch::Tensor &y0, const trs_step_options *o, trs::Scalars &sc,
                 trs_class_counts *counts)
{
    torch::NoGradGuard no_grad;
    const int64_t k = out0.size(-1);
    const torch::Tensor out = out0.detach().reshape({-1, k});  // rows: samples, or positions of [N, T, C]
    CountSlots c;
    switch (loss_kind(o)) {
    case TRS_LOSS_CROSS_ENTROPY: {
        // Positions labelled ignore_index count nowhere: masked out of correct, top-k and the confusion matrix.
        const torch::Tensor y = y0.reshape({-1}), keep = y.ne(TRS_IGNORE_INDEX);
        const torch::Tensor pred = out.argmax(1);
        c.correct = static_cast<long>(sc.add(pred.eq(y).logical_and(keep).sum()));
        c.targets = static_cast<long>(sc.add(keep.sum()));
        const int top = o ? o->top_k : 0;
        if (top > 0)
            c.topk = static_cast<long>(
                sc.add(std::get<1>(out.topk(top, 1)).eq(y.unsqueeze(1)).any(1).logical_and(keep).sum()));
        if (counts && counts->confusion) {
            const torch::Tensor cells = trs::to_host((y * k + pred).masked_select(keep));
            const torch::Tensor cm = cells.bincount({}, k * k).to(torch::kInt64).contiguous();
            std::memcpy(counts->confusion, cm.data_ptr<int64_t>(), sizeof(int64_t) * static_cast<size_t>(k * k));
        }
        break;
    }
    case TRS_LOSS_BCE_WITH_LOGITS: {
        const torch::Tensor y = y0.reshape({-1, k});
        const torch::Tensor pred = out.gt(0), truth = y.gt(0.5);
        c.correct = static_cast<long>(sc.add(pred.eq(truth).all(1).sum()));
        c.rows = out.size(0);
        if (counts) {
            auto put = [&](int64_t *dst, const torch::Tensor &mask) {
                if (!dst) return;
                const torch::Tensor h = trs::to_host(mask.sum(0, false, torch::kInt64));
                std::memcpy(dst, h.data_ptr<int64_t>(), sizeof(int64_t) * static_cast<size_t>(k));
            };
            put(counts->tp, pred.logical_and(truth));
            put(counts->fp, pred.logical_and(truth.logical_not()));
            put(counts->fn, pred.logical_not().logical_and(truth));
        }
        break;
    }
    default: {
        const torch::Tensor diff = out0.detach().to(torch::kDouble) - y0.to(torch::kDouble);
        c.sse = static_cast<long>(sc.add(diff.square().sum()));
        c.sae = static_cast<long>(sc.add(diff.abs().sum()));
        c.elements = diff.numel();
        c.rows = out0.size(0);
        break;
    }
    }
    return c;
}

// Add one batch's fetched counts to *res.
void add_counts(const trs::Scalars &sc, const CountSlots &c, trs_step_result *res)
{
    if (c.correct >= 0) res->correct += sc.count(static_cast<size_t>(c.correct));
    if (c.topk >= 0) res->topk_correct += sc.count(static_cast<size_t>(c.topk));
    if (c.sse >= 0) res->sse += sc.get(static_cast<size_t>(c.sse));
    if (c.sae >= 0) res->sae += sc.get(static_cast<size_t>(c.sae));
    res->elements += c.elements;
    res->targets += c.targets >= 0 ? sc.count(static_cast<size_t>(c.targets)) : c.rows;
}

// precision: bf16-mixed -- torch.autocast(device_type, dtype=torch.bfloat16) around the forward pass, on the
// model's device (CPU or CUDA). libtorch has no C++ guard for it, so this is one: set the thread's autocast state
// for that backend, restore it on leaving, and clear the cast cache when the outermost region ends (as
// torch.autocast.__exit__ does; the cache holds bfloat16 copies of the weights, which would otherwise outlive the
// step). The calls differ between libtorch versions: compat.hpp.
class AutocastScope {
public:
    AutocastScope(const trs_step_options *o, c10::DeviceType device)
        : on_(o && o->precision == TRS_PRECISION_BF16_MIXED), device_(device)
    {
        if (!on_) return;
        was_on_ = trs::compat::autocast_enabled(device_);
        was_dtype_ = trs::compat::autocast_dtype(device_);
        trs::compat::set_autocast(device_, true, at::kBFloat16);
        at::autocast::increment_nesting();
    }
    ~AutocastScope()
    {
        if (!on_) return;
        if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        trs::compat::set_autocast(device_, was_on_, was_dtype_);
    }
    AutocastScope(const AutocastScope &) = delete;
    AutocastScope &operator=(const AutocastScope &) = delete;

private:
    bool on_;
    c10::DeviceType device_;
    bool was_on_ = false;
    at::ScalarType was_dtype_ = at::kBFloat16;
};

// The model's output under `opts`' precision: the forward pass (under autocast for bf16-mixed), then the output
// in float32 so the loss and the counts are reduced in float32 (a no-op for a float32 output).
torch::Tensor forward_at_precision(trs_model &model, const torch::Tensor &x, const trs_step_options *opts)
{
    torch::Tensor out;
    {
        AutocastScope autocast(opts, model.device.type());
        out = model.forward(x);
    }
    return out.scalar_type() == torch::kBFloat16 ? out.to(torch::kFloat32) : out;
}

void check_options(const trs_model &m, const trs_step_options *o)
{
    if (!o) return;
    if (o->precision != TRS_PRECISION_32 && o->precision != TRS_PRECISION_BF16_MIXED)
        throw trs::invalid("precision " + std::to_string(static_cast<int>(o->precision)) + " is not 32 or bf16-mixed");
    if (o->precision == TRS_PRECISION_BF16_MIXED && !m.device.is_cpu() && !m.device.is_cuda())
        throw trs::invalid("precision bf16-mixed runs under CPU or CUDA autocast; this model is on " + m.device.str());
    if (o->top_k < 0 || o->top_k > m.output_dim)
        throw trs::invalid("top_k " + std::to_string(o->top_k) + " is outside [0, " + std::to_string(m.output_dim) +
                           "]");
    if (o->accumulate_steps < 0) throw trs::invalid("accumulate_steps must be >= 0");
    if (o->label_smoothing < 0 || o->label_smoothing >= 1) throw trs::invalid("label_smoothing must be in [0, 1)");
}

// torch.nn.utils.clip_grad_norm_ (PyTorch 1.13, torch/nn/utils/clip_grad.py) for the L2 norm, op for op:
//   total = norm(stack([norm(g, 2) for g in grads]), 2); coef = max_norm / (total + 1e-6); clamp(coef, max=1);
//   g.mul_(coef). Python's `float / Tensor` is reciprocal(t) * float (Tensor.__rtruediv__); libtorch's C++
// clip_grad_norm_ divides instead, which rounds differently in the last bit and, over hundreds of clipped steps,
// makes runs diverge from PyTorch's. Returns the total norm before clipping as a 0-dim tensor on the gradients'
// device (undefined when no parameter has a gradient), so reading it costs no extra synchronisation.
torch::Tensor clip_grad_norm_like_pytorch(const std::vector<torch::Tensor> &params, double max_norm)
{
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads, norms;
    for (const auto &p : params)
        if (p.grad().defined()) grads.push_back(p.grad());
    if (grads.empty()) return torch::Tensor();
    for (const auto &g : grads) norms.push_back(torch::norm(g, 2));
    const torch::Tensor total = torch::norm(torch::stack(norms), 2);
    const torch::Tensor coef = torch::clamp((total + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    for (auto &g : grads) g.mul_(coef);
    return total;
}

// Eval mode, with the EMA's weights swapped into the model when `ema` is given, for the lifetime of the scope: what
// the eval batch, predict and generate run their forwards under. Members end in reverse order: the weights are
// swapped back first, then the mode is restored, however the scope ends.
struct EvalScope {
    trs::ModeRestore restore;
    std::optional<trs::EmaSwap> swap;
    EvalScope(trs_model &m, trs_ema *ema) : restore(m)
    {
        if (ema) swap.emplace(ema);
        m.train(false);
    }
    EvalScope(const EvalScope &) = delete;
    EvalScope &operator=(const EvalScope &) = delete;
};

}  // namespace

extern "C" trs_status trs_train_step(trs_model *model, trs_optimizer *opt, const trs_batch *batch,
                                     const trs_step_options *opts, trs_step_result *res)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, opt != nullptr && opt->model == model, "optimizer is NULL or belongs to another model");
    TRS_CHECK_ARG(err, res != nullptr, "res is NULL");
    TRS_GUARD(err, {
        *res = trs_step_result{};
        check_options(*model, opts);
        BatchTensors t = wrap_batch(*model, batch, loss_kind(opts));
        model->train(true);
        const std::vector<torch::Tensor> params = model->parameters();  // one walk of the module per step
        // zero_grad with set_to_none semantics, spelled out so libtorch 1.x and 2.x behave alike.
        auto clear_grads = [&params] {
            for (auto p : params) p.mutable_grad() = torch::Tensor();
        };
        clear_grads();
        const int64_t n = t.x.size(0);
        const int64_t micro = opts && opts->accumulate_steps > 1 ? opts->accumulate_steps : 1;
        const bool dist = opts && opts->dist;
        const bool clip = opts && opts->grad_clip_norm > 0;
        // Forward and backward of every micro-batch, queueing its loss and counts in `sc` without reading them:
        // the device runs ahead until the one fetch below. Gradient accumulation: micro-batch i of n_i samples
        // contributes loss_i * n_i / n, so the summed gradients are those of the mean loss over the whole batch
        // (for per-sample losses without BatchNorm; BatchNorm sees each micro-batch's statistics, as in any
        // accumulation). A non-finite loss is found only after backward; its step is not taken either way.
        trs::Scalars sc;
        std::vector<size_t> loss_at;
        std::vector<CountSlots> counted;
        std::vector<double> weight;
        const int64_t chunk = micro == 1 ? n : (n + micro - 1) / micro;
        // Each part runs under its phase (trs_mem_phase), so every block it allocates is tagged with it.
        for (int64_t start = 0; start < n; start += chunk) {
            const int64_t len = std::min(chunk, n - start);
            const torch::Tensor xs = micro == 1 ? t.x : t.x.narrow(0, start, len);
            const torch::Tensor ys = micro == 1 ? t.y : t.y.narrow(0, start, len);
            torch::Tensor out, loss;
            {
                trs::PhaseScope phase(TRS_PHASE_FORWARD);
                out = forward_at_precision(*model, xs, opts);
                loss = loss_of(out, ys, opts);
                loss_at.push_back(sc.add(loss));
                // test-only (debug.leak_bytes_per_step): memory that outlives the step, allocated in the forward
                // phase as a stored loss or logits would be; once per step
                if (start == 0 && model->debug_leak_bytes > 0)
                    model->debug_leak.push_back(torch::empty(
                        {model->debug_leak_bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(model->device)));
            }
            {
                trs::PhaseScope phase(TRS_PHASE_METRICS);
                counted.push_back(count(out, ys, opts, sc, nullptr));
            }
            const double w = static_cast<double>(len) / static_cast<double>(n);
            weight.push_back(w);
            trs::PhaseScope phase(TRS_PHASE_BACKWARD);
            if (micro == 1) loss.backward();
            else (loss * w).backward();
        }
        torch::Tensor norm;  // one process: clip before the fetch, so the norm travels with the loss
        if (clip && !dist) {
            trs::PhaseScope phase(TRS_PHASE_OPTIMIZER);
            norm = clip_grad_norm_like_pytorch(params, opts->grad_clip_norm);
        }
        const size_t norm_at = norm.defined() ? sc.add(norm) : 0;
        sc.fetch();  // the step's synchronisation with the device (on the CPU: plain reads)
        res->samples = n;
        bool finite = true;
        double bad = 0.0;
        for (size_t i = 0; i < loss_at.size() && finite; i++) {  // as the values arrive: up to a non-finite one
            const double li = sc.get(loss_at[i]);
            if (micro == 1) res->loss = li;
            else res->loss += li * weight[i];
            add_counts(sc, counted[i], res);
            finite = std::isfinite(li);
            bad = li;
        }
        if (!finite && !dist) {
            err = "loss is " + std::to_string(bad) + "; optimizer step skipped";
            return TRS_E_NONFINITE;
        }
        if (dist) {  // DistributedDataParallel's place: after backward, before clipping and step
            if (!finite)  // this rank contributes zero gradients, as when backward is skipped
                clear_grads();
            int nonfinite = finite ? 0 : 1;
            {
                trs::PhaseScope phase(TRS_PHASE_BACKWARD);
                trs::average_grads(*opts->dist, *model, opts->dist_bucket_bytes, &nonfinite);
            }
            if (nonfinite > 0) {
                err = "loss is " + std::to_string(res->loss) + " here, not finite on " + std::to_string(nonfinite) +
                      " rank(s); optimizer step skipped on every rank";
                return TRS_E_NONFINITE;
            }
            if (clip) {  // after averaging: a second read of the device, only in multi-process runs
                trs::PhaseScope phase(TRS_PHASE_OPTIMIZER);
                norm = clip_grad_norm_like_pytorch(params, opts->grad_clip_norm);
                res->grad_norm = norm.defined() ? norm.item<double>() : 0.0;
            }
        } else if (norm.defined()) {
            res->grad_norm = sc.get(norm_at);
        }
        trs::PhaseScope phase(TRS_PHASE_OPTIMIZER);
        opt->opt->step();
        return TRS_OK;
    })
}

extern "C" trs_status trs_eval_batch(trs_model *model, trs_ema *ema, const trs_batch *batch,
                                     const trs_step_options *opts, trs_step_result *res, trs_class_counts *counts)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, res != nullptr, "res is NULL");
    TRS_CHECK_ARG(err, ema == nullptr || ema->model == model, "the EMA belongs to another model");
    TRS_CHECK_ARG(err, counts == nullptr || counts->num_classes == model->output_dim,
                  "counts->num_classes must equal the model's output dim " + std::to_string(model->output_dim));
    TRS_GUARD(err, {
        *res = trs_step_result{};
        check_options(*model, opts);
        trs::PhaseScope phase(TRS_PHASE_EVAL);
        BatchTensors t = wrap_batch(*model, batch, loss_kind(opts));
        torch::NoGradGuard no_grad;
        if (model->debug_eval_leak_bytes > 0)  // test-only (debug.leak_bytes_per_eval_batch)
            model->debug_leak.push_back(torch::empty(
                {model->debug_eval_leak_bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(model->device)));
        EvalScope eval(*model, ema);
        torch::Tensor out = forward_at_precision(*model, t.x, opts);
        trs::Scalars sc;
        const size_t loss_at = sc.add(loss_of(out, t.y, opts));
        const CountSlots counted = count(out, t.y, opts, sc, counts);
        sc.fetch();
        res->loss = sc.get(loss_at);
        res->samples = t.x.size(0);
        add_counts(sc, counted, res);
        return TRS_OK;
    })
}

extern "C" trs_status trs_eval_step(trs_model *model, const trs_batch *batch, const trs_step_options *opts,
                                    trs_step_result *res)
{
    return trs_eval_batch(model, nullptr, batch, opts, res, nullptr);
}

extern "C" trs_status trs_predict(trs_model *model, trs_ema *ema, const trs_batch *batch, float *out,
                                  size_t out_count, int64_t *out_shape, int *out_ndim)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, ema == nullptr || ema->model == model, "the EMA belongs to another model");
    TRS_CHECK_ARG(err, out != nullptr || out_count == 0, "out is NULL but out_count is not 0");
    TRS_GUARD(err, {
        const torch::Tensor x = wrap_input(*model, batch);
        torch::NoGradGuard no_grad;
        EvalScope eval(*model, ema);
        const torch::Tensor y = trs::to_host(model->forward(x).to(torch::kFloat32)).contiguous();
        if (y.dim() < 1 || y.dim() > TRS_MAX_DIMS)
            throw trs::invalid("the model's output has " + std::to_string(y.dim()) + " dims");
        if (out_ndim) *out_ndim = static_cast<int>(y.dim());
        if (out_shape) std::copy(y.sizes().begin(), y.sizes().end(), out_shape);
        const size_t need = static_cast<size_t>(y.numel());
        if (!out) return TRS_OK;  // the shape only
        if (out_count < need)
            throw trs::invalid("out has room for " + std::to_string(out_count) + " floats; the output " +
                               trs::shape_str(y.sizes()) + " needs " +
                               std::to_string(need));
        std::memcpy(out, y.data_ptr<float>(), need * sizeof(float));
        return TRS_OK;
    })
}

// Autoregressive sampling (nanoGPT's generate): each new token comes from the logits of the last position of
// forward(the last block tokens so far), divided by the temperature, cut to the top_k largest (the others -inf),
// softmax, one torch::multinomial draw from a generator of its own seeded with `seed` -- the default generator
// (dropout, the training run's stream) is never touched, so sampling is a pure function of (weights, prompt,
// options, seed). Every tensor dies inside the loop's scope; only the integer ids leave.
extern "C" trs_status trs_generate(trs_model *model, trs_ema *ema, const int64_t *prompt, int64_t n_prompt,
                                   int64_t n_new, const trs_sample_options *opts, int64_t *out)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, ema == nullptr || ema->model == model, "the EMA belongs to another model");
    TRS_CHECK_ARG(err, opts != nullptr, "opts is NULL");
    TRS_CHECK_ARG(err, n_prompt >= 1 && prompt != nullptr, "the prompt needs at least one token");
    TRS_CHECK_ARG(err, n_new >= 0 && (out != nullptr || n_new == 0), "n_new must be >= 0 and out set");
    TRS_CHECK_ARG(err, opts->temperature > 0 && std::isfinite(opts->temperature), "temperature must be > 0");
    TRS_CHECK_ARG(err, opts->top_k >= 0, "top_k must be >= 0");
    TRS_CHECK_ARG(err, model->input_dtype == torch::kInt64 && model->input_shape.size() == 1 &&
                           model->output_shape.size() == 2,
                  "generation needs a model of token ids [N, T] -> logits [N, T, V]");
    const int64_t block = model->input_shape[0], vocab = model->output_dim;
    for (int64_t i = 0; i < n_prompt; i++)
        TRS_CHECK_ARG(err, prompt[i] >= 0 && prompt[i] < vocab,
                      "prompt token " + std::to_string(i) + " is " + std::to_string(prompt[i]) + ", outside [0, " +
                          std::to_string(vocab) + ")");
    TRS_GUARD(err, {
        torch::NoGradGuard no_grad;
        EvalScope eval(*model, ema);
        at::Generator gen = at::detail::createCPUGenerator(opts->seed);
        std::vector<int64_t> ctx(prompt, prompt + n_prompt);
        for (int64_t k = 0; k < n_new; k++) {
            const int64_t t = std::min<int64_t>(static_cast<int64_t>(ctx.size()), block);
            const torch::Tensor x = trs::to_device(
                torch::from_blob(ctx.data() + ctx.size() - static_cast<size_t>(t), {1, t}, torch::kInt64), model->device);
            const torch::Tensor y = model->forward(x);
            if (y.dim() != 3 || y.size(0) != 1 || y.size(1) != t || y.size(2) != vocab)
                throw trs::invalid("the model maps ids [1, " + std::to_string(t) + "] to " + trs::shape_str(y.sizes()) +
                                   "; generation needs [1, " + std::to_string(t) + ", " + std::to_string(vocab) + "]");
            torch::Tensor logits = trs::to_host(y.select(1, t - 1).select(0, 0).to(torch::kFloat32)) / opts->temperature;
            if (opts->top_k > 0 && opts->top_k < vocab) {
                const torch::Tensor kth = std::get<0>(logits.topk(opts->top_k)).select(0, opts->top_k - 1);
                logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
            }
            const torch::Tensor probs = torch::softmax(logits, 0);
            const int64_t id = torch::multinomial(probs, 1, false, gen).item<int64_t>();
            out[k] = id;
            ctx.push_back(id);
        }
        return TRS_OK;
    })
}
