// ema.cpp -- an exponential moving average of a model's weights: an fp32 copy made once, updated in place under
// no_grad, never requiring grad, and swapped with the live weights (no copy) to evaluate it.
#include <algorithm>
#include <cmath>

#include "internal.hpp"

namespace {

// Exchange the storage of live[i] and avg[i] (no bytes copied): a second handle on the live storage, then
// set_data both ways.
void swap_one(trs_ema &e, size_t i)
{
    torch::Tensor held = e.live[i].detach();
    e.live[i].set_data(e.avg[i]);
    e.avg[i].set_data(held);
}

}  // namespace

trs::EmaSwap::EmaSwap(trs_ema *e) : ema(e)
{
    torch::NoGradGuard no_grad;
    size_t done = 0;
    try {
        for (; done < ema->live.size(); done++) swap_one(*ema, done);
    } catch (...) {  // roll back the ones already swapped: the model leaves as it came
        try {
            while (done > 0) swap_one(*ema, --done);
        } catch (...) {
        }
        throw;
    }
}

trs::EmaSwap::~EmaSwap()
{
    try {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < ema->live.size(); i++) swap_one(*ema, i);
    } catch (...) {  // set_data on tensors that passed it once does not fail; nothing may escape a destructor
    }
}

namespace {

double next_decay(const trs_ema &e)
{
    if (!e.opts.warmup) return e.opts.decay;
    // tf.train.ExponentialMovingAverage(decay, num_updates): min(decay, (1 + num_updates) / (10 + num_updates)).
    const double t = static_cast<double>(e.updates);
    return std::min(e.opts.decay, (1.0 + t) / (10.0 + t));
}

void copy_live(trs_ema &e)
{
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < e.live.size(); i++) e.avg[i].copy_(e.live[i]);
}

}  // namespace

extern "C" trs_status trs_ema_create(trs_model *model, const trs_ema_options *o, trs_ema **out)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, out != nullptr, "out is NULL");
    *out = nullptr;
    TRS_CHECK_ARG(err, o != nullptr, "options are NULL");
    TRS_CHECK_ARG(err, o->decay >= 0 && o->decay <= 1, "ema decay must be in [0, 1]");
    TRS_GUARD(err, {
        auto e = std::make_unique<trs_ema>();
        e->model = model;
        e->opts = *o;
        torch::NoGradGuard no_grad;
        for (const auto &kv : trs::state_dict(*model)) {
            const torch::Tensor &t = kv.second;
            const bool floating = t.is_floating_point();
            e->names.push_back(kv.first);
            e->live.push_back(t);
            // fp32 master copy of floating-point entries; integer buffers keep their dtype.
            e->avg.push_back(t.detach().to(floating ? torch::kFloat32 : t.scalar_type(), false, true).contiguous());
            e->avg.back().set_requires_grad(false);
            const bool is_param = t.requires_grad();
            e->averaged.push_back(floating && (is_param || o->buffers_average) ? 1 : 0);
            if (floating && t.scalar_type() != torch::kFloat32)
                throw trs::invalid(kv.first + ": EMA over non-fp32 weights is not supported (the swap needs fp32)");
        }
        *out = e.release();
        err.clear();
        return TRS_OK;
    })
}

extern "C" void trs_ema_free(trs_ema *ema) { delete ema; }

extern "C" const char *trs_ema_errmsg(const trs_ema *ema) { return ema ? ema->err.c_str() : "EMA handle is NULL"; }

extern "C" trs_status trs_ema_update(trs_ema *ema)
{
    if (!ema) return TRS_E_INVALID;
    TRS_GUARD(ema->err, {
        trs::PhaseScope phase(TRS_PHASE_EMA);
        torch::NoGradGuard no_grad;
        const double d = next_decay(*ema);
        for (size_t i = 0; i < ema->live.size(); i++) {
            if (ema->averaged[i]) ema->avg[i].mul_(d).add_(ema->live[i], 1.0 - d);
            else ema->avg[i].copy_(ema->live[i]);
        }
        ema->updates++;
        return TRS_OK;
    })
}

extern "C" trs_status trs_ema_reset(trs_ema *ema)
{
    if (!ema) return TRS_E_INVALID;
    TRS_GUARD(ema->err, {
        trs::PhaseScope phase(TRS_PHASE_EMA);
        copy_live(*ema);
        ema->updates = 0;
        return TRS_OK;
    })
}

extern "C" trs_status trs_ema_get_updates(trs_ema *ema, int64_t *updates)
{
    return trs::read_out(ema, updates, "updates is NULL", [&] { return ema->updates; });
}

extern "C" trs_status trs_ema_set_updates(trs_ema *ema, int64_t updates)
{
    if (!ema) return TRS_E_INVALID;
    TRS_CHECK_ARG(ema->err, updates >= 0, "updates must be >= 0");
    ema->updates = updates;
    return TRS_OK;
}

extern "C" trs_status trs_ema_next_decay(trs_ema *ema, double *decay)
{
    return trs::read_out(ema, decay, "decay is NULL", [&] { return next_decay(*ema); });
}

extern "C" trs_status trs_ema_requires_grad_count(trs_ema *ema, int64_t *count)
{
    return trs::read_out(ema, count, "count is NULL", [&] {
        int64_t n = 0;
        for (const auto &t : ema->avg) n += t.requires_grad() ? 1 : 0;
        return n;
    });
}
