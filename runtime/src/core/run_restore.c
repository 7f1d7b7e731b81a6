/*
 * run_restore.c -- where a run starts from (tr_run_open's last steps, run_setup.c): the selection monitors and their
 * state (checkpoint.monitor, early_stopping.monitor, a plateau schedule's monitor), and a resume from a checkpoint
 * -- the state loaded, the data cursor continued by this run's geometry, the selection state reconciled with the
 * config, a finished run's extension said -- or a start from init.from's weights.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "best.h"
#include "io.h"
#include "run_internal.h"

/* A monitor (config key `key`) must name a figure the periodic evaluation produces for this task. */
static int check_monitor(const trainer *t, const char *key, const char *name, tr_monitor *m, tr_error *err)
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
    const tr_task task = t->metrics.task;
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
static void init_selection(const trainer *t, tr_select_state *s)
{
    const tr_config *cfg = t->cfg;
    memset(s, 0, sizeof *s);
    if (t->has_topk) {
        snprintf(s->topk_metric, sizeof s->topk_metric, "%s", cfg->checkpoint.monitor);
        s->topk_max = cfg->checkpoint.mode == TR_MODE_MAX;
    }
    if (t->has_es) {
        snprintf(s->es_metric, sizeof s->es_metric, "%s", cfg->early_stopping.monitor);
        s->es_max = cfg->early_stopping.mode == TR_MODE_MAX;
        tr_early_stop_init(&s->es, s->es_max);
    }
    if (t->has_plateau) tr_plateau_init(cfg, s);
}

/* checkpoint.monitor, early_stopping.monitor and a plateau schedule's monitor, checked against the task and the
 * evaluation; their state starts empty (a resume replaces it with the checkpoint's: reconcile_selection). */
int run_setup_selection(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    int rc = TR_OK;
    t->has_topk = cfg->checkpoint.monitor[0] != '\0';
    t->has_es = cfg->early_stopping.monitor[0] != '\0';
    t->has_plateau = cfg->schedule.name == TR_SCHED_PLATEAU;
    if (t->has_topk) rc = check_monitor(t, "checkpoint.monitor", cfg->checkpoint.monitor, &t->topk_mon, err);
    if (!rc && t->has_es) rc = check_monitor(t, "early_stopping.monitor", cfg->early_stopping.monitor, &t->es_mon, err);
    if (!rc && t->has_plateau) rc = check_monitor(t, "schedule.monitor", cfg->schedule.monitor, &t->plateau_mon, err);
    if (!rc) init_selection(t, &t->p.sel);
    return rc;
}

/* After a resume: keep the checkpoint's selection state where it was kept for the same metric and mode; a part
 * whose monitor or mode changed (or that the checkpoint lacks) starts afresh, with a warning. */
static void reconcile_selection(trainer *t)
{
    tr_select_state fresh, *s = &t->p.sel;
    init_selection(t, &fresh);
    /* checkpoint.monitor turned off: the best kept so far stay kept (frozen, still protected from pruning, and
     * best.json still names them); only a different monitor starts the best afresh */
    if (t->has_topk && (strcmp(s->topk_metric, fresh.topk_metric) || s->topk_max != fresh.topk_max)) {
        if (s->topk_metric[0]) {
            tr_log_message(&t->log, "warning: checkpoint.monitor is now %s (%s); the checkpoint kept the best by %s "
                                    "(%s): the best are chosen afresh, and the earlier ones rotate with keep_last",
                           fresh.topk_metric, fresh.topk_max ? "max" : "min", s->topk_metric,
                           s->topk_max ? "max" : "min");
            char path[TR_PATH_MAX + 32]; /* it names the other metric's best: gone until this one has a best */
            snprintf(path, sizeof path, "%s/best.json", t->run_dir);
            if (tr_dist_is_main(&t->dist)) tr_io_unlink(path);
        }
        memcpy(s->topk_metric, fresh.topk_metric, sizeof s->topk_metric);
        s->topk_max = fresh.topk_max;
        s->topk = fresh.topk;
    }
    if (strcmp(s->es_metric, fresh.es_metric) || s->es_max != fresh.es_max) {
        if (t->has_es && s->es_metric[0])
            tr_log_message(&t->log, "warning: early_stopping.monitor is now %s; the checkpoint's was %s: its patience "
                                    "counts afresh", fresh.es_metric, s->es_metric);
        memcpy(s->es_metric, fresh.es_metric, sizeof s->es_metric);
        s->es_max = fresh.es_max;
        s->es = fresh.es;
    }
    if (strcmp(s->plateau_metric, fresh.plateau_metric)) {
        if (t->has_plateau && s->plateau_metric[0])
            tr_log_message(&t->log, "warning: schedule.monitor is now %s; the checkpoint's plateau schedule watched "
                                    "%s: it starts afresh at optim.lr", fresh.plateau_metric, s->plateau_metric);
        memcpy(s->plateau_metric, fresh.plateau_metric, sizeof s->plateau_metric);
        s->plateau = fresh.plateau;
    }
    if (t->has_plateau && s->plateau.lr > t->cfg->optim.lr) { /* optim.lr lowered: the plateau starts at most there */
        tr_log_message(&t->log, "plateau: the checkpoint's lr %.6g is above optim.lr %.6g: it continues from %.6g",
                       s->plateau.lr, t->cfg->optim.lr, t->cfg->optim.lr);
        s->plateau.lr = t->cfg->optim.lr;
    }
}

/* After a resume: the cursor moves by this run's batch geometry from here on. The checkpoint's cursor followed
 * from its origin by the checkpoint's geometry (tr_ckpt_validate); when this run's differs (another batch size,
 * accumulate_steps, drop_last, epoch length or world size) or the checkpoint recorded none, the checkpoints this run
 * saves follow from the resumed cursor instead. */
