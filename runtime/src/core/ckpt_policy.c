/*
 * ckpt_policy.c -- the checkpoint policy of a run, in one place: when a save is due (the top-k's best, every
 * checkpoint.every_steps, every checkpoint.every_seconds of training time as the ranks agreed), the save itself
 * (a snapshot on the loop's thread; written, then old checkpoints pruned, on the saver's thread with
 * checkpoint.async or here), settling the save in flight, and its bookkeeping (the last save's step and time, the
 * count the watchdog's warm-up waits for, best.json). Its state is tr_run_state.ckpt (run_ckpt, run_internal.h);
 * the format and the directory protocol are io/checkpoint*.c.
 */
#include <string.h>

#include "best.h"
#include "io.h"
#include "run_internal.h"

/* checkpoint.every_seconds of training time have passed since the last checkpoint (this process's view; the
 * ranks agree on it: run_requests). */
int run_ckpt_interval_due(const tr_run_state *t)
{
    const double every = t->cfg->checkpoint.every_seconds;
    return every > 0 && run_elapsed(t) - t->ckpt.last_elapsed >= every;
}

/* A background save (checkpoint.async) is in flight: its record (or error) once it has finished. */
int run_ckpt_saved_due(const tr_run_state *t) { return tr_ckpt_saver_busy(&t->ckpt.saver); }

/* Why a checkpoint is due after this step ("best", "steps", "interval"), or NULL. */
const char *run_ckpt_due(const tr_run_state *t)
{
    const tr_config *cfg = t->cfg;
    if (t->ckpt.best_due) return "best"; /* the last evaluation entered checkpoint.save_top_k's set */
    if (cfg->checkpoint.every_steps > 0 && t->p.step % cfg->checkpoint.every_steps == 0) return "steps";
    if (run_requests(t) & TR_DIST_CHECKPOINT) return "interval";
    return NULL;
}

/* Report a finished save: its record and event, or its error. A save's outcome is taken on the run's thread, so
 * the sinks see it in order; the record's step and epoch are the checkpoint's. */
static int checkpoint_saved(tr_run_state *t, const tr_ckpt_saved *r, tr_error *err)
{
    if (r->rc) {
        if (err) *err = r->err;
        return r->rc;
    }
    const double seconds = t->ckpt.saving.stall + r->write_seconds; /* from the snapshot to the renamed directory */
    run_emit(t, &(tr_event){.kind = TR_EV_CHECKPOINT, .step = r->step, .epoch = t->ckpt.saving.epoch, .reason = r->reason,
                            .path = r->path, .bytes = r->bytes, .seconds = seconds,
                            .stall_seconds = t->ckpt.saving.stall, .elapsed = t->ckpt.saving.elapsed});
    if (r->prune_rc) {
        if (err) *err = r->err;
        return r->prune_rc; /* the checkpoint is complete; a prune that failed still ends the run (exit 1) */
    }
    if (t->sel.has_topk) /* the run directory names its best checkpoint (the set as of this checkpoint) */
        return tr_best_write(t->dir.path, t->cfg->checkpoint.monitor, t->p.sel.topk_max, &t->ckpt.saving.best, err);
    return TR_OK;
}

/* The background save's outcome: with `wait`, after waiting for it (a due save waits for the previous one; the
 * end of the run, a stop and an error wait for it); without, only once it has finished. */
int run_ckpt_settle(tr_run_state *t, int wait, tr_error *err)
{
    tr_ckpt_saved r;
    if (!tr_ckpt_saver_take(&t->ckpt.saver, wait, &r)) return TR_OK;
    return checkpoint_saved(t, &r, err);
}

/* A checkpoint of this step was taken (written, or handed to the saver): the next interval counts from here. */
static void taken(tr_run_state *t)
{
    t->ckpt.last_elapsed = t->p.elapsed;
    t->ckpt.last_step = t->p.step;
    t->ckpt.done++;
    t->ckpt.best_due = 0;
}

/* Save a checkpoint now (unless one of this very step exists): the loop pays for a snapshot of the state; the
 * files are written and old checkpoints pruned on the saver's thread (checkpoint.async), or here. Every rank takes
 * part (its generator state is gathered); rank 0 writes. With `wait`, the save is complete (or failed) on return. */
int run_ckpt_save(tr_run_state *t, const char *reason, int wait, tr_error *err)
{
    int rc = run_ckpt_settle(t, 1, err); /* at most one save in flight */
    if (rc || t->ckpt.last_step == t->p.step) return rc;
    run_phase_change(t);
    const double t0 = run_now(t);
    t->p.elapsed = run_elapsed(t);
    rc = tr_dist_gather_rng(&t->dist, &t->p, t->core.device.cuda ? t->core.device.index : -1, err);
    int phase = TRS_PHASE_OUTSIDE;
    trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
    if (!rc && tr_dist_is_main(&t->dist)) {
        tr_ckpt_snapshot *snap = NULL;
        rc = tr_checkpoint_snapshot(t->cfg, t->core.model, t->core.opt, t->core.ema, &t->p, reason, &snap, err);
        t->ckpt.saving.elapsed = t->p.elapsed;
        t->ckpt.saving.epoch = t->p.epoch;
        t->ckpt.saving.best = t->p.sel.topk; /* checkpoint.save_top_k's set as of this checkpoint: pruning and best.json */
        const tr_topk *best = t->ckpt.saving.best.n > 0 ? &t->ckpt.saving.best : NULL;
        if (!rc && t->cfg->checkpoint.async) {
            t->ckpt.saving.stall = run_now(t) - t0;
            rc = tr_ckpt_saver_start(&t->ckpt.saver, t->dir.path, t->cfg->checkpoint.keep_last, best, snap, reason, err);
        } else if (!rc) { /* written here: the loop waits for all of it, and seconds = stall */
            tr_ckpt_saved r = {.step = t->p.step, .reason = reason};
            tr_io_save_begin(); /* the fault hook counts the I/O calls of the save and its prune */
            r.rc = tr_checkpoint_write(t->dir.path, snap, r.path, &r.bytes, &r.err);
            if (!r.rc) r.prune_rc = tr_checkpoint_prune(t->dir.path, t->cfg->checkpoint.keep_last, t->p.step, best, &r.err);
            tr_io_save_end();
            tr_checkpoint_snapshot_free(snap);
            t->ckpt.saving.stall = run_now(t) - t0;
            trs_memory_set_phase(phase, NULL);
            if (!r.rc) taken(t);
            return checkpoint_saved(t, &r, err);
        }
    }
    trs_memory_set_phase(phase, NULL);
    if (rc) return rc;
    taken(t);
    return wait ? run_ckpt_settle(t, 1, err) : TR_OK;
}
