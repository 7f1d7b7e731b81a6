// state.cpp -- what checkpoints need from the shim: the model's state_dict entries and the optimizer's
// per-parameter state read into and written from caller memory, and the default CPU generator's state bytes.
// Bytes cross the ABI into caller buffers; no tensor does.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "internal.hpp"

namespace {

trs_dtype dtype_of(const torch::Tensor &t)
{
    if (t.scalar_type() == torch::kFloat32) return TRS_DTYPE_FLOAT32;
    if (t.scalar_type() == torch::kInt64) return TRS_DTYPE_INT64;
    if (t.scalar_type() == torch::kUInt8) return TRS_DTYPE_UINT8;
    return TRS_DTYPE_OTHER;
}

torch::ScalarType scalar_type_of(trs_dtype d)
{
    switch (d) {
    case TRS_DTYPE_FLOAT32: return torch::kFloat32;
    case TRS_DTYPE_INT64: return torch::kInt64;
    case TRS_DTYPE_UINT8: return torch::kUInt8;
    default: throw trs::invalid("unsupported dtype code " + std::to_string(static_cast<int>(d)));
    }
}

// Describe one named tensor into the caller's outputs.
trs_status describe(std::string &err, const std::string &name, const torch::Tensor &t, char *name_out,
                    size_t name_size, int64_t *shape, int *ndim, trs_dtype *dtype)
{
    const int nd = static_cast<int>(t.dim());
    TRS_CHECK_ARG(err, nd <= TRS_MAX_DIMS, name + " has more than TRS_MAX_DIMS dims");
    if (name_out && name_size > 0) {
        const size_t n = std::min(name_size - 1, name.size());
        std::memcpy(name_out, name.data(), n);
        name_out[n] = '\0';
    }
    if (ndim) *ndim = nd;
    if (shape)
        for (int d = 0; d < nd; d++) shape[d] = t.size(d);
    if (dtype) *dtype = dtype_of(t);
    return TRS_OK;
}

// Copy a tensor's bytes out (through the host for a device tensor); nbytes must match exactly.
void copy_out(const std::string &name, const torch::Tensor &t, void *dst, size_t nbytes)
{
    const size_t want = static_cast<size_t>(t.numel()) * t.element_size();
    if (nbytes != want)
        throw trs::invalid(name + ": buffer has " + std::to_string(nbytes) + " bytes, the tensor " +
                           std::to_string(want));
    torch::Tensor c = trs::to_host(t);
    if (want) std::memcpy(dst, c.data_ptr(), want);
}

// Copy bytes into an existing tensor in place (under no_grad), after checking dtype and size.
void copy_in(const std::string &name, torch::Tensor &t, const void *src, size_t nbytes, trs_dtype dtype)
{
    if (dtype_of(t) != dtype) throw trs::invalid(name + ": dtype differs from the model's");
    const size_t want = static_cast<size_t>(t.numel()) * t.element_size();
    if (nbytes != want)
        throw trs::invalid(name + ": " + std::to_string(nbytes) + " bytes given, the tensor " + trs::shape_str(t.sizes()) +
                           " takes " + std::to_string(want));
    trs::copy_from_host(t, src, want);  // under no_grad; a memcpy on the CPU
}

// ---- optimizer state, named as torch.optim's state_dict: state.<param index>.<field>

// libtorch keys per-parameter state by the TensorImpl address (compat.hpp).
template <typename Map>
typename Map::key_type state_key(const torch::Tensor &p)
{
    return trs::compat::optim_state_key<Map>(p);
}

// A state entry: its name and its tensor (the live one, or a fresh 0-dim int64 for an optimizer's step count).
using NamedTensor = std::pair<std::string, torch::Tensor>;

std::vector<NamedTensor> optimizer_entries(trs_optimizer &o)
{
    std::vector<NamedTensor> out;
    auto &state = o.opt->state();
    using Map = std::remove_reference_t<decltype(state)>;
    const auto params = o.model->parameters();
    for (size_t i = 0; i < params.size(); i++) {
        auto it = state.find(state_key<Map>(params[i]));
        if (it == state.end()) continue;
        const std::string pre = "state." + std::to_string(i) + ".";
        if (o.kind == TRS_OPT_SGD) {
            auto &s = static_cast<torch::optim::SGDParamState &>(*it->second);
            if (s.momentum_buffer().defined()) out.push_back({pre + "momentum_buffer", s.momentum_buffer()});
        } else {
            // AdamWParamState has the same fields as AdamParamState but is a distinct type.
            auto add = [&](auto &s) {
                out.push_back({pre + "step", torch::tensor(s.step(), torch::kInt64).reshape({})});
                if (s.exp_avg().defined()) out.push_back({pre + "exp_avg", s.exp_avg()});
                if (s.exp_avg_sq().defined()) out.push_back({pre + "exp_avg_sq", s.exp_avg_sq()});
                if (s.max_exp_avg_sq().defined()) out.push_back({pre + "max_exp_avg_sq", s.max_exp_avg_sq()});
            };
            if (o.kind == TRS_OPT_ADAM) add(static_cast<torch::optim::AdamParamState &>(*it->second));
            else add(static_cast<torch::optim::AdamWParamState &>(*it->second));
        }
    }
    return out;
}

template <typename S>
S &get_or_create(trs_optimizer &o, const torch::Tensor &p)
{
    auto &state = o.opt->state();
    using Map = std::remove_reference_t<decltype(state)>;
    auto key = state_key<Map>(p);
    auto it = state.find(key);
    if (it == state.end()) it = state.emplace(key, std::make_unique<S>()).first;
    return static_cast<S &>(*it->second);
}

torch::Tensor from_bytes(const std::string &name, const void *src, size_t nbytes, trs_dtype dtype,
                         const int64_t *shape, int ndim)
{
    if (ndim < 0 || ndim > TRS_MAX_DIMS) throw trs::invalid(name + ": bad ndim");
    std::vector<int64_t> dims(shape, shape + ndim);
    torch::Tensor t = torch::empty(dims, scalar_type_of(dtype));
    const size_t want = static_cast<size_t>(t.numel()) * t.element_size();
    if (nbytes != want)
        throw trs::invalid(name + ": " + std::to_string(nbytes) + " bytes given for shape " + trs::shape_str(t.sizes()));
    if (want) std::memcpy(t.data_ptr(), src, want);
    return t;
}


// Describe named tensors into out[0 .. min(n, cap)), the whole list at once.
void describe_all(const std::vector<NamedTensor> &es, trs_state_desc *out, int64_t cap)
{
    const size_t n = std::min(es.size(), static_cast<size_t>(cap));
    for (size_t i = 0; i < n; i++) {
        const std::string &name = es[i].first;
        const torch::Tensor &t = es[i].second;
        trs_state_desc &d = out[i];
        if (name.size() >= sizeof d.name)
            throw trs::invalid(name.substr(0, 64) + "...: name longer than " + std::to_string(sizeof d.name - 1) +
                               " bytes");
        if (t.dim() > TRS_MAX_DIMS) throw trs::invalid(name + " has more than TRS_MAX_DIMS dims");
        std::memcpy(d.name, name.c_str(), name.size() + 1);
        d.ndim = static_cast<int>(t.dim());
        for (int k = 0; k < d.ndim; k++) d.shape[k] = t.size(k);
        d.dtype = dtype_of(t);
        d.nbytes = static_cast<size_t>(t.numel()) * t.element_size();
    }
}

// Copy named tensors into dst[i] (nbytes[i] each) after checking the count.
void read_all(const std::vector<NamedTensor> &es, void *const *dst, const size_t *nbytes, int64_t count)
{
    if (count < 0 || static_cast<size_t>(count) != es.size())
        throw trs::invalid(std::to_string(count) + " entries asked for, the state has " + std::to_string(es.size()));
    if (count > 0 && (!dst || !nbytes)) throw trs::invalid("dst or nbytes is NULL");
    for (size_t i = 0; i < es.size(); i++) {
        if (!dst[i] && nbytes[i] > 0) throw trs::invalid(es[i].first + ": dst is NULL");
        copy_out(es[i].first, es[i].second, dst[i], nbytes[i]);
    }
}

// ---- a handle's state entries, in a fixed order: a model's state_dict, an EMA's averages (under the state_dict's
// names), an optimizer's per-parameter state (under torch.optim's names). Each state entry point below is one of
// these templates, the same for the three handles.

std::vector<NamedTensor> entries_of(trs_model &m) { return trs::state_dict(m); }

std::vector<NamedTensor> entries_of(trs_ema &e)
{
    std::vector<NamedTensor> es;
    es.reserve(e.avg.size());
    for (size_t i = 0; i < e.avg.size(); i++) es.emplace_back(e.names[i], e.avg[i]);
    return es;
}

std::vector<NamedTensor> entries_of(trs_optimizer &o) { return optimizer_entries(o); }

// Run fn(entry) on entry `index` of h's state, under TRS_GUARD: TRS_E_INVALID naming the range when there is none.
template <typename Handle, typename Fn>
trs_status with_entry(Handle *h, int64_t index, Fn fn)
{
    TRS_GUARD(h->err, {
        std::vector<NamedTensor> es = entries_of(*h);
        if (index < 0 || index >= static_cast<int64_t>(es.size()))
            throw trs::invalid("index " + std::to_string(index) + " is outside [0, " + std::to_string(es.size()) + ")");
        return fn(es[static_cast<size_t>(index)]);
    })
}

template <typename Handle>
trs_status state_count(Handle *h, int64_t *count)
{
    return trs::read_out(h, count, "count is NULL", [&] { return static_cast<int64_t>(entries_of(*h).size()); });
}

template <typename Handle>
trs_status state_entry(Handle *h, int64_t index, char *name, size_t name_size, int64_t *shape, int *ndim,
                       trs_dtype *dtype)
{
    if (!h) return TRS_E_INVALID;
    return with_entry(h, index, [&](const NamedTensor &e) {
        return describe(h->err, e.first, e.second, name, name_size, shape, ndim, dtype);
    });
}

template <typename Handle>
trs_status state_read(Handle *h, int64_t index, void *dst, size_t nbytes)
{
    if (!h) return TRS_E_INVALID;
    TRS_CHECK_ARG(h->err, dst != nullptr || nbytes == 0, "dst is NULL");
    return with_entry(h, index, [&](const NamedTensor &e) {
        copy_out(e.first, e.second, dst, nbytes);
        return TRS_OK;
    });
}

// A model's or an EMA's (an optimizer's state is loaded by name: trs_optimizer_state_load).
template <typename Handle>
trs_status state_write(Handle *h, int64_t index, const void *src, size_t nbytes, trs_dtype dtype)
{
    if (!h) return TRS_E_INVALID;
    TRS_CHECK_ARG(h->err, src != nullptr || nbytes == 0, "src is NULL");
    return with_entry(h, index, [&](NamedTensor &e) {
        copy_in(e.first, e.second, src, nbytes, dtype);
        return TRS_OK;
    });
}

template <typename Handle>
trs_status state_describe(Handle *h, trs_state_desc *out, int64_t cap, int64_t *count)
{
    if (!h) return TRS_E_INVALID;
    TRS_CHECK_ARG(h->err, count != nullptr && cap >= 0 && (out != nullptr || cap == 0), "bad count, cap or out");
    TRS_GUARD(h->err, {
        const std::vector<NamedTensor> es = entries_of(*h);
        describe_all(es, out, cap);
        *count = static_cast<int64_t>(es.size());
        return TRS_OK;
    })
}

template <typename Handle>
trs_status state_read_all(Handle *h, void *const *dst, const size_t *nbytes, int64_t count)
{
    if (!h) return TRS_E_INVALID;
    TRS_GUARD(h->err, {
        read_all(entries_of(*h), dst, nbytes, count);
        return TRS_OK;
    })
}

}  // namespace

