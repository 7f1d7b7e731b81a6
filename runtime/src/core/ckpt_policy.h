/*
 * ckpt_policy.h -- the checkpoint policy, one sequence for the run (run_ckpt.c) and the embedding API's trainer
 * (trainrun_trainer.c) alike: when a save is due (the top-k's best, every checkpoint.every_steps, every
 * checkpoint.every_seconds of training time), the save itself (the caches go back, a snapshot on the caller's
 * thread, then the files written and old checkpoints pruned on the saver's thread with checkpoint.async, or here),
 * settling the save in flight, and the bookkeeping (the last save's step and training seconds, the count the
 * watchdog's warm-up waits for). The format and the directory protocol are io/checkpoint*.c; the background writer
 * io/ckpt_saver.c. Not thread-safe: one holder's thread calls it.
 */
#ifndef TR_CKPT_POLICY_H
#define TR_CKPT_POLICY_H

#include <stdint.h>

#include "checkpoint.h"
#include "ckpt_saver.h"
#include "config.h"
#include "error.h"
#include "model_core.h"
#include "monitor.h"

/** What the holder adds to the sequence; ctx is passed back to each. */
typedef struct tr_ckpt_hooks {
    void *ctx;
    /** The holder's clock, seconds (the loop's stall for a save). */
    double (*now)(void *ctx);
    /** After the caches went back, before the snapshot: set the progress's training seconds, gather every rank's
     *  generator state. Every process of the run calls it. NULL: nothing to do. Returns TR_OK or the error. */
    int (*prepare)(void *ctx, tr_error *err);
    /** A save's outcome (written or failed; its prune's error), on the holder's thread, in the order of the saves:
     *  the record and its event. NULL: the write's or the prune's error is returned as it is. */
    int (*saved)(void *ctx, const tr_ckpt_saved *r, tr_error *err);
} tr_ckpt_hooks;

/** What a save copies. */
typedef struct tr_ckpt_source {
    const tr_config *cfg;       /* the config the checkpoint carries (its fingerprint, config.yaml)          */
    const tr_core *core;        /* model, optimizer, the EMA (NULL without ema.enabled), the device          */
    tr_ckpt_progress *p;        /* step, epoch, data cursor, generators, selection; p->elapsed set by prepare */
    const tr_topk *best;        /* checkpoint.save_top_k's set (pruning keeps it; saving.best), NULL: none    */
    int write;                  /* this process writes (rank 0); the others only take part in prepare        */
    int same_step;              /* save even when a checkpoint of this step was taken (the trainer: its caller
                                   names the directory at each save)                                         */
} tr_ckpt_source;

/** The policy's state. Read its fields; change them only through these calls (best_due: the selection sets it). */
typedef struct tr_ckpt_policy {
    int64_t every_steps;        /* checkpoint.every_steps (0: never by steps)                                */
    double every_seconds;       /* checkpoint.every_seconds of training time (0: never by time)              */
    int64_t keep_last;          /* checkpoint.keep_last                                                      */
    int async;                  /* write and prune on the saver's thread                                     */
    tr_ckpt_hooks hooks;
    double last_elapsed;        /* training seconds at the last checkpoint (or the resumed one)              */
    int64_t last_step;          /* its step, -1 before the first                                             */
    int64_t done;               /* checkpoints this process took                                             */
    int best_due;               /* the last evaluation entered the top-k: save now                           */
    tr_ckpt_saver saver;        /* the checkpoint being written in the background                            */
    struct {                    /* ... and what its record needs besides the saver's outcome                 */
        double stall, elapsed;  /* seconds the caller paused for its snapshot; training seconds then         */
        int64_t epoch;
        tr_topk best;           /* checkpoint.save_top_k's set when it was taken                             */
    } saving;
} tr_ckpt_policy;

/** Start a policy from cfg->checkpoint: no checkpoint yet (last_step -1). async: checkpoint.async for a run; the
 *  trainer's saves are complete when its call returns (0). */
void tr_ckpt_policy_init(tr_ckpt_policy *cp, const tr_config *cfg, int async, tr_ckpt_hooks hooks);

/** A checkpoint of `step` at `elapsed` training seconds was loaded: the intervals count from it, and no save of
 *  that step is due. */
void tr_ckpt_policy_resumed(tr_ckpt_policy *cp, int64_t step, double elapsed);

/** checkpoint.every_seconds of training time have passed since the last checkpoint at `elapsed` seconds. */
int tr_ckpt_policy_interval_due(const tr_ckpt_policy *cp, double elapsed);

/** Why a checkpoint is due after optimizer step `step` ("best", "steps", "interval"), or NULL (also when one of
 *  this step exists). interval: the interval test (tr_ckpt_policy_interval_due, or the ranks' agreement on it). */
const char *tr_ckpt_policy_due(const tr_ckpt_policy *cp, int64_t step, int interval);

/** A background save is in flight (started and its outcome not yet taken). */
int tr_ckpt_policy_busy(const tr_ckpt_policy *cp);

/** The background save's outcome, through hooks.saved: with `wait` after waiting for it; without, only once it has
 *  finished. TR_OK when none was in flight; otherwise what hooks.saved returns (the write's error: TR_E_RUNTIME,
 *  naming the file). */
int tr_ckpt_policy_settle(tr_ckpt_policy *cp, int wait, tr_error *err);

/** Save a checkpoint of src->p->step into dir/checkpoints for `reason` (a static string: "best", "steps",
 *  "interval", "end", "signal", "watchdog", "trainer") unless one of this step was taken (src->same_step: even then): the save in flight is
 *  settled first, the memory caches go back (tr_core_phase_change), hooks.prepare runs, and the writer snapshots the
 *  state; the files are then written and pruned to keep_last (keeping src->best) here or, with async, on the
 *  saver's thread. With `wait` the save is complete (or failed) on return. Returns TR_OK, the error of prepare, of
 *  the snapshot (TR_E_NOMEM, TR_E_RUNTIME) or what hooks.saved returns for this save or the previous one. The
 *  intervals count from this step once it was written (with async: handed to the saver), even when pruning fails. */
int tr_ckpt_policy_save(tr_ckpt_policy *cp, const char *dir, const tr_ckpt_source *src, const char *reason, int wait,
                        tr_error *err);

/** Wait for the save in flight, if any, and drop its outcome (a run that is torn down after its error). */
void tr_ckpt_policy_close(tr_ckpt_policy *cp);

#endif
