/*
 * run_ckpt.c -- the run's side of the checkpoint policy (ckpt_policy.h holds the sequence): its hooks (the run's
 * clock; the training seconds and every rank's generator state before the snapshot; a save's record, event and
 * best.json), and the due test with the checkpoint interval the ranks agreed on (run_requests).
 */
#include "best.h"
#include "run_internal.h"

static double ckpt_now(void *ctx) { return run_now(ctx); }

static int ckpt_prepare(void *ctx, tr_error *err)
{
    tr_run_state *t = ctx;
    t->p.elapsed = run_elapsed(t);
    return tr_dist_gather_rng(&t->dist, &t->p, t->core.device.cuda ? t->core.device.index : -1, err);
}

/* Report a finished save: its record and event, or its error. A save's outcome is taken on the run's thread, so
 * the sinks see it in order; the record's step and epoch are the checkpoint's. */
static int ckpt_saved(void *ctx, const tr_ckpt_saved *r, tr_error *err)
{
    tr_run_state *t = ctx;
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

void run_ckpt_init(tr_run_state *t)
{
    tr_ckpt_policy_init(&t->ckpt, t->cfg, t->cfg->checkpoint.async,
                        (tr_ckpt_hooks){.ctx = t, .now = ckpt_now, .prepare = ckpt_prepare, .saved = ckpt_saved});
}

int run_ckpt_interval_due(const tr_run_state *t) { return tr_ckpt_policy_interval_due(&t->ckpt, run_elapsed(t)); }

const char *run_ckpt_due(const tr_run_state *t)
{
    return tr_ckpt_policy_due(&t->ckpt, t->p.step, (run_requests(t) & TR_DIST_CHECKPOINT) != 0);
}

int run_ckpt_save(tr_run_state *t, const char *reason, int wait, tr_error *err)
{
    const tr_ckpt_source src = {.cfg = t->cfg, .core = &t->core, .p = &t->p, .best = &t->p.sel.topk,
                                .write = tr_dist_is_main(&t->dist)};
    return tr_ckpt_policy_save(&t->ckpt, t->dir.path, &src, reason, wait, err);
}