// ------------------------------------------------------------------------------------------------ entry points

// The state entry points of one kind of handle, each the template of its name over the handle's entries:
// trs_<kind>_state_count, _entry, _read, _describe and _read_all (trainrun_shim.h documents each).
#define TRS_STATE_ENTRY_POINTS(kind, Handle)                                                                       \
    extern "C" trs_status trs_##kind##_state_count(Handle *h, int64_t *count) { return state_count(h, count); }    \
    extern "C" trs_status trs_##kind##_state_entry(Handle *h, int64_t index, char *name, size_t name_size,         \
                                                   int64_t *shape, int *ndim, trs_dtype *dtype)                    \
    {                                                                                                              \
        return state_entry(h, index, name, name_size, shape, ndim, dtype);                                         \
    }                                                                                                              \
    extern "C" trs_status trs_##kind##_state_read(Handle *h, int64_t index, void *dst, size_t nbytes)              \
    {                                                                                                              \
        return state_read(h, index, dst, nbytes);                                                                  \
    }                                                                                                              \
    extern "C" trs_status trs_##kind##_state_describe(Handle *h, trs_state_desc *out, int64_t cap, int64_t *count) \
    {                                                                                                              \
        return state_describe(h, out, cap, count);                                                                 \
    }                                                                                                              \
    extern "C" trs_status trs_##kind##_state_read_all(Handle *h, void *const *dst, const size_t *nbytes,           \
                                                      int64_t count)                                               \
    {                                                                                                              \
        return state_read_all(h, dst, nbytes, count);                                                              \
    }

