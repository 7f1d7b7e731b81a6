/*
 * selection.c -- model selection on a monitored metric (selection.h): the top-k set, early stopping.
 */
#include "selection.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule.h"

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

/* ------------------------------------------------------------------------------------------------ the three together */

unsigned tr_select_monitors(const tr_config *cfg)
{
    return (cfg->checkpoint.monitor[0] ? TR_SEL_TOPK : 0u) | (cfg->early_stopping.monitor[0] ? TR_SEL_EARLY_STOP : 0u) |
           (cfg->schedule.name == TR_SCHED_PLATEAU ? TR_SEL_PLATEAU : 0u);
}

void tr_select_init(const tr_config *cfg, tr_select_state *s)
{
    const unsigned m = tr_select_monitors(cfg);
    memset(s, 0, sizeof *s);
    if (m & TR_SEL_TOPK) {
        snprintf(s->topk_metric, sizeof s->topk_metric, "%s", cfg->checkpoint.monitor);
        s->topk_max = cfg->checkpoint.mode == TR_MODE_MAX;
    }
    if (m & TR_SEL_EARLY_STOP) {
        snprintf(s->es_metric, sizeof s->es_metric, "%s", cfg->early_stopping.monitor);
        s->es_max = cfg->early_stopping.mode == TR_MODE_MAX;
        tr_early_stop_init(&s->es, s->es_max);
    }
    if (m & TR_SEL_PLATEAU) tr_plateau_init(cfg, s);
}

void tr_select_offer(const tr_config *cfg, tr_select_state *s, unsigned which, int64_t step, const double value[3],
                     tr_select_outcome *o)
{
    memset(o, 0, sizeof *o);
    o->evicted = -1;
    which &= tr_select_monitors(cfg);
    if ((which & TR_SEL_TOPK) &&
        tr_topk_offer(&s->topk, cfg->checkpoint.save_top_k, s->topk_max, step, value[0], &o->evicted))
        o->best = 1;
    if (which & TR_SEL_PLATEAU) {
        o->lr_before = s->plateau.lr;
        o->lr_reduced = tr_plateau_step(cfg, s, value[2]);
    }
    if ((which & TR_SEL_EARLY_STOP) && !s->es.stopped)
        o->stop = tr_early_stop_update(&s->es, s->es_max, cfg->early_stopping.min_delta, cfg->early_stopping.patience,
                                       step, value[1], cfg->early_stopping.monitor, o->why, sizeof o->why);
}

unsigned tr_select_reconcile(const tr_config *cfg, tr_select_state *s)
{
    const unsigned m = tr_select_monitors(cfg);
    unsigned changed = 0;
    tr_select_state fresh;
    tr_select_init(cfg, &fresh);
    if ((m & TR_SEL_TOPK) && (strcmp(s->topk_metric, fresh.topk_metric) || s->topk_max != fresh.topk_max)) {
        memcpy(s->topk_metric, fresh.topk_metric, sizeof s->topk_metric);
        s->topk_max = fresh.topk_max;
        s->topk = fresh.topk;
        changed |= TR_SEL_TOPK;
    }
    if (strcmp(s->es_metric, fresh.es_metric) || s->es_max != fresh.es_max) {
        memcpy(s->es_metric, fresh.es_metric, sizeof s->es_metric);
        s->es_max = fresh.es_max;
        s->es = fresh.es;
        changed |= TR_SEL_EARLY_STOP;
    }
    if (strcmp(s->plateau_metric, fresh.plateau_metric)) {
        memcpy(s->plateau_metric, fresh.plateau_metric, sizeof s->plateau_metric);
        s->plateau = fresh.plateau;
        changed |= TR_SEL_PLATEAU;
    }
    if ((m & TR_SEL_PLATEAU) && s->plateau.lr > cfg->optim.lr) {
        s->plateau.lr = cfg->optim.lr;
        changed |= TR_SEL_PLATEAU;
    }
    return changed;
}
