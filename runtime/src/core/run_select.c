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
    if (!rc) tr_select_init(cfg, &t->p.sel);
    return rc;
}

/* After a resume: keep the checkpoint's selection state where it was kept for the same metric and mode; a part
 * whose monitor or mode changed (or that the checkpoint lacks) starts afresh, with a warning. */
void run_select_reconcile(tr_run_state *t)
{
    tr_select_state *s = &t->p.sel;
    const tr_select_state old = *s;
    const unsigned changed = tr_select_reconcile(t->cfg, s);
    /* checkpoint.monitor turned off: the best kept so far stay kept (frozen, still protected from pruning, and
     * best.json still names them); only a different monitor starts the best afresh */
    if ((changed & TR_SEL_TOPK) && old.topk_metric[0]) {
        tr_log_message(&t->sinks.log, "warning: checkpoint.monitor is now %s (%s); the checkpoint kept the best by %s "
                                "(%s): the best are chosen afresh, and the earlier ones rotate with keep_last",
                       s->topk_metric, s->topk_max ? "max" : "min", old.topk_metric, old.topk_max ? "max" : "min");
        char path[TR_PATH_MAX + 32]; /* it names the other metric's best: gone until this one has a best */
        snprintf(path, sizeof path, "%s/best.json", t->dir.path);
        if (tr_dist_is_main(&t->dist)) tr_io_unlink(path);
    }
    if ((changed & TR_SEL_EARLY_STOP) && t->sel.has_es && old.es_metric[0])
        tr_log_message(&t->sinks.log, "warning: early_stopping.monitor is now %s; the checkpoint's was %s: its patience "
                                "counts afresh", s->es_metric, old.es_metric);
    if (strcmp(old.plateau_metric, s->plateau_metric) && t->sel.has_plateau && old.plateau_metric[0])
        tr_log_message(&t->sinks.log, "warning: schedule.monitor is now %s; the checkpoint's plateau schedule watched "
                                "%s: it starts afresh at optim.lr", s->plateau_metric, old.plateau_metric);
    else if ((changed & TR_SEL_PLATEAU) && t->sel.has_plateau && s->plateau.lr < old.plateau.lr)
        tr_log_message(&t->sinks.log, "plateau: the checkpoint's lr %.6g is above optim.lr %.6g: it continues from %.6g",
                       old.plateau.lr, t->cfg->optim.lr, t->cfg->optim.lr);
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
    const double value[3] = {t->sel.has_topk ? monitored(t, &t->sel.topk_mon) : NAN,
                             t->sel.has_es ? monitored(t, &t->sel.es_mon) : NAN,
                             t->sel.has_plateau ? monitored(t, &t->sel.plateau_mon) : NAN};
    tr_select_outcome o;
    tr_select_offer(cfg, &t->p.sel, TR_SEL_TOPK | TR_SEL_EARLY_STOP | TR_SEL_PLATEAU, t->p.step, value, &o);
    if (o.best) t->ckpt.best_due = 1;
    if (o.lr_reduced)
        tr_log_message(&t->sinks.log, "plateau: %s has not improved for %lld evaluations: lr %.6g -> %.6g after step %lld",
                       cfg->schedule.monitor, (long long)cfg->schedule.patience + 1, o.lr_before, t->p.sel.plateau.lr,
                       (long long)t->p.step);
    if (o.stop) {
        snprintf(t->sel.stop_reason, sizeof t->sel.stop_reason, "early stopping after step %lld: %s", (long long)t->p.step,
                 o.why);
        tr_log_message(&t->sinks.log, "%s", t->sel.stop_reason);
    }
}
