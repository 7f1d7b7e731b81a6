/*
 * selection.c -- model selection on a monitored metric (selection.h): the top-k set, early stopping.
 */
#include "selection.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int tr_monitor_better(double a, double b, int mode_max) { return mode_max ? a > b : a < b; }

/* ------------------------------------------------------------------------------------------------ top-k */

int tr_topk_offer(tr_topk *t, int k, int mode_max, int64_t step, double score, int64_t *evicted)
{
    if (evicted) *evicted = -1;
    if (k < 1) k = 1;
    if (k > TR_TOPK_MAX) k = TR_TOPK_MAX;
    if (!isfinite(score)) return 0;
    if (t->n >= k && !tr_monitor_better(score, t->score[t->n - 1], mode_max)) return 0;
    if (t->n >= k) { /* the worst leaves */
        if (evicted) *evicted = t->step[t->n - 1];
        t->n = k - 1;
    }
    int i = t->n; /* after every entry at least as good: ties keep the earlier step first */
    while (i > 0 && tr_monitor_better(score, t->score[i - 1], mode_max)) {
        t->step[i] = t->step[i - 1];
        t->score[i] = t->score[i - 1];
        i--;
    }
    t->step[i] = step;
    t->score[i] = score;
    t->n++;
    return 1;
}

/* ------------------------------------------------------------------------------------------------ early stopping */

void tr_early_stop_init(tr_early_stop *e, int mode_max)
{
    memset(e, 0, sizeof *e);
    e->best = mode_max ? -INFINITY : INFINITY;
    e->best_step = -1;
}

int tr_early_stop_update(tr_early_stop *e, int mode_max, double min_delta, int64_t patience, int64_t step,
                         double value, const char *metric, char *why, size_t n)
{
    if (!isfinite(value)) {
        snprintf(why, n, "%s = %g is not finite (best %.6g at step %lld)", metric, value, e->best,
                 (long long)e->best_step);
        e->stopped = 1;
        return 1;
    }
    /* Lightning: monitor_op(current - min_delta, best), min_delta negated for mode min */
    const int improved = mode_max ? value - min_delta > e->best : value + min_delta < e->best;
    if (improved) {
        e->best = value;
        e->best_step = step;
        e->wait = 0;
        return 0;
    }
    e->wait++;
    if (e->wait < patience) return 0;
    snprintf(why, n, "%s did not improve by more than %g for %lld evaluations (best %.6g at step %lld)", metric,
             min_delta, (long long)e->wait, e->best, (long long)e->best_step);
    e->stopped = 1;
    return 1;
}
