/*
 * run_restore.c -- where a run starts from (tr_run_open's last steps, run_setup.c): a resume from a checkpoint -- the
 * state loaded, the data cursor continued by this run's geometry, the selection state reconciled with the config
 * (run_select.c), a finished run's extension said -- or a start from init.from's weights.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "best.h"
#include "io.h"
#include "run_internal.h"

/* After a resume: the cursor moves by this run's batch geometry from here on. The checkpoint's cursor followed
 * from its origin by the checkpoint's geometry (tr_ckpt_validate); when this run's differs (another batch size,
 * accumulate_steps, drop_last, epoch length or world size) or the checkpoint recorded none, the checkpoints this run
 * saves follow from the resumed cursor instead. */
static void continue_cursor(tr_run_state *t)
{
    tr_ckpt_progress *p = &t->p;
    const int64_t epoch_samples = run_ckpt_expect(t).epoch_samples;
    const int same = p->step_samples > 0 && p->step_samples == t->shape.step_batch &&
                     p->drop_last == (t->cfg->train.drop_last != 0) && p->epoch_samples == epoch_samples &&
                     (p->world_size > 1 ? p->world_size : 1) == t->dist.world_size;
    if (!same) {
        p->origin_step = p->step;
        p->origin_epoch = p->epoch;
        p->origin_pos = p->pos;
        p->origin_samples = p->samples_total;
    }
    p->epoch_samples = epoch_samples; /* this run's epoch and geometry, for the checkpoints it saves */
    p->step_samples = t->shape.step_batch;
    p->drop_last = t->cfg->train.drop_last;
}

/* A resume that continues a finished run (train.max_steps or train.epochs raised): say so, and warn when the
 * learning-rate schedule, planned for the old length, jumps (a cosine schedule that had decayed to min_lr starts
 * a new, longer decay from where the new plan stands). */
static void warn_extension(tr_run_state *t)
{
    tr_config *old = malloc(sizeof *old);
    tr_error ignore = {0};
    if (!old || tr_checkpoint_read_config(t->dir.resume_from, old, &ignore) != TR_OK) {
        free(old);
        return;
    }
    const int64_t spe = t->shape.steps_per_epoch;
    const int64_t old_total = old->train.max_steps > 0 ? old->train.max_steps : old->train.epochs * spe;
    if (t->p.step >= old_total && t->shape.total_steps > old_total) {
        const double lr_end = tr_schedule_lr(old, t->p.step - 1, old_total, spe);
        const double lr_next = tr_schedule_lr(t->cfg, t->p.step, t->shape.total_steps, spe);
        static const char *const names[] = {"constant", "step", "cosine", "multistep", "plateau"};
        if (fabs(lr_next - lr_end) > 1e-6 * fabs(lr_end) + 1e-300)
            tr_log_message(&t->sinks.log, "warning: extending a finished run from %lld to %lld steps restarts its "
                                    "schedule: the %s schedule was planned for %lld steps and ended at lr %.3g; "
                                    "step %lld now trains at lr %.3g. For a schedule planned for the whole run, "
                                    "start a new run (another run.name) with the full train.max_steps",
                           (long long)old_total, (long long)t->shape.total_steps, names[t->cfg->schedule.name],
                           (long long)old_total, lr_end, (long long)t->p.step + 1, lr_next);
        else
            tr_log_message(&t->sinks.log, "extending a finished run from %lld to %lld steps (lr %.3g continues)",
                           (long long)old_total, (long long)t->shape.total_steps, lr_next);
    }
    free(old);
}

/* Resume from t->dir.resume_from, or start from init.from weights, or from the seed's initialisation. */
int run_restore(tr_run_state *t, tr_error *err)
{
    if (t->dir.resume_from[0]) {
        const tr_ckpt_expect x = run_ckpt_expect(t);
        int phase = TRS_PHASE_OUTSIDE;
        trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
        int rc = tr_checkpoint_load(t->dir.resume_from, t->cfg, t->core.model, t->core.opt, t->core.ema, &x, &t->p,
                                    run_warn_to_log, &t->sinks.log, err);
        trs_memory_set_phase(phase, NULL);
        if (rc) return rc;
        const int cuda_index = t->core.device.cuda ? t->core.device.index : -1;
        if ((rc = tr_dist_restore_rng(&t->dist, t->dir.resume_from, t->p.world_size, cuda_index, run_warn_to_log, &t->sinks.log,
                                      err)))
            return rc;
        tr_ckpt_policy_resumed(&t->ckpt, t->p.step, t->p.elapsed);
        t->dir.resumed_at = t->p.step;
        t->dir.resumed_same_config = tr_checkpoint_same_config(t->dir.resume_from, t->cfg);
        continue_cursor(t);
        run_select_reconcile(t);
        if (run_complete(t)) return TR_OK; /* complete: tr_run says so and touches nothing */
        if (tr_dist_is_main(&t->dist) &&
            (rc = tr_checkpoint_set_aside_newer(t->dir.path, t->p.step, run_warn_to_log, &t->sinks.log, err)))
            return rc;
        run_emit(t, &(tr_event){.kind = TR_EV_RESUME, .step = t->p.step, .epoch = t->p.epoch, .position = t->p.pos,
                                .path = t->dir.resume_from});
        warn_extension(t);
        tr_error berr = {0}; /* best.json again, in case a set-aside checkpoint was the one it named */
        if (t->sel.has_topk && tr_dist_is_main(&t->dist) &&
            tr_best_write(t->dir.path, t->cfg->checkpoint.monitor, t->p.sel.topk_max, &t->p.sel.topk, &berr))
            tr_log_message(&t->sinks.log, "warning: %s", berr.msg);
        if (t->cfg->debug.perturb_resume_rng) { /* TEST ONLY: one extra draw breaks bit-identity */
            double ignored;
            trs_rng_normal(&ignored, 1);
        }
        return TR_OK;
    }
    char path[TR_PATH_MAX];
    const char *which = NULL;
    const int rc = tr_init_from_load(t->cfg, t->core.model, run_warn_to_log, &t->sinks.log, path, &which, err);
    if (rc || !path[0]) return rc;
    if (which) {
        char given[TR_PATH_MAX];
        tr_config_resolve_path(t->cfg, t->cfg->init.from, given);
        tr_log_message(&t->sinks.log, "init.from: %s is a run directory: its %s checkpoint %s", given, which, path);
    }
    tr_log_message(&t->sinks.log, "initialised from %s", path);
    return TR_OK;
}
