/*
 * run_select.c -- model selection in a run: the monitors of checkpoint.monitor (save_top_k), early_stopping.monitor
 * and a plateau schedule, checked against the task and the evaluation at set-up, reconciled with a resumed
 * checkpoint's state, and offered each periodic evaluation (top-k, plateau, early stopping, in Lightning's order).
 * The monitors are tr_run_state.sel (run_select, run_internal.h); the state a checkpoint carries is p.sel; the
 * rules themselves are selection.c (top-k, early stopping) and schedule.c (plateau).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io.h"
#include "run_internal.h"

/* A monitor (config key `key`) must name a figure the periodic evaluation produces for this task. */
static int check_monitor(const tr_run_state *t, const char *key, const char *name, tr_monitor *m, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char why[256];
    if (tr_monitor_parse(name, m, why, sizeof why)) return tr_error_set(err, TR_E_CONFIG, "%s: %s", key, why);
    const int on_test = cfg->eval.split == TR_EVAL_TEST;
    if (m->test != on_test)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s names the %s split, but the periodic evaluation runs on the %s "
                            "split (eval.split: %s)", key, name, m->test ? "test" : "val", on_test ? "test" : "val",
                            on_test ? "test" : "val");
    if (!(run_eval_set(t)->n > 0 && (cfg->eval.every_steps > 0 || cfg->eval.every_epoch)))
        return tr_error_set(err, TR_E_CONFIG, "%s: %s needs a periodic evaluation (eval.every_steps > 0 or "
                            "eval.every_epoch: true) on a non-empty %s set", key, name, on_test ? "test" : "validation");
    if (m->ema && cfg->eval.weights == TR_WEIGHTS_LIVE)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s needs the EMA weights evaluated (eval.weights: ema or both)",
                            key, name);
    if (!m->ema && cfg->eval.weights == TR_WEIGHTS_EMA)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s: with eval.weights: ema only the EMA weights are evaluated "
                            "(monitor %s_ema_%s)", key, name, on_test ? "test" : "val", tr_monitor_metric_name(m->metric));
    const tr_task task = t->eval.metrics.task;
    int ok;
    switch (m->metric) {
    case TR_MON_LOSS: ok = 1; break;
    case TR_MON_ACCURACY: ok = task != TR_TASK_REGRESSION; break;
    case TR_MON_TOP_K_ACCURACY: ok = task == TR_TASK_CLASSIFY && cfg->eval.top_k > 0; break;
    case TR_MON_MICRO_F1:
    case TR_MON_MACRO_F1: ok = task == TR_TASK_MULTI_LABEL; break;
    default: ok = task == TR_TASK_REGRESSION; break;
    }
    static const char *const tasks[] = {"classification (cross_entropy)", "multi-label (bce_with_logits)",
                                        "regression (mse, smooth_l1)"};
    if (!ok)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s is not reported for %s%s", key, name, tasks[task],
                            m->metric == TR_MON_TOP_K_ACCURACY ? " without eval.top_k" : "");
    return TR_OK;
}

/* The selection state of a run that has evaluated nothing yet. */
static void init_selection(const tr_run_state *t, tr_select_state *s)
{
    const tr_config *cfg = t->cfg;
    memset(s, 0, sizeof *s);
    if (t->sel.has_topk) {
        snprintf(s->topk_metric, sizeof s->topk_metric, "%s", cfg->checkpoint.monitor);
        s->topk_max = cfg->checkpoint.mode == TR_MODE_MAX;
    }
    if (t->sel.has_es) {
        snprintf(s->es_metric, sizeof s->es_metric, "%s", cfg->early_stopping.monitor);
        s->es_max = cfg->early_stopping.mode == TR_MODE_MAX;
        tr_early_stop_init(&s->es, s->es_max);
    }
    if (t->sel.has_plateau) tr_plateau_init(cfg, s);
}

/* checkpoint.monitor, early_stopping.monitor and a plateau schedule's monitor, checked against the task and the
 * evaluation; their state starts empty (a resume replaces it with the checkpoint's: reconcile_selection). */
int run_setup_selection(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    int rc = TR_OK;
    t->sel.has_topk = cfg->checkpoint.monitor[0] != '\0';
    t->sel.has_es = cfg->early_stopping.monitor[0] != '\0';
    t->sel.has_plateau = cfg->schedule.name == TR_SCHED_PLATEAU;
    if (t->sel.has_topk) rc = check_monitor(t, "checkpoint.monitor", cfg->checkpoint.monitor, &t->sel.topk_mon, err);
    if (!rc && t->sel.has_es) rc = check_monitor(t, "early_stopping.monitor", cfg->early_stopping.monitor, &t->sel.es_mon, err);
    if (!rc && t->sel.has_plateau) rc = check_monitor(t, "schedule.monitor", cfg->schedule.monitor, &t->sel.plateau_mon, err);
    if (!rc) init_selection(t, &t->p.sel);
    return rc;
}

/* After a resume: keep the checkpoint's selection state where it was kept for the same metric and mode; a part
 * whose monitor or mode changed (or that the checkpoint lacks) starts afresh, with a warning. */
