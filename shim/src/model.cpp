// model.cpp -- building an nn.Sequential from layer specs, and reading scalars about it.
#include <zlib.h>


#include "internal.hpp"

namespace {

const char *kind_name(trs_layer_kind k)
{
    static const char *names[] = {"linear",    "conv2d", "batchnorm1d", "batchnorm2d",        "layernorm", "relu",
                                  "gelu",      "maxpool2d", "avgpool2d", "adaptive_avgpool2d", "dropout",  "flatten"};
    return (k >= 0 && k < TRS_LAYER_COUNT_) ? names[k] : "unknown";
}

void need(bool cond, size_t i, const trs_layer &l, const std::string &what)
{
    if (!cond)
        throw trs::invalid("layer " + std::to_string(i) + " (" + kind_name(l.kind) + "): " + what);
}

// Append layer i to seq. Module constructors draw their initial values from the default generator, in the same
// order as the equivalent torch.nn constructors (weight, then bias).
void append_layer(torch::nn::Sequential &seq, size_t i, const trs_layer &l)
{
    namespace nn = torch::nn;
    switch (l.kind) {
    case TRS_LAYER_LINEAR:
        need(l.in > 0 && l.out > 0, i, l, "in and out must be > 0");
        seq->push_back(nn::Linear(nn::LinearOptions(l.in, l.out).bias(l.bias != 0)));
        break;
    case TRS_LAYER_CONV2D:
        need(l.in > 0 && l.out > 0 && l.kernel > 0 && l.stride > 0 && l.padding >= 0, i, l,
             "in, out, kernel, stride must be > 0 and padding >= 0");
        seq->push_back(nn::Conv2d(
            nn::Conv2dOptions(l.in, l.out, l.kernel).stride(l.stride).padding(l.padding).bias(l.bias != 0)));
        break;
    case TRS_LAYER_BATCHNORM1D:
        need(l.out > 0 && l.eps > 0 && l.momentum >= 0 && l.momentum <= 1, i, l, "features > 0, eps > 0, momentum in [0, 1]");
        seq->push_back(nn::BatchNorm1d(nn::BatchNorm1dOptions(l.out).eps(l.eps).momentum(l.momentum)));
        break;
    case TRS_LAYER_BATCHNORM2D:
        need(l.out > 0 && l.eps > 0 && l.momentum >= 0 && l.momentum <= 1, i, l, "features > 0, eps > 0, momentum in [0, 1]");
        seq->push_back(nn::BatchNorm2d(nn::BatchNorm2dOptions(l.out).eps(l.eps).momentum(l.momentum)));
        break;
    case TRS_LAYER_LAYERNORM:
        need(l.out > 0 && l.eps > 0, i, l, "features > 0 and eps > 0");
        seq->push_back(nn::LayerNorm(nn::LayerNormOptions({l.out}).eps(l.eps)));
        break;
    case TRS_LAYER_RELU: seq->push_back(nn::ReLU()); break;
    case TRS_LAYER_GELU: seq->push_back(nn::GELU()); break;
    case TRS_LAYER_MAXPOOL2D:
        need(l.kernel > 0 && l.stride >= 0 && l.padding >= 0, i, l, "kernel > 0, stride >= 0, padding >= 0");
        seq->push_back(nn::MaxPool2d(
            nn::MaxPool2dOptions(l.kernel).stride(l.stride > 0 ? l.stride : l.kernel).padding(l.padding)));
        break;
    case TRS_LAYER_AVGPOOL2D:
        need(l.kernel > 0 && l.stride >= 0 && l.padding >= 0, i, l, "kernel > 0, stride >= 0, padding >= 0");
        seq->push_back(nn::AvgPool2d(
            nn::AvgPool2dOptions(l.kernel).stride(l.stride > 0 ? l.stride : l.kernel).padding(l.padding)));
        break;
    case TRS_LAYER_ADAPTIVE_AVGPOOL2D:
        need(l.out_h > 0 && l.out_w > 0, i, l, "output size must be > 0");
        seq->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({l.out_h, l.out_w})));
        break;
    case TRS_LAYER_DROPOUT:
        need(l.p >= 0 && l.p < 1, i, l, "p must be in [0, 1)");
        seq->push_back(nn::Dropout(nn::DropoutOptions(l.p)));
        break;
    case TRS_LAYER_FLATTEN: seq->push_back(nn::Flatten()); break;
    default: need(false, i, l, "unknown layer kind " + std::to_string(static_cast<int>(l.kind)));
    }
}

}  // namespace

