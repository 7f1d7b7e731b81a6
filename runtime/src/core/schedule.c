#include "schedule.h"

#include <math.h>
#include <stdio.h>

static const double TR_PI = 3.14159265358979323846;

double tr_schedule_lr(const tr_config *cfg, int64_t step, int64_t total, int64_t steps_per_epoch)
{
    return tr_schedule_lr_from(cfg, cfg->optim.lr, step, total, steps_per_epoch);
}

double tr_schedule_lr_from(const tr_config *cfg, double base, int64_t step, int64_t total, int64_t steps_per_epoch)
{
    const int64_t warm = cfg->schedule.warmup_steps;
    if (step < warm) return base * (double)(step + 1) / (double)warm;
    const int per_epoch = cfg->schedule.interval == TR_INTERVAL_EPOCH;
    const int64_t spe = steps_per_epoch > 0 ? steps_per_epoch : 1;
    const int64_t c = per_epoch ? step / spe : step;
    switch (cfg->schedule.name) {
    case TR_SCHED_STEP:
        return base * pow(cfg->schedule.gamma, (double)(c / cfg->schedule.step_size));
    case TR_SCHED_MULTISTEP: {
        int passed = 0;
        for (int i = 0; i < cfg->schedule.n_milestones; i++) passed += cfg->schedule.milestones[i] <= (double)c;
        return base * pow(cfg->schedule.gamma, (double)passed);
    }
    case TR_SCHED_COSINE: {
        double p;
        if (per_epoch) {
            const int64_t epochs = total / spe;
            p = (double)c / (double)(epochs > 1 ? epochs : 1);
        } else {
            const double span = (double)(total - warm > 1 ? total - warm : 1);
            p = (double)(step - warm) / span;
        }
        if (p > 1.0) p = 1.0;
        const double min_lr = cfg->schedule.min_lr;
        return min_lr + (base - min_lr) * 0.5 * (1.0 + cos(TR_PI * p));
    }
    case TR_SCHED_PLATEAU: /* base is the plateau's lr */
    case TR_SCHED_CONSTANT:
    default:
        return base;
    }
}

void tr_plateau_init(const tr_config *cfg, tr_select_state *s)
{
    snprintf(s->plateau_metric, sizeof s->plateau_metric, "%s", cfg->schedule.monitor);
    s->plateau.lr = cfg->optim.lr;
    s->plateau.best = cfg->schedule.mode == TR_MODE_MAX ? -INFINITY : INFINITY;
    s->plateau.bad = s->plateau.cooldown = s->plateau.reductions = 0;
}

/* ReduceLROnPlateau.is_better */
static int plateau_better(const tr_config *cfg, double a, double best)
{
    const double th = cfg->schedule.threshold;
    const int max = cfg->schedule.mode == TR_MODE_MAX;
    if (cfg->schedule.threshold_mode == TR_THRESHOLD_REL) return max ? a > best * (th + 1.0) : a < best * (1.0 - th);
    return max ? a > best + th : a < best - th;
}

int tr_plateau_step(const tr_config *cfg, tr_select_state *s, double value)
{
    if (plateau_better(cfg, value, s->plateau.best)) {
        s->plateau.best = value;
        s->plateau.bad = 0;
    } else {
        s->plateau.bad++;
    }
    if (s->plateau.cooldown > 0) { /* in cooldown: bad evaluations are not counted */
        s->plateau.cooldown--;
        s->plateau.bad = 0;
    }
    if (s->plateau.bad <= cfg->schedule.patience) return 0;
    const double old = s->plateau.lr;
    double lr = old * cfg->schedule.factor;
    if (lr < cfg->schedule.min_lr) lr = cfg->schedule.min_lr;
    int reduced = 0;
    if (old - lr > 1e-8) { /* torch's eps */
        s->plateau.lr = lr;
        s->plateau.reductions++;
        reduced = 1;
    }
    s->plateau.cooldown = cfg->schedule.cooldown;
    s->plateau.bad = 0;
    return reduced;
}
