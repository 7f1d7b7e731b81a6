#include "watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tr_watchdog_init(tr_watchdog *wd, const tr_config *cfg, int64_t available, tr_error *err)
{
    memset(wd, 0, sizeof *wd);
    wd->every_steps = cfg->watchdog.every_steps;
    wd->window = cfg->watchdog.window;
    wd->warn_ratio = cfg->watchdog.warn_ratio;
    wd->limit_ratio = cfg->watchdog.limit_ratio;
    wd->limit_fraction = cfg->watchdog.limit_fraction;
    wd->limit_bytes = cfg->watchdog.limit_bytes;
    wd->available_bytes = available;
    wd->steps = calloc((size_t)wd->window, sizeof *wd->steps);
    wd->bytes = calloc((size_t)wd->window, sizeof *wd->bytes);
    if (!wd->steps || !wd->bytes) {
        tr_watchdog_free(wd);
        return tr_error_set(err, TR_E_RUNTIME, "watchdog: out of memory");
    }
    return TR_OK;
}

void tr_watchdog_free(tr_watchdog *wd)
{
    free(wd->steps);
    free(wd->bytes);
    wd->steps = wd->bytes = NULL;
}

double tr_least_squares_slope(const int64_t *x, const int64_t *y, int64_t n)
{
    if (n < 2) return 0.0;
    /* Centre both series first: byte counts are ~1e9 and steps ~1e6, so raw sums of products lose digits. */
    double mx = 0.0, my = 0.0;
    for (int64_t i = 0; i < n; i++) {
        mx += (double)(x[i] - x[0]);
        my += (double)(y[i] - y[0]);
    }
    mx /= (double)n;
    my /= (double)n;
    double sxy = 0.0, sxx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double dx = (double)(x[i] - x[0]) - mx, dy = (double)(y[i] - y[0]) - my;
        sxy += dx * dy;
        sxx += dx * dx;
    }
    return sxx > 0.0 ? sxy / sxx : 0.0;
}

/* The effective hard limit: the smallest of the configured ones, 0 when none is. */
static int64_t effective_limit(const tr_watchdog *wd)
{
    int64_t lim = 0;
    const double cands[3] = {wd->limit_ratio > 0 ? wd->limit_ratio * (double)wd->baseline : 0.0,
                             wd->limit_fraction > 0 && wd->available_bytes > 0
                                 ? wd->limit_fraction * (double)wd->available_bytes
                                 : 0.0,
                             (double)wd->limit_bytes};
    for (int i = 0; i < 3; i++)
        if (cands[i] > 0 && (lim == 0 || (int64_t)cands[i] < lim)) lim = (int64_t)cands[i];
    return lim;
}

int64_t tr_watchdog_limit_without_baseline(const tr_watchdog *wd)
{
    tr_watchdog w = *wd;
    w.limit_ratio = 0.0;
    return effective_limit(&w);
}

tr_watchdog_event tr_watchdog_sample(tr_watchdog *wd, int64_t step, int64_t bytes, int warm,
                                     tr_watchdog_report *rep)
{
    tr_watchdog_report r = {.step = step, .current = bytes, .steps_left = -1.0, .reserved = -1};
    if (!wd->has_baseline) {
        if (warm) {
            wd->has_baseline = 1;
            wd->baseline = bytes;
            wd->baseline_step = step;
            wd->limit = effective_limit(wd);
            r.event = TR_WD_EV_BASELINE;
        }
    }
    if (wd->has_baseline) {
        /* ring buffer, oldest first when read back in order */
        const int64_t slot = (wd->head + wd->count) % wd->window;
        if (wd->count < wd->window) {
            wd->count++;
        } else {
            wd->head = (wd->head + 1) % wd->window;
        }
        wd->steps[slot] = step;
        wd->bytes[slot] = bytes;
        int64_t xs[4096], ys[4096];
        for (int64_t i = 0; i < wd->count; i++) {
            xs[i] = wd->steps[(wd->head + i) % wd->window];
            ys[i] = wd->bytes[(wd->head + i) % wd->window];
        }
        r.baseline = wd->baseline;
        r.limit = wd->limit;
        r.growth_per_step = tr_least_squares_slope(xs, ys, wd->count);
        if (r.limit > 0 && r.growth_per_step > 0)
            r.steps_left = (double)(r.limit - bytes) / r.growth_per_step;

        if (r.event == TR_WD_EV_NONE) {
            const int over_warn = (double)bytes > wd->warn_ratio * (double)wd->baseline;
            const int at_limit = r.limit > 0 && (bytes >= r.limit || (r.growth_per_step > 0 &&
                                                                      (double)bytes + r.growth_per_step *
                                                                      (double)wd->every_steps >= (double)r.limit));
            if (at_limit) {
                r.event = TR_WD_EV_LIMIT;
            } else if (over_warn && !wd->warned) {
                r.event = TR_WD_EV_WARN;
                wd->warned = 1;
            } else if (!over_warn) {
                wd->warned = 0;
            }
        }
    }
    wd->last = r;
    if (rep) *rep = r;
    return r.event;
}

int tr_watchdog_warmed_up(const tr_config *cfg, int64_t step, int eval_waiting, int64_t checkpoints)
{
    return step >= 1 && step >= cfg->watchdog.warmup_steps && !eval_waiting &&
           (cfg->checkpoint.every_steps <= 0 || checkpoints > 0);
}