TRS_STATE_ENTRY_POINTS(model, trs_model)
TRS_STATE_ENTRY_POINTS(ema, trs_ema)
TRS_STATE_ENTRY_POINTS(optimizer, trs_optimizer)

// Written in place, entry by entry: a model's and an EMA's (an optimizer's state is loaded by name below).

extern "C" trs_status trs_model_state_write(trs_model *model, int64_t index, const void *src, size_t nbytes,
                                            trs_dtype dtype)
{
    return state_write(model, index, src, nbytes, dtype);
}

extern "C" trs_status trs_ema_state_write(trs_ema *ema, int64_t index, const void *src, size_t nbytes,
                                          trs_dtype dtype)
{
    return state_write(ema, index, src, nbytes, dtype);
}

// ------------------------------------------------------------------------------------------------ optimizer

extern "C" trs_status trs_optimizer_state_load(trs_optimizer *opt, const char *name, const void *src, size_t nbytes,
                                               trs_dtype dtype, const int64_t *shape, int ndim)
{
    if (!opt) return TRS_E_INVALID;
    TRS_CHECK_ARG(opt->err, name != nullptr && (src != nullptr || nbytes == 0), "name or src is NULL");
    TRS_GUARD(opt->err, {
        // "state.<i>.<field>"
        const std::string n(name);
        size_t idx = 0;
        std::string field;
        {
            const size_t a = n.find('.'), b = n.find('.', a + 1);
            if (n.compare(0, 6, "state.") != 0 || b == std::string::npos)
                throw trs::invalid(n + ": not an optimizer state name (state.<index>.<field>)");
            idx = std::stoul(n.substr(a + 1, b - a - 1));
            field = n.substr(b + 1);
        }
        const auto params = opt->model->parameters();
        if (idx >= params.size())
            throw trs::invalid(n + ": the model has " + std::to_string(params.size()) + " parameters");
        const torch::Tensor &p = params[idx];
        torch::Tensor t = from_bytes(n, src, nbytes, dtype, shape, ndim);
        if (field == "step") {
            if (t.numel() != 1 || t.scalar_type() != torch::kInt64) throw trs::invalid(n + ": must be one int64");
            const int64_t step = t.item<int64_t>();
            if (opt->kind == TRS_OPT_ADAM) get_or_create<torch::optim::AdamParamState>(*opt, p).step(step);
            else if (opt->kind == TRS_OPT_ADAMW) get_or_create<torch::optim::AdamWParamState>(*opt, p).step(step);
            else throw trs::invalid(n + ": SGD has no step count");
            return TRS_OK;
        }
        if (!t.sizes().equals(p.sizes()) || t.scalar_type() != p.scalar_type())
            throw trs::invalid(n + ": shape " + trs::shape_str(t.sizes()) + " does not match parameter " +
                               std::to_string(idx) + " of shape " + trs::shape_str(p.sizes()));
        t = t.to(p.device());  // optimizer state lives with its parameter (the CPU: t itself)
        auto set_adam = [&](auto &s) {
            if (field == "exp_avg") s.exp_avg(t);
            else if (field == "exp_avg_sq") s.exp_avg_sq(t);
            else if (field == "max_exp_avg_sq") s.max_exp_avg_sq(t);
            else throw trs::invalid(n + ": Adam/AdamW state has no field '" + field + "'");
        };
        if (opt->kind == TRS_OPT_SGD) {
            if (field != "momentum_buffer") throw trs::invalid(n + ": SGD state has no field '" + field + "'");
            get_or_create<torch::optim::SGDParamState>(*opt, p).momentum_buffer(t);
        } else if (opt->kind == TRS_OPT_ADAM) {
            set_adam(get_or_create<torch::optim::AdamParamState>(*opt, p));
        } else {
            set_adam(get_or_create<torch::optim::AdamWParamState>(*opt, p));
        }
        return TRS_OK;
    })
}