namespace {

// nn.Module.state_dict() of a TorchScript module (torch/nn/modules/module.py, _save_to_state_dict): the module's
// own parameters, then its own buffers, then each child's entries under "child.", depth first.
void jit_state_dict(const torch::jit::Module &m, const std::string &prefix,
                    std::vector<std::pair<std::string, torch::Tensor>> &out)
{
    for (const auto &p : m.named_parameters(false)) out.emplace_back(prefix + p.name, p.value);
    for (const auto &b : m.named_buffers(false)) out.emplace_back(prefix + b.name, b.value);
    for (const auto &c : m.named_children()) jit_state_dict(c.value, prefix + c.name + ".", out);
}

}  // namespace

std::vector<torch::Tensor> trs_model::parameters() const
{
    if (!jit) return seq->parameters();
    std::vector<torch::Tensor> out;
    for (const auto &p : jit->parameters()) out.push_back(p);
    return out;
}

torch::Tensor trs_model::forward(const torch::Tensor &x)
{
    if (!jit) return seq->forward(x);
    return trs::jit_forward(*jit, x);
}

void trs_model::train(bool on)
{
    if (jit) jit->train(on);
    else seq->train(on);
}

bool trs_model::is_training() const { return jit ? jit->is_training() : seq->is_training(); }

std::vector<std::pair<std::string, torch::Tensor>> trs::state_dict(const trs_model &m)
{
    std::vector<std::pair<std::string, torch::Tensor>> out;
    if (m.jit) {
        jit_state_dict(*m.jit, "", out);
        return out;
    }
    for (const auto &child : m.seq->named_children()) {
        for (const auto &p : child.value()->named_parameters(false)) out.emplace_back(child.key() + "." + p.key(), p.value());
        for (const auto &b : child.value()->named_buffers(false)) out.emplace_back(child.key() + "." + b.key(), b.value());
    }
    return out;
}

extern "C" trs_status trs_model_create(const trs_layer *layers, size_t n_layers, const int64_t *input_shape,
                                       int input_ndim, trs_model **out)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, out != nullptr, "out is NULL");
    *out = nullptr;
    TRS_CHECK_ARG(err, layers != nullptr && n_layers > 0, "a model needs at least one layer");
    TRS_CHECK_ARG(err, input_shape != nullptr && input_ndim >= 1 && input_ndim < TRS_MAX_DIMS,
                  "input shape must have 1 to " + std::to_string(TRS_MAX_DIMS - 1) + " dims ([D], [T, D], [C, H, W])");
    for (int d = 0; d < input_ndim; d++)
        TRS_CHECK_ARG(err, input_shape[d] > 0, "input shape dimensions must be > 0");
    trs::install_counting_allocator();
    trs::install_cpu_kernels();
    TRS_GUARD(err, {
        auto m = std::make_unique<trs_model>();
        for (size_t i = 0; i < n_layers; i++) append_layer(m->seq, i, layers[i]);
        m->input_shape.assign(input_shape, input_shape + input_ndim);

        // Dry forward, layer by layer, so a mismatch names the layer. Eval mode + no_grad: no running-stat update,
        // no dropout draw, so the default generator is left exactly where initialisation put it.
        {
            torch::NoGradGuard no_grad;
            trs::ModeRestore restore(*m);
            m->train(false);
            std::vector<int64_t> shape{2};
            shape.insert(shape.end(), m->input_shape.begin(), m->input_shape.end());
            torch::Tensor x = torch::zeros(shape);
            size_t i = 0;
            for (auto &layer : *m->seq) {
                try {
                    x = layer.forward(x);
                } catch (const c10::Error &e) {
                    std::string what = e.what_without_backtrace();
                    // the per-sample shape (the probe batch of 2 is ours, not the user's); libtorch's own words
                    // after the colon still count the probe batch as N = 2
                    throw trs::invalid("layer " + std::to_string(i) + " (" + kind_name(layers[i].kind) +
                                       ") does not fit its per-sample input of shape " +
                                       trs::shape_str(x.sizes().slice(1)) + " (libtorch, for a probe batch of 2: " +
                                       what.substr(0, what.find('\n')) + ")");
                }
                i++;
            }
            if (x.dim() < 2 || x.dim() > TRS_MAX_DIMS)
                throw trs::invalid("the model's output has shape " + trs::shape_str(x.sizes()) +
                                   " (for a batch of 2); it must be [N, classes] or [N, T, classes]: end with a "
                                   "linear layer");
            m->output_dim = x.size(x.dim() - 1);
            m->output_shape.assign(x.sizes().begin() + 1, x.sizes().end());
        }
        *out = m.release();
        err.clear();
        return TRS_OK;
    })
}