static void continue_cursor(trainer *t)
{
    tr_ckpt_progress *p = &t->p;
    const int64_t epoch_samples = run_ckpt_expect(t).epoch_samples;
    const int same = p->step_samples > 0 && p->step_samples == t->step_batch &&
                     p->drop_last == (t->cfg->train.drop_last != 0) && p->epoch_samples == epoch_samples &&
                     (p->world_size > 1 ? p->world_size : 1) == t->dist.world_size;
    if (!same) {
        p->origin_step = p->step;
        p->origin_epoch = p->epoch;
        p->origin_pos = p->pos;
        p->origin_samples = p->samples_total;
    }
    p->epoch_samples = epoch_samples; /* this run's epoch and geometry, for the checkpoints it saves */
    p->step_samples = t->step_batch;
    p->drop_last = t->cfg->train.drop_last;
}

/* A resume that continues a finished run (train.max_steps or train.epochs raised): say so, and warn when the
 * learning-rate schedule, planned for the old length, jumps (a cosine schedule that had decayed to min_lr starts
 * a new, longer decay from where the new plan stands). */
static void warn_extension(trainer *t)
{
    tr_config *old = malloc(sizeof *old);
    tr_error ignore = {0};
    if (!old || tr_checkpoint_read_config(t->resume_from, old, &ignore) != TR_OK) {
        free(old);
        return;
    }
    const int64_t spe = t->steps_per_epoch;
    const int64_t old_total = old->train.max_steps > 0 ? old->train.max_steps : old->train.epochs * spe;
    if (t->p.step >= old_total && t->total_steps > old_total) {
        const double lr_end = tr_schedule_lr(old, t->p.step - 1, old_total, spe);
        const double lr_next = tr_schedule_lr(t->cfg, t->p.step, t->total_steps, spe);
        static const char *const names[] = {"constant", "step", "cosine", "multistep", "plateau"};
        if (fabs(lr_next - lr_end) > 1e-6 * fabs(lr_end) + 1e-300)
            tr_log_message(&t->log, "warning: extending a finished run from %lld to %lld steps restarts its "
                                    "schedule: the %s schedule was planned for %lld steps and ended at lr %.3g; "
                                    "step %lld now trains at lr %.3g. For a schedule planned for the whole run, "
                                    "start a new run (another run.name) with the full train.max_steps",
                           (long long)old_total, (long long)t->total_steps, names[t->cfg->schedule.name],
                           (long long)old_total, lr_end, (long long)t->p.step + 1, lr_next);
        else
            tr_log_message(&t->log, "extending a finished run from %lld to %lld steps (lr %.3g continues)",
                           (long long)old_total, (long long)t->total_steps, lr_next);
    }
    free(old);
}

/* Resume from t->resume_from, or start from init.from weights, or from the seed's initialisation. */
int run_restore(trainer *t, tr_error *err)
{
    if (t->resume_from[0]) {
        const tr_ckpt_expect x = run_ckpt_expect(t);
        int phase = TRS_PHASE_OUTSIDE;
        trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
        int rc = tr_checkpoint_load(t->resume_from, t->cfg, t->core.model, t->core.opt, t->core.ema, &x, &t->p,
                                    run_warn_to_log, &t->log, err);
        trs_memory_set_phase(phase, NULL);
        if (rc) return rc;
        const int cuda_index = t->core.device.cuda ? t->core.device.index : -1;
        if ((rc = tr_dist_restore_rng(&t->dist, t->resume_from, t->p.world_size, cuda_index, run_warn_to_log, &t->log,
                                      err)))
            return rc;
        t->last_ckpt_step = t->p.step;
        t->last_ckpt_elapsed = t->p.elapsed;
        t->resumed_at = t->p.step;
        t->resumed_same_config = tr_checkpoint_same_config(t->resume_from, t->cfg);
        continue_cursor(t);
        reconcile_selection(t);
        if (run_complete(t)) return TR_OK; /* complete: tr_run says so and touches nothing */
        if (tr_dist_is_main(&t->dist) &&
            (rc = tr_checkpoint_set_aside_newer(t->run_dir, t->p.step, run_warn_to_log, &t->log, err)))
            return rc;
        run_emit(t, &(tr_event){.kind = TR_EV_RESUME, .step = t->p.step, .epoch = t->p.epoch, .position = t->p.pos,
                                .path = t->resume_from});
        warn_extension(t);
        tr_error berr = {0}; /* best.json again, in case a set-aside checkpoint was the one it named */
        if (t->has_topk && tr_dist_is_main(&t->dist) &&
            tr_best_write(t->run_dir, t->cfg->checkpoint.monitor, t->p.sel.topk_max, &t->p.sel.topk, &berr))
            tr_log_message(&t->log, "warning: %s", berr.msg);
        if (t->cfg->debug.perturb_resume_rng) { /* TEST ONLY: one extra draw breaks bit-identity */
            double ignored;
            trs_rng_normal(&ignored, 1);
        }
        return TR_OK;
    }
    if (t->cfg->init.from[0]) {
        char given[TR_PATH_MAX], path[TR_PATH_MAX];
        tr_config_resolve_path(t->cfg, t->cfg->init.from, given);
        const char *which = NULL;
        int rc = tr_checkpoint_of_run(given, path, sizeof path, &which, err);
        if (rc) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return tr_error_set(err, rc, "init.from: %s", msg);
        }
        if (which) tr_log_message(&t->log, "init.from: %s is a run directory: its %s checkpoint %s", given, which, path);
        rc = tr_checkpoint_load_weights(path, t->core.model, t->cfg->init.strict, run_warn_to_log, &t->log, err);
        if (rc) return rc;
        tr_log_message(&t->log, "initialised from %s", path);
    }
    return TR_OK;
}