// ------------------------------------------------------------------------------------------------ RNG

extern "C" trs_status trs_rng_state_size(size_t *nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, nbytes != nullptr, "nbytes is NULL");
    TRS_GUARD(err, {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        *nbytes = static_cast<size_t>(gen.get_state().numel());
        return TRS_OK;
    })
}

extern "C" trs_status trs_rng_get_state(void *dst, size_t nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, dst != nullptr, "dst is NULL");
    TRS_GUARD(err, {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        torch::Tensor st = gen.get_state();
        if (static_cast<size_t>(st.numel()) != nbytes)
            throw trs::invalid("the CPU generator state has " + std::to_string(st.numel()) + " bytes, not " +
                               std::to_string(nbytes));
        std::memcpy(dst, st.data_ptr(), nbytes);
        return TRS_OK;
    })
}

extern "C" trs_status trs_rng_set_state(const void *src, size_t nbytes)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, src != nullptr, "src is NULL");
    TRS_GUARD(err, {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        const size_t want = static_cast<size_t>(gen.get_state().numel());
        if (nbytes != want)
            throw trs::invalid("a CPU generator state of " + std::to_string(nbytes) + " bytes was given; this libtorch's is " +
                               std::to_string(want) + " bytes (saved by another libtorch version?)");
        torch::Tensor st = torch::empty({static_cast<int64_t>(nbytes)}, torch::kUInt8);
        std::memcpy(st.data_ptr(), src, nbytes);
        gen.set_state(st);
        return TRS_OK;
    })
}

extern "C" trs_status trs_rng_normal(double *out, size_t n)
{
    std::string &err = trs::last_error();
    TRS_CHECK_ARG(err, out != nullptr || n == 0, "out is NULL");
    TRS_GUARD(err, {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        at::normal_distribution<double> normal(0.0, 1.0);
        for (size_t i = 0; i < n; i++) out[i] = normal(gen.get<at::CPUGeneratorImpl>());
        return TRS_OK;
    })
}