extern "C" void trs_model_free(trs_model *model) { delete model; }

extern "C" const char *trs_model_errmsg(const trs_model *model)
{
    return model ? model->err.c_str() : "model handle is NULL";
}

extern "C" trs_status trs_model_param_count(trs_model *model, int64_t *count)
{
    return trs::read_out(model, count, "count is NULL", [&] {
        int64_t n = 0;
        for (const auto &p : model->parameters()) n += p.numel();
        return n;
    });
}

extern "C" trs_status trs_model_output_dim(trs_model *model, int64_t *dim)
{
    return trs::read_out(model, dim, "dim is NULL", [&] { return model->output_dim; });
}

extern "C" trs_status trs_model_output_shape(trs_model *model, int64_t *shape, int *ndim)
{
    if (!model) return TRS_E_INVALID;
    if (ndim) *ndim = static_cast<int>(model->output_shape.size());
    if (shape) std::copy(model->output_shape.begin(), model->output_shape.end(), shape);
    return TRS_OK;
}

extern "C" trs_status trs_model_input_dtype(trs_model *model, trs_dtype *dtype)
{
    return trs::read_out(model, dtype, "dtype is NULL",
                         [&] { return model->input_dtype == torch::kInt64 ? TRS_DTYPE_INT64 : TRS_DTYPE_FLOAT32; });
}

extern "C" trs_status trs_model_is_training(trs_model *model, int *training)
{
    return trs::read_out(model, training, "training is NULL", [&] { return model->is_training() ? 1 : 0; });
}

extern "C" trs_status trs_model_digest(trs_model *model, trs_digest_kind which, uint32_t *crc, double *abs_sum,
                                       int64_t *defined)
{
    if (!model) return TRS_E_INVALID;
    TRS_CHECK_ARG(model->err, which == TRS_DIGEST_PARAMS || which == TRS_DIGEST_GRADS, "unknown digest kind");
    TRS_GUARD(model->err, {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> ts;
        if (which == TRS_DIGEST_PARAMS) {
            for (const auto &kv : trs::state_dict(*model)) ts.push_back(kv.second);
        } else {
            for (const auto &p : model->parameters()) ts.push_back(p.grad());
        }
        uLong c = crc32(0L, Z_NULL, 0);
        double sum = 0.0;
        int64_t n = 0;
        for (const auto &t0 : ts) {
            if (!t0.defined()) continue;
            torch::Tensor t = trs::to_host(t0);  // the CPU: t0 itself (contiguous)
            const auto *p = static_cast<const Bytef *>(t.data_ptr());
            size_t len = t.numel() * t.element_size();
            while (len > 0) {
                uInt chunk = len > (1u << 30) ? (1u << 30) : static_cast<uInt>(len);
                c = crc32(c, p, chunk);
                p += chunk;
                len -= chunk;
            }
            if (t.is_floating_point()) sum += t.abs().sum(torch::kDouble).item<double>();
            else sum += static_cast<double>(t.abs().sum().item<int64_t>());
            n++;
        }
        if (crc) *crc = static_cast<uint32_t>(c);
        if (abs_sum) *abs_sum = sum;
        if (defined) *defined = n;
        return TRS_OK;
    })
}

extern "C" trs_status trs_debug_set_leak(trs_model *model, int64_t bytes_per_step)
{
    if (!model) return TRS_E_INVALID;
    TRS_CHECK_ARG(model->err, bytes_per_step >= 0, "bytes_per_step must be >= 0");
    model->debug_leak_bytes = bytes_per_step;
    return TRS_OK;
}

extern "C" trs_status trs_debug_set_eval_leak(trs_model *model, int64_t bytes_per_batch)
{
    if (!model) return TRS_E_INVALID;
    TRS_CHECK_ARG(model->err, bytes_per_batch >= 0, "bytes_per_batch must be >= 0");
    model->debug_eval_leak_bytes = bytes_per_batch;
    return TRS_OK;
}
