/*
 * ckpt_saver.h -- checkpoints written off the training loop's path: one background thread per save writes a
 * snapshot (checkpoint.h: tr_checkpoint_snapshot) as a checkpoint directory and prunes old ones, while the loop
 * trains on.
 *
 * At most one save is in flight: tr_ckpt_saver_start refuses while one runs, and the run waits for the previous
 * one (tr_ckpt_saver_take with wait) before it takes the next snapshot. The crash-safety of tr_checkpoint_write is
 * unchanged: a kill at any moment leaves the complete checkpoints and at most one .tmp-* directory, which the next
 * save or start removes. The I/O calls of the save and its prune are counted by the fault hook (io.h) on the
 * writing thread. A failed write leaves every complete checkpoint as it was; its error (naming the file) is what
 * tr_ckpt_saver_take returns.
 */
#ifndef TR_CKPT_SAVER_H
#define TR_CKPT_SAVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "checkpoint.h"
#include "config.h"
#include "error.h"

/** The outcome of a save, handed to the run's thread by tr_ckpt_saver_take. */
typedef struct tr_ckpt_saved {
    int rc;                   /**< TR_OK, or the write's error (err)                                  */
    int prune_rc;             /**< TR_OK, or the prune's error (err) after a complete checkpoint     */
    tr_error err;
    int64_t step;             /**< the checkpoint's step                                              */
    const char *reason;       /**< as given to tr_ckpt_saver_start (a static string)                 */
    char path[TR_PATH_MAX];   /**< the checkpoint directory                                           */
    int64_t bytes;            /**< bytes of its files                                                 */
    double write_seconds;     /**< the save's time on the thread: files, hashes, fsyncs, rename       */
    double prune_seconds;     /**< the thread's time after it: the prune, freeing the snapshot        */
} tr_ckpt_saved;

typedef struct tr_ckpt_saver {
    pthread_t thread;
    int running;              /**< a thread was started and not yet joined (the run's thread only)    */
    atomic_int done;          /**< the thread has finished writing (set by it, release)               */
    char run_dir[TR_PATH_MAX];
    int64_t keep_last;
    tr_topk best;             /**< checkpoint.save_top_k's set the prune keeps (has_best)             */
    int has_best;
    tr_ckpt_snapshot *snap;   /**< owned by the thread while it runs; freed by it                     */
    tr_ckpt_saved result;
} tr_ckpt_saver;

/**
 * Start writing `snap` (ownership passes to the saver, which frees it once written) as checkpoint run_dir/
 * checkpoints/step-N, then prune to keep_last, keeping the checkpoints of `best` (copied; NULL: none) as
 * tr_checkpoint_prune does. TR_E_RUNTIME when a save is still in flight or no thread can be created (then snap is
 * freed and nothing was written).
 */
int tr_ckpt_saver_start(tr_ckpt_saver *sv, const char *run_dir, int64_t keep_last, const tr_topk *best,
                        tr_ckpt_snapshot *snap, const char *reason, tr_error *err);

/**
 * The outcome of the save in flight: with `wait`, after waiting for it; without, only when it has finished.
 * Returns 1 and fills *out when a save's outcome was taken (its thread joined), 0 when there is none to take
 * (none started since the last take, or -- without wait -- still writing).
 */
int tr_ckpt_saver_take(tr_ckpt_saver *sv, int wait, tr_ckpt_saved *out);

/** Whether a save is in flight (started and not yet taken). */
int tr_ckpt_saver_busy(const tr_ckpt_saver *sv);

#endif
