#include "schedule.h"

#include <math.h>

static const double TR_PI = 3.14159265358979323846;

double tr_schedule_lr(const tr_config *cfg, int64_t step, int64_t total, int64_t steps_per_epoch)
{
    const double base = cfg->optim.lr;
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
    case TR_SCHED_CONSTANT:
    default:
        return base;
    }
}
