// step.cpp -- the train and eval steps. Tensors are born from the caller's batch view inside these functions and
// die with their scope; only the scalars of trs_step_result leave.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "internal.hpp"

namespace {

// Validate a batch view against the model and wrap it (no copy) as tensors: x, and y (cross_entropy) or the
// float targets [N, K] (the other losses).
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

BatchTensors wrap_batch(const trs_model &m, const trs_batch *b, trs_loss_kind kind)
{
    if (!b || !b->x) throw trs::invalid("batch and batch->x must not be NULL");
    if (kind == TRS_LOSS_CROSS_ENTROPY && !b->y) throw trs::invalid("cross_entropy needs batch->y (class indices)");
    if (kind != TRS_LOSS_CROSS_ENTROPY && !b->target)
        throw trs::invalid("this loss needs batch->target (float32 [N, K])");
    if (b->ndim != 2 && b->ndim != 4) throw trs::invalid("batch ndim must be 2 ([N, D]) or 4 ([N, C, H, W])");
    if (b->ndim - 1 != static_cast<int>(m.input_shape.size()))
        throw trs::invalid("batch has " + std::to_string(b->ndim) + " dims; the model takes " +
                           std::to_string(m.input_shape.size() + 1));
    std::vector<int64_t> shape(b->shape, b->shape + b->ndim);
    if (shape[0] <= 0) throw trs::invalid("batch size must be > 0");
    for (int d = 1; d < b->ndim; d++)
        if (shape[d] != m.input_shape[d - 1])
            throw trs::invalid("batch dim " + std::to_string(d) + " is " + std::to_string(shape[d]) +
                               "; the model takes " + std::to_string(m.input_shape[d - 1]));
    const int64_t n = shape[0];
    BatchTensors t;
    t.x = torch::from_blob(const_cast<float *>(b->x), shape, torch::kFloat32);
    if (kind == TRS_LOSS_CROSS_ENTROPY) {
        for (int64_t i = 0; i < n; i++)
            if (b->y[i] < 0 || b->y[i] >= m.output_dim)
                throw trs::invalid("label " + std::to_string(b->y[i]) + " at batch index " + std::to_string(i) +
                                   " is outside [0, " + std::to_string(m.output_dim) + ")");
        t.y = torch::from_blob(const_cast<int64_t *>(b->y), {n}, torch::kInt64);
    } else {
        t.y = torch::from_blob(const_cast<float *>(b->target), {n, m.output_dim}, torch::kFloat32);
    }
    return t;
}

torch::Tensor loss_of(const torch::Tensor &out, const torch::Tensor &y, const trs_step_options *o)
{
    namespace F = torch::nn::functional;
    switch (loss_kind(o)) {
    case TRS_LOSS_BCE_WITH_LOGITS: return F::binary_cross_entropy_with_logits(out, y);
    case TRS_LOSS_MSE: return F::mse_loss(out, y);
    case TRS_LOSS_SMOOTH_L1: return F::smooth_l1_loss(out, y, F::SmoothL1LossFuncOptions().beta(1.0));
    case TRS_LOSS_CROSS_ENTROPY:
    default:
        return F::cross_entropy(out, y,
                                F::CrossEntropyFuncOptions().label_smoothing(o ? o->label_smoothing : 0.0));
    }
}

// The counts of trs_step_result (and, when `counts` is given, the per-class arrays) for one batch's outputs.
void count(const torch::Tensor &out0, const torch::Tensor &y, const trs_step_options *o, trs_step_result *res,
           trs_class_counts *counts)
{
    torch::NoGradGuard no_grad;
    const torch::Tensor out = out0.detach();
    const int64_t k = out.size(1);
    switch (loss_kind(o)) {
    case TRS_LOSS_CROSS_ENTROPY: {
        const torch::Tensor pred = out.argmax(1);
        res->correct += pred.eq(y).sum().item<int64_t>();
        const int top = o ? o->top_k : 0;
        if (top > 0)
            res->topk_correct +=
                std::get<1>(out.topk(top, 1)).eq(y.unsqueeze(1)).any(1).sum().item<int64_t>();
        if (counts && counts->confusion) {
            const torch::Tensor cm = (y * k + pred).bincount({}, k * k).to(torch::kInt64).contiguous();
            std::memcpy(counts->confusion, cm.data_ptr<int64_t>(), sizeof(int64_t) * static_cast<size_t>(k * k));
        }
        break;
    }
    case TRS_LOSS_BCE_WITH_LOGITS: {
        const torch::Tensor pred = out.gt(0), truth = y.gt(0.5);
        res->correct += pred.eq(truth).all(1).sum().item<int64_t>();
        if (counts) {
            auto put = [&](int64_t *dst, const torch::Tensor &mask) {
                if (!dst) return;
                const torch::Tensor c = mask.sum(0, false, torch::kInt64).contiguous();
                std::memcpy(dst, c.data_ptr<int64_t>(), sizeof(int64_t) * static_cast<size_t>(k));
            };
            put(counts->tp, pred.logical_and(truth));
            put(counts->fp, pred.logical_and(truth.logical_not()));
            put(counts->fn, pred.logical_not().logical_and(truth));
        }
        break;
    }
    default: {
        const torch::Tensor diff = out.to(torch::kDouble) - y.to(torch::kDouble);
        res->sse += diff.square().sum().item<double>();
        res->sae += diff.abs().sum().item<double>();
        res->elements += diff.numel();
        break;
    }
    }
}

void check_options(const trs_model &m, const trs_step_options *o)
{
    if (!o) return;
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
// makes runs diverge from PyTorch's. Returns the total norm before clipping.
double clip_grad_norm_like_pytorch(const std::vector<torch::Tensor> &params, double max_norm)
{
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads, norms;
    for (const auto &p : params)
        if (p.grad().defined()) grads.push_back(p.grad());
    if (grads.empty()) return 0.0;
    for (const auto &g : grads) norms.push_back(torch::norm(g, 2));
    const torch::Tensor total = torch::norm(torch::stack(norms), 2);
    const torch::Tensor coef = torch::clamp((total + 1e-6).reciprocal() * max_norm, c10::nullopt, 1.0);
    for (auto &g : grads) g.mul_(coef);
    return total.item<double>();
}

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
        model->seq->train();
        // zero_grad with set_to_none semantics, spelled out so libtorch 1.x and 2.x behave alike.
        for (auto &p : model->seq->parameters()) p.mutable_grad() = torch::Tensor();
        const int64_t n = t.x.size(0);
        const int64_t micro = opts && opts->accumulate_steps > 1 ? opts->accumulate_steps : 1;
        const bool dist = opts && opts->dist;
        bool finite = true;
        // test-only (debug.leak_bytes_per_step): memory that outlives the step, allocated in the forward phase
        // as a stored loss or logits would be
        auto debug_leak = [&] {
            if (model->debug_leak_bytes > 0)
                model->debug_leak.push_back(torch::empty({model->debug_leak_bytes}, torch::kUInt8));
        };
        if (micro == 1) {
            torch::Tensor out, loss;
            {
                trs::PhaseScope phase(TRS_PHASE_FORWARD);
                out = model->seq->forward(t.x);
                loss = loss_of(out, t.y, opts);
                res->loss = loss.item<double>();
                debug_leak();
            }
            res->samples = n;
            {
                trs::PhaseScope phase(TRS_PHASE_METRICS);
                count(out, t.y, opts, res, nullptr);
            }
            finite = std::isfinite(res->loss);
            if (!finite && !dist) {
                err = "loss is " + std::to_string(res->loss) + "; optimizer step skipped";
                return TRS_E_NONFINITE;
            }
            trs::PhaseScope phase(TRS_PHASE_BACKWARD);
            if (finite) loss.backward();
        } else {
            // Gradient accumulation: micro-batch i of n_i samples contributes loss_i * n_i / n, so the summed
            // gradients are those of the mean loss over the whole batch (for per-sample losses without
            // BatchNorm; BatchNorm sees each micro-batch's statistics, as in any accumulation).
            const int64_t chunk = (n + micro - 1) / micro;
            res->samples = n;
            for (int64_t start = 0; start < n && finite; start += chunk) {
                const int64_t len = std::min(chunk, n - start);
                const torch::Tensor ys = t.y.narrow(0, start, len);
                torch::Tensor out, loss;
                double li;
                {
                    trs::PhaseScope phase(TRS_PHASE_FORWARD);
                    out = model->seq->forward(t.x.narrow(0, start, len));
                    loss = loss_of(out, ys, opts);
                    li = loss.item<double>();
                    if (start == 0) debug_leak();
                }
                const double w = static_cast<double>(len) / static_cast<double>(n);
                res->loss += li * w;
                {
                    trs::PhaseScope phase(TRS_PHASE_METRICS);
                    count(out, ys, opts, res, nullptr);
                }
                finite = std::isfinite(li);
                if (!finite && !dist) {
                    err = "loss is " + std::to_string(li) + "; optimizer step skipped";
                    return TRS_E_NONFINITE;
                }
                trs::PhaseScope phase(TRS_PHASE_BACKWARD);
                if (finite) (loss * w).backward();
            }
        }
        if (dist) {  // DistributedDataParallel's place: after backward, before clipping and step
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
        }
        trs::PhaseScope phase(TRS_PHASE_OPTIMIZER);
        if (opts && opts->grad_clip_norm > 0)
            res->grad_norm = clip_grad_norm_like_pytorch(model->seq->parameters(), opts->grad_clip_norm);
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
            model->debug_leak.push_back(torch::empty({model->debug_eval_leak_bytes}, torch::kUInt8));
        trs::ModeRestore restore(*model->seq);
        std::optional<trs::EmaSwap> swap;
        if (ema) swap.emplace(ema);
        model->seq->eval();
        torch::Tensor out = model->seq->forward(t.x);
        res->loss = loss_of(out, t.y, opts).item<double>();
        res->samples = t.x.size(0);
        count(out, t.y, opts, res, counts);
        return TRS_OK;
    })
}

extern "C" trs_status trs_eval_step(trs_model *model, const trs_batch *batch, const trs_step_options *opts,
                                    trs_step_result *res)
{
    return trs_eval_batch(model, nullptr, batch, opts, res, nullptr);
}
