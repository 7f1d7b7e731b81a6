/*
 * ckpt_policy.c -- the checkpoint policy (ckpt_policy.h): when a save is due, the one save sequence of the run and
 * the trainer, the save in flight and the bookkeeping.
 */
#include "ckpt_policy.h"

#include <string.h>

#include "io.h"
#include "trainrun_shim.h"

void tr_ckpt_policy_init(tr_ckpt_policy *cp, const tr_config *cfg, int async, tr_ckpt_hooks hooks)
{
    memset(cp, 0, sizeof *cp);
    cp->every_steps = cfg->checkpoint.every_steps;
    cp->every_seconds = cfg->checkpoint.every_seconds;
    cp->keep_last = cfg->checkpoint.keep_last;
    cp->async = async;
    cp->hooks = hooks;
    cp->last_step = -1;
}

void tr_ckpt_policy_resumed(tr_ckpt_policy *cp, int64_t step, double elapsed)
{
    cp->last_step = step;
    cp->last_elapsed = elapsed;
}

int tr_ckpt_policy_interval_due(const tr_ckpt_policy *cp, double elapsed)
{
    return cp->every_seconds > 0 && elapsed - cp->last_elapsed >= cp->every_seconds;
}

const char *tr_ckpt_policy_due(const tr_ckpt_policy *cp, int64_t step, int interval)
{
    if (step <= cp->last_step) return NULL;
    if (cp->best_due) return "best"; /* the last evaluation entered checkpoint.save_top_k's set */
    if (cp->every_steps > 0 && step % cp->every_steps == 0) return "steps";
    if (interval) return "interval";
    return NULL;
}

int tr_ckpt_policy_busy(const tr_ckpt_policy *cp) { return tr_ckpt_saver_busy(&cp->saver); }

static int saved(tr_ckpt_policy *cp, const tr_ckpt_saved *r, tr_error *err)
{
    if (cp->hooks.saved) return cp->hooks.saved(cp->hooks.ctx, r, err);
    const int rc = r->rc ? r->rc : r->prune_rc;
    if (rc && err) *err = r->err;
    return rc;
}

int tr_ckpt_policy_settle(tr_ckpt_policy *cp, int wait, tr_error *err)
{
    tr_ckpt_saved r;
    if (!tr_ckpt_saver_take(&cp->saver, wait, &r)) return TR_OK;
    return saved(cp, &r, err);
}

static double now(const tr_ckpt_policy *cp) { return cp->hooks.now ? cp->hooks.now(cp->hooks.ctx) : 0.0; }

/* A checkpoint of this step was taken (written, or handed to the saver): the next interval counts from here. */
static void taken(tr_ckpt_policy *cp, const tr_ckpt_progress *p)
{
    cp->last_elapsed = p->elapsed;
    cp->last_step = p->step;
    cp->done++;
    cp->best_due = 0;
}

int tr_ckpt_policy_save(tr_ckpt_policy *cp, const char *dir, const tr_ckpt_source *src, const char *reason, int wait,
                        tr_error *err)
{
    tr_ckpt_progress *p = src->p;
    int rc = tr_ckpt_policy_settle(cp, 1, err); /* at most one save in flight */
    if (rc || (cp->last_step == p->step && !src->same_step)) return rc;
    tr_core_phase_change(src->core); /* the caches go back before the state is copied out */
    const double t0 = now(cp);
    if (cp->hooks.prepare) rc = cp->hooks.prepare(cp->hooks.ctx, err);
    int phase = TRS_PHASE_OUTSIDE;
    trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
    if (!rc && src->write) {
        tr_ckpt_snapshot *snap = NULL;
        rc = tr_checkpoint_snapshot(src->cfg, src->core->model, src->core->opt, src->core->ema, p, reason, &snap, err);
        cp->saving.elapsed = p->elapsed;
        cp->saving.epoch = p->epoch;
        if (src->best) cp->saving.best = *src->best; /* the set as of this checkpoint: pruning and best.json */
        else memset(&cp->saving.best, 0, sizeof cp->saving.best);
        const tr_topk *best = cp->saving.best.n > 0 ? &cp->saving.best : NULL;
        if (!rc && cp->async) {
            cp->saving.stall = now(cp) - t0;
            rc = tr_ckpt_saver_start(&cp->saver, dir, cp->keep_last, best, snap, reason, err);
        } else if (!rc) { /* written here: the caller waits for all of it, and its seconds are the stall */
            tr_ckpt_saved r = {.step = p->step, .reason = reason};
            tr_io_save_begin(); /* the fault hook counts the I/O calls of the save and its prune */
            r.rc = tr_checkpoint_write(dir, snap, r.path, &r.bytes, &r.err);
            if (!r.rc) r.prune_rc = tr_checkpoint_prune(dir, cp->keep_last, p->step, best, &r.err);
            tr_io_save_end();
            tr_checkpoint_snapshot_free(snap);
            cp->saving.stall = now(cp) - t0;
            trs_memory_set_phase(phase, NULL);
            if (!r.rc) taken(cp, p);
            return saved(cp, &r, err);
        }
    }
    trs_memory_set_phase(phase, NULL);
    if (rc) return rc;
    taken(cp, p);
    return wait ? tr_ckpt_policy_settle(cp, 1, err) : TR_OK;
}

void tr_ckpt_policy_close(tr_ckpt_policy *cp)
{
    tr_ckpt_saved ignore;
    tr_ckpt_saver_take(&cp->saver, 1, &ignore);
}