void run_select_reconcile(tr_run_state *t)
{
    tr_select_state fresh, *s = &t->p.sel;
    init_selection(t, &fresh);
    /* checkpoint.monitor turned off: the best kept so far stay kept (frozen, still protected from pruning, and
     * best.json still names them); only a different monitor starts the best afresh */
    if (t->sel.has_topk && (strcmp(s->topk_metric, fresh.topk_metric) || s->topk_max != fresh.topk_max)) {
        if (s->topk_metric[0]) {
            tr_log_message(&t->sinks.log, "warning: checkpoint.monitor is now %s (%s); the checkpoint kept the best by %s "
                                    "(%s): the best are chosen afresh, and the earlier ones rotate with keep_last",
                           fresh.topk_metric, fresh.topk_max ? "max" : "min", s->topk_metric,
                           s->topk_max ? "max" : "min");
            char path[TR_PATH_MAX + 32]; /* it names the other metric's best: gone until this one has a best */
            snprintf(path, sizeof path, "%s/best.json", t->dir.path);
            if (tr_dist_is_main(&t->dist)) tr_io_unlink(path);
        }
        memcpy(s->topk_metric, fresh.topk_metric, sizeof s->topk_metric);
        s->topk_max = fresh.topk_max;
        s->topk = fresh.topk;
    }
    if (strcmp(s->es_metric, fresh.es_metric) || s->es_max != fresh.es_max) {
        if (t->sel.has_es && s->es_metric[0])
            tr_log_message(&t->sinks.log, "warning: early_stopping.monitor is now %s; the checkpoint's was %s: its patience "
                                    "counts afresh", fresh.es_metric, s->es_metric);
        memcpy(s->es_metric, fresh.es_metric, sizeof s->es_metric);
        s->es_max = fresh.es_max;
        s->es = fresh.es;
    }
    if (strcmp(s->plateau_metric, fresh.plateau_metric)) {
        if (t->sel.has_plateau && s->plateau_metric[0])
            tr_log_message(&t->sinks.log, "warning: schedule.monitor is now %s; the checkpoint's plateau schedule watched "
                                    "%s: it starts afresh at optim.lr", fresh.plateau_metric, s->plateau_metric);
        memcpy(s->plateau_metric, fresh.plateau_metric, sizeof s->plateau_metric);
        s->plateau = fresh.plateau;
    }
    if (t->sel.has_plateau && s->plateau.lr > t->cfg->optim.lr) { /* optim.lr lowered: the plateau starts at most there */
        tr_log_message(&t->sinks.log, "plateau: the checkpoint's lr %.6g is above optim.lr %.6g: it continues from %.6g",
                       s->plateau.lr, t->cfg->optim.lr, t->cfg->optim.lr);
        s->plateau.lr = t->cfg->optim.lr;
    }
}

/* The monitored metric's value in the latest periodic evaluation (fig[split][weights]). */
static double monitored(const tr_run_state *t, const tr_monitor *m)
{
    const tr_eval_figures *f = &t->eval.fig[m->test][m->ema];
    switch (m->metric) {
    case TR_MON_LOSS: return f->loss;
    case TR_MON_ACCURACY: return f->accuracy;
    case TR_MON_TOP_K_ACCURACY: return f->top_k_accuracy;
    case TR_MON_MICRO_F1: return f->micro_f1;
    case TR_MON_MACRO_F1: return f->macro_f1;
    case TR_MON_MSE: return f->mse;
    case TR_MON_MAE: return f->mae;
    }
    return NAN;
}

/* After each periodic evaluation: offer it to the top-k (a checkpoint is then due), step the plateau schedule,
 * and let early stopping decide (Lightning's order: the checkpoint of this evaluation is saved before the stop). */
void run_select_after_eval(tr_run_state *t)
{
    const tr_config *cfg = t->cfg;
    tr_select_state *s = &t->p.sel;
    if (t->sel.has_topk && tr_topk_offer(&s->topk, cfg->checkpoint.save_top_k, s->topk_max, t->p.step,
                                     monitored(t, &t->sel.topk_mon), NULL))
        t->ckpt.best_due = 1;
    if (t->sel.has_plateau) {
        const double before = s->plateau.lr;
        if (tr_plateau_step(cfg, s, monitored(t, &t->sel.plateau_mon)))
            tr_log_message(&t->sinks.log, "plateau: %s has not improved for %lld evaluations: lr %.6g -> %.6g after step %lld",
                           cfg->schedule.monitor, (long long)cfg->schedule.patience + 1, before, s->plateau.lr,
                           (long long)t->p.step);
    }
    if (t->sel.has_es && !s->es.stopped) {
        char why[256];
        if (tr_early_stop_update(&s->es, s->es_max, cfg->early_stopping.min_delta, cfg->early_stopping.patience,
                                 t->p.step, monitored(t, &t->sel.es_mon), cfg->early_stopping.monitor, why, sizeof why)) {
            snprintf(t->sel.stop_reason, sizeof t->sel.stop_reason, "early stopping after step %lld: %s", (long long)t->p.step,
                     why);
            tr_log_message(&t->sinks.log, "%s", t->sel.stop_reason);
        }
    }
}
