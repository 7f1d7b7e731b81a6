// optim.cpp -- optimizers over a model's parameters (torch::optim), created and tuned through the C ABI.
#include <cmath>

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
        auto params = model->seq->parameters();
        switch (o->kind) {
        case TRS_OPT_SGD:
            TRS_CHECK_ARG(err, o->momentum >= 0 && o->dampening >= 0, "momentum and dampening must be >= 0");
            TRS_CHECK_ARG(err, !o->nesterov || (o->momentum > 0 && o->dampening == 0),
                          "nesterov momentum requires a momentum > 0 and zero dampening");
            h->opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o->lr)
                                                                     .momentum(o->momentum)
                                                                     .dampening(o->dampening)
                                                                     .weight_decay(o->weight_decay)
                                                                     .nesterov(o->nesterov != 0));
            break;
        case TRS_OPT_ADAM:
        case TRS_OPT_ADAMW:
            TRS_CHECK_ARG(err, o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1,
                          "betas must be in [0, 1)");
            TRS_CHECK_ARG(err, o->eps > 0, "eps must be > 0");
            if (o->kind == TRS_OPT_ADAM)
                h->opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o->lr)
                                                                          .betas({o->beta1, o->beta2})
                                                                          .eps(o->eps)
                                                                          .weight_decay(o->weight_decay)
                                                                          .amsgrad(o->amsgrad != 0));
            else
                h->opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o->lr)
                                                                           .betas({o->beta1, o->beta2})
                                                                           .eps(o->eps)
                                                                           .weight_decay(o->weight_decay)
                                                                           .amsgrad(o->amsgrad != 0));
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
    if (!opt) return TRS_E_INVALID;
    TRS_CHECK_ARG(opt->err, lr != nullptr, "lr is NULL");
    TRS_GUARD(opt->err, {
        *lr = opt->opt->param_groups().at(0).options().get_lr();
        return TRS_OK;
    })
}
