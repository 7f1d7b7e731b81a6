#include "schedule.h"

#include <math.h>

static const double TR_PI = 3.14159265358979323846;

double tr_schedule_lr(const tr_config *cfg, int64_t step, int64_t total)
{
    const double base = cfg->optim.lr;
    const int64_t warm = cfg->schedule.warmup_steps;
    if (step < warm) return base * (double)(step + 1) / (double)warm;
    switch (cfg->schedule.name) {
    case TR_SCHED_STEP:
        return base * pow(cfg->schedule.gamma, (double)(step / cfg->schedule.step_size));
    case TR_SCHED_COSINE: {
        const double span = (double)(total - warm > 1 ? total - warm : 1);
        double p = (double)(step - warm) / span;
        if (p > 1.0) p = 1.0;
        const double min_lr = cfg->schedule.min_lr;
        return min_lr + (base - min_lr) * 0.5 * (1.0 + cos(TR_PI * p));
    }
    case TR_SCHED_CONSTANT:
    default:
        return base;
    }
}
