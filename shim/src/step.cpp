// step.cpp -- the train and eval steps. Tensors are born from the caller's batch view inside these functions and
// die with their scope; only the scalars of trs_step_result leave.
#include <cmath>

#include "internal.hpp"

namespace {

// Validate a batch view against the model and wrap it (no copy) as tensors.
struct BatchTensors {
    torch::Tensor x, y;
};

BatchTensors wrap_batch(const trs_model &m, const trs_batch *b)
{
    if (!b || !b->x || !b->y) throw trs::invalid("batch, batch->x and batch->y must not be NULL");
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
    for (int64_t i = 0; i < n; i++)
        if (b->y[i] < 0 || b->y[i] >= m.output_dim)
            throw trs::invalid("label " + std::to_string(b->y[i]) + " at batch index " + std::to_string(i) +
                               " is outside [0, " + std::to_string(m.output_dim) + ")");
    BatchTensors t;
    t.x = torch::from_blob(const_cast<float *>(b->x), shape, torch::kFloat32);
    t.y = torch::from_blob(const_cast<int64_t *>(b->y), {n}, torch::kInt64);
    return t;
}

torch::Tensor loss_of(const torch::Tensor &logits, const torch::Tensor &y, const trs_step_options *o)
{
    namespace F = torch::nn::functional;
    const double ls = o ? o->label_smoothing : 0.0;
    if (o && o->loss != TRS_LOSS_CROSS_ENTROPY) throw trs::invalid("unknown loss kind");
    return F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().label_smoothing(ls));
}

int64_t count_correct(const torch::Tensor &logits, const torch::Tensor &y)
{
    torch::NoGradGuard no_grad;
    return logits.argmax(1).eq(y).sum().item<int64_t>();
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
        BatchTensors t = wrap_batch(*model, batch);
        model->seq->train();
        // zero_grad with set_to_none semantics, spelled out so libtorch 1.x and 2.x behave alike.
        for (auto &p : model->seq->parameters()) p.mutable_grad() = torch::Tensor();
        torch::Tensor logits = model->seq->forward(t.x);
        torch::Tensor loss = loss_of(logits, t.y, opts);
        res->loss = loss.item<double>();
        res->samples = t.x.size(0);
        res->correct = count_correct(logits, t.y);
        const bool finite = std::isfinite(res->loss);
        if (!finite && !(opts && opts->dist)) {
            err = "loss is " + std::to_string(res->loss) + "; optimizer step skipped";
            return TRS_E_NONFINITE;
        }
        if (finite) loss.backward();
        if (opts && opts->dist) {  // DistributedDataParallel's place: after backward, before clipping and step
            int nonfinite = finite ? 0 : 1;
            trs::average_grads(*opts->dist, *model, opts->dist_bucket_bytes, &nonfinite);
            if (nonfinite > 0) {
                err = "loss is " + std::to_string(res->loss) + " here, not finite on " + std::to_string(nonfinite) +
                      " rank(s); optimizer step skipped on every rank";
                return TRS_E_NONFINITE;
            }
        }
        if (opts && opts->grad_clip_norm > 0)
            res->grad_norm = clip_grad_norm_like_pytorch(model->seq->parameters(), opts->grad_clip_norm);
        opt->opt->step();
        if (model->debug_leak_bytes > 0)  // test-only: memory that outlives the step, as a leak would
            model->debug_leak.push_back(torch::empty({model->debug_leak_bytes}, torch::kUInt8));
        return TRS_OK;
    })
}

extern "C" trs_status trs_eval_step(trs_model *model, const trs_batch *batch, const trs_step_options *opts,
                                    trs_step_result *res)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, res != nullptr, "res is NULL");
    TRS_GUARD(err, {
        *res = trs_step_result{};
        BatchTensors t = wrap_batch(*model, batch);
        torch::NoGradGuard no_grad;
        trs::ModeRestore restore(*model->seq);
        model->seq->eval();
        torch::Tensor logits = model->seq->forward(t.x);
        res->loss = loss_of(logits, t.y, opts).item<double>();
        res->samples = t.x.size(0);
        res->correct = count_correct(logits, t.y);
        return TRS_OK;
    })
}
