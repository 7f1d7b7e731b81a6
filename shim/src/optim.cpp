// optim.cpp -- optimizers over a model's parameters (torch::optim), created and tuned through the C ABI.
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "internal.hpp"

extern "C" trs_status trs_optimizer_create(trs_model *model, const trs_optim_options *o, trs_optimizer **out)
{
    if (!model) return TRS_E_INVALID;
    std::string &err = model->err;
    TRS_CHECK_ARG(err, out != nullptr, "out is NULL");
    *out = nullptr;
    TRS_CHECK_ARG(err, o != nullptr, "options are NULL");
    TRS_CHECK_ARG(err, std::isfinite(o->lr) && o->lr >= 0, "lr must be a finite value >= 0");
    TRS_CHECK_ARG(err, o->weight_decay >= 0, "weight_decay must be >= 0");
    TRS_GUARD(err, {
        auto h = std::make_unique<trs_optimizer>();
        h->model = model;
        h->kind = o->kind;
        // Param groups: one, or (weight-decay exclusion) group 0 with weight_decay and group 1 without.
        std::vector<torch::Tensor> decay, no_decay;
        for (const auto &kv : trs::state_dict(*model)) {
            const torch::Tensor &p = kv.second;
            if (!p.requires_grad()) continue;  // a buffer
            const std::string &name = kv.first;
            bool excluded = o->no_decay_1d &&
                            (p.dim() <= 1 || (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0));
            for (size_t i = 0; !excluded && o->no_decay && i < o->n_no_decay; i++)
                excluded = o->no_decay[i] && fnmatch(o->no_decay[i], name.c_str(), 0) == 0;
            (excluded ? no_decay : decay).push_back(p);
        }
        const bool split = o->no_decay_1d || o->n_no_decay > 0;
        std::vector<torch::optim::OptimizerParamGroup> groups;
        auto add_groups = [&](const auto &defaults) {
            using Options = std::decay_t<decltype(defaults)>;
            if (!split) {
                groups.emplace_back(model->parameters(), std::make_unique<Options>(defaults));
                return;
            }
            if (!decay.empty()) groups.emplace_back(decay, std::make_unique<Options>(defaults));
            if (!no_decay.empty()) {
                auto nd = std::make_unique<Options>(defaults);
                nd->weight_decay(0.0);
                groups.emplace_back(no_decay, std::move(nd));
            }
        };
        switch (o->kind) {
        case TRS_OPT_SGD:
            TRS_CHECK_ARG(err, o->momentum >= 0 && o->dampening >= 0, "momentum and dampening must be >= 0");
            TRS_CHECK_ARG(err, !o->nesterov || (o->momentum > 0 && o->dampening == 0),
                          "nesterov momentum requires a momentum > 0 and zero dampening");
        {
            const auto d = torch::optim::SGDOptions(o->lr)
                               .momentum(o->momentum)
                               .dampening(o->dampening)
                               .weight_decay(o->weight_decay)
                               .nesterov(o->nesterov != 0);
            add_groups(d);
            h->opt = std::make_unique<torch::optim::SGD>(std::move(groups), d);
        }
            break;
        case TRS_OPT_ADAM:
        case TRS_OPT_ADAMW:
            TRS_CHECK_ARG(err, o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1,
                          "betas must be in [0, 1)");
            TRS_CHECK_ARG(err, o->eps > 0, "eps must be > 0");
        {
            // the fused step (optim_fused.cpp) where it equals the reference step; the reference step otherwise
            const bool fused = o->fused && !o->amsgrad && model->device.is_cpu() && trs::fused_adam_supported();
            // Adam and AdamW take the same options from `o`; only the options' type (AdamW: decoupled decay) and
            // the maker differ.
            auto adam_like = [&](auto d, auto make) {
                d.betas({o->beta1, o->beta2}).eps(o->eps).weight_decay(o->weight_decay).amsgrad(o->amsgrad != 0);
                add_groups(d);
                h->opt = make(std::move(groups), d, fused);
            };
            if (o->kind == TRS_OPT_ADAM) adam_like(torch::optim::AdamOptions(o->lr), trs::make_adam);
            else adam_like(torch::optim::AdamWOptions(o->lr), trs::make_adamw);
        }
            break;
        default:
            err = "unknown optimizer kind " + std::to_string(static_cast<int>(o->kind));
            return TRS_E_INVALID;
        }
        *out = h.release();
        err.clear();
        return TRS_OK;
    })
}

extern "C" void trs_optimizer_free(trs_optimizer *opt) { delete opt; }

extern "C" const char *trs_optimizer_errmsg(const trs_optimizer *opt)
{
    return opt ? opt->err.c_str() : "optimizer handle is NULL";
}

extern "C" trs_status trs_optimizer_set_lr(trs_optimizer *opt, double lr)
{
    if (!opt) return TRS_E_INVALID;
    TRS_CHECK_ARG(opt->err, std::isfinite(lr) && lr >= 0, "lr must be a finite value >= 0");
    TRS_GUARD(opt->err, {
        for (auto &g : opt->opt->param_groups()) g.options().set_lr(lr);
        return TRS_OK;
    })
}

extern "C" trs_status trs_optimizer_get_lr(trs_optimizer *opt, double *lr)
{
    return trs::read_out(opt, lr, "lr is NULL", [&] { return opt->opt->param_groups().at(0).options().get_lr(); });
}

extern "C" trs_status trs_optimizer_fused(trs_optimizer *opt, int *fused)
{
    if (!opt) return TRS_E_INVALID;
    TRS_CHECK_ARG(opt->err, fused != nullptr, "fused is NULL");
    const auto *f = dynamic_cast<const trs::FusedStep *>(opt->opt.get());
    *fused = f && f->last_step_fused ? 1 : 0;
    return TRS_OK;
}

extern "C" trs_status trs_optimizer_param_group(trs_optimizer *opt, int64_t group, int64_t *count,
                                                double *weight_decay, char *names, size_t names_size)
{
    if (!opt) return TRS_E_INVALID;
    TRS_GUARD(opt->err, {
        auto &groups = opt->opt->param_groups();
        if (group == -1) {
            TRS_CHECK_ARG(opt->err, count != nullptr, "count is NULL");
            *count = static_cast<int64_t>(groups.size());
            return TRS_OK;
        }
        TRS_CHECK_ARG(opt->err, group >= 0 && group < static_cast<int64_t>(groups.size()),
                      "param group " + std::to_string(group) + " does not exist");
        auto &g = groups[static_cast<size_t>(group)];
        if (count) *count = static_cast<int64_t>(g.params().size());
        if (weight_decay) {
            auto &op = g.options();
            if (opt->kind == TRS_OPT_SGD) *weight_decay = static_cast<torch::optim::SGDOptions &>(op).weight_decay();
            else if (opt->kind == TRS_OPT_ADAM)
                *weight_decay = static_cast<torch::optim::AdamOptions &>(op).weight_decay();
            else *weight_decay = static_cast<torch::optim::AdamWOptions &>(op).weight_decay();
        }
        if (names && names_size > 0) {
            std::string list;
            for (const auto &p : g.params())
                for (const auto &kv : trs::state_dict(*opt->model))
                    if (kv.second.unsafeGetTensorImpl() == p.unsafeGetTensorImpl())
                        list += (list.empty() ? "" : ",") + kv.first;
            const size_t n = std::min(names_size - 1, list.size());
            std::memcpy(names, list.data(), n);
            names[n] = '\0';
        }
        return TRS_OK;
    })
}
