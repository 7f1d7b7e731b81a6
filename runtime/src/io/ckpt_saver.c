/*
 * ckpt_saver.c -- a checkpoint written on a thread of its own (ckpt_saver.h).
 */
#include "ckpt_saver.h"

#include <string.h>

#include "io.h"
#include "sys.h" /* tr_now */

static void *save_thread(void *arg)
{
    tr_ckpt_saver *sv = arg;
    tr_ckpt_saved *r = &sv->result;
    const double t0 = tr_now();
    tr_io_save_begin(); /* the fault hook counts this thread's I/O calls of the save and its prune */
    r->rc = tr_checkpoint_write(sv->run_dir, sv->snap, r->path, &r->bytes, &r->err);
    const double t1 = tr_now(); /* the checkpoint is complete and its rename durable: the save's time ends here */
    if (!r->rc)
        r->prune_rc = tr_checkpoint_prune(sv->run_dir, sv->keep_last, r->step, sv->has_best ? &sv->best : NULL, &r->err);
    tr_io_save_end();
    tr_checkpoint_snapshot_free(sv->snap); /* the copy's mapping is kept for the next snapshot (checkpoint.h) */
    sv->snap = NULL;
    r->write_seconds = t1 - t0;
    r->prune_seconds = tr_now() - t1;
    atomic_store_explicit(&sv->done, 1, memory_order_release);
    return NULL;
}

int tr_ckpt_saver_start(tr_ckpt_saver *sv, const char *run_dir, int64_t keep_last, const tr_topk *best,
                        tr_ckpt_snapshot *snap, const char *reason, tr_error *err)
{
    if (sv->running) {
        tr_checkpoint_snapshot_free(snap);
        return tr_error_set(err, TR_E_RUNTIME, "checkpoint step %lld: the previous save is still in flight",
                            (long long)tr_checkpoint_snapshot_step(snap));
    }
    if (snprintf(sv->run_dir, sizeof sv->run_dir, "%s", run_dir) >= (int)sizeof sv->run_dir) {
        tr_checkpoint_snapshot_free(snap);
        return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", run_dir);
    }
    memset(&sv->result, 0, sizeof sv->result);
    sv->result.step = tr_checkpoint_snapshot_step(snap);
    sv->result.reason = reason;
    sv->keep_last = keep_last;
    sv->has_best = best != NULL;
    if (best) sv->best = *best;
    sv->snap = snap;
    atomic_store_explicit(&sv->done, 0, memory_order_relaxed);
    const int e = pthread_create(&sv->thread, NULL, save_thread, sv);
    if (e != 0) {
        tr_checkpoint_snapshot_free(snap);
        sv->snap = NULL;
        return tr_error_set(err, TR_E_RUNTIME, "checkpoint step %lld: cannot start the writer thread: %s",
                            (long long)sv->result.step, strerror(e));
    }
    sv->running = 1;
    return TR_OK;
}

int tr_ckpt_saver_take(tr_ckpt_saver *sv, int wait, tr_ckpt_saved *out)
{
    if (!sv->running) return 0;
    if (!wait && !atomic_load_explicit(&sv->done, memory_order_acquire)) return 0;
    pthread_join(sv->thread, NULL);
    sv->running = 0;
    *out = sv->result;
    return 1;
}

int tr_ckpt_saver_busy(const tr_ckpt_saver *sv) { return sv->running; }
