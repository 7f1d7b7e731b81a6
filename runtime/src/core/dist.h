/*
 * dist.h -- data-parallel runs: one process per rank, joined through the shim's c10d process group (Gloo).
 *
 * A run is distributed when WORLD_SIZE > 1 in the environment (torchrun, a scheduler, or `trainrun --nproc N`).
 * Semantics, after torch.nn.parallel.DistributedDataParallel with torch.utils.data.DistributedSampler:
 *  - every rank builds the same model from the same seed; rank 0's parameters and buffers are broadcast at start;
 *  - the epoch's order (tr_permutation(seed, epoch), the same on every rank) is padded by wrapping around to a
 *    multiple of WORLD_SIZE, and rank r takes positions r, r + W, r + 2W, ...: every rank sees ceil(n / W) samples
 *    per epoch, and the first (padded length - n) samples of the order are seen twice (DistributedSampler with
 *    drop_last=False). train.batch_size is per rank: the global batch is batch_size x WORLD_SIZE, and step k of W
 *    ranks sees exactly the samples step k of one process with batch_size x W sees;
 *  - gradients are averaged over ranks after backward (the shim, in buckets of dist.bucket_cap_mb);
 *  - each step's loss (weighted by samples), sample and correct counts are all-reduced in one collective of
 *    doubles (counts are exact there below 2^53), together with the stop requests (signal, memory watchdog,
 *    checkpoint interval), so every rank stops and saves at the same step;
 *  - rank 0 alone writes the run directory, logs, metrics, traces, summary and checkpoints; every rank's generator
 *    state is gathered into the checkpoint and each rank gets its own back on resume;
 *  - BatchNorm keeps per-rank batch statistics and running buffers (as DDP without SyncBatchNorm); the buffers
 *    saved are rank 0's;
 *  - a rank whose collective fails (a peer died, or dist.timeout_seconds passed) stops with TR_E_PEER.
 */
#ifndef TR_DIST_H
#define TR_DIST_H

#include <stdint.h>

#include "checkpoint.h"
#include "config.h"
#include "error.h"
#include "log.h"
#include "trainrun_shim.h"

/** Bits of the per-step agreement: any rank's request holds for all. */
enum { TR_DIST_STOP = 1, TR_DIST_WATCHDOG = 2, TR_DIST_CHECKPOINT = 4 };

typedef struct tr_dist {
    trs_dist *pg;            /**< NULL: one process                                      */
    int rank, world_size;
    double scalar_seconds;   /**< seconds in the per-step scalar all-reduce              */
    int agreed;              /**< the TR_DIST_* requests every rank agreed on at the last step
                                  (set by tr_dist_reduce_step)                            */
} tr_dist;

/**
 * Join the process group named by the environment when WORLD_SIZE > 1 (see trs_dist_create_from_env); otherwise
 * a one-process tr_dist (rank 0 of 1) without communication. The whole rendezvous takes at most
 * dist.timeout_seconds; should_stop(ctx) (may be NULL) is asked while it waits. Errors: TR_E_CONFIG (malformed or
 * missing RANK, MASTER_ADDR, ...), TR_E_PEER (the rendezvous failed within dist.timeout_seconds: nobody served the
 * store, or not every rank joined), TR_E_SIGNAL (should_stop asked to stop: a signal during the rendezvous).
 */
int tr_dist_open(tr_dist *d, const tr_config *cfg, int (*should_stop)(void *ctx), void *ctx, tr_error *err);

/** Leave the group (safe on a zeroed or one-process tr_dist). */
void tr_dist_close(tr_dist *d);

/** 1 on rank 0 (and in one-process runs): the rank that writes files. */
int tr_dist_is_main(const tr_dist *d);

/**
 * Collective: every rank passes its set-up status `rc`; returns the first non-zero status of any rank (lowest rank
 * first). A rank that succeeded but learns of another's failure gets "rank R failed during set-up" in err.
 */
int tr_dist_agree(tr_dist *d, int rc, tr_error *err);

/** Collective: rank 0's run directory and checkpoint to resume from (TR_PATH_MAX strings) on every rank. */
int tr_dist_share_paths(tr_dist *d, char *run_dir, char *resume_from, tr_error *err);

/** Samples per epoch on this rank: ceil(n / W) (n in one-process runs). */
int64_t tr_dist_shard_size(const tr_dist *d, int64_t n);

/**
 * Replace order[0..n) (the epoch's order) by this rank's shard: order'[i] = order[(i W + r) mod n] for
 * i < ceil(n / W) (DistributedSampler's padding and interleaving); scratch holds n entries. Returns the shard's
 * length (n in one-process runs, with order unchanged).
 */
int64_t tr_dist_shard(const tr_dist *d, int64_t *order, int64_t n, int64_t *scratch);

/** Collective: rank 0's parameters and buffers into every rank's model. */
int tr_dist_sync_model(tr_dist *d, trs_model *model, tr_error *err);

/**
 * Collective, once per step: r's loss becomes the mean over all ranks' samples, r's samples, correct and targets
 * counts the sums; d->agreed becomes the OR over ranks of each rank's `requests` (TR_DIST_* bits). One process: r is
 * unchanged and d->agreed = requests. Errors: TR_E_PEER (the all-reduce failed: a rank died or hung),
 * TR_E_RUNTIME (any other failure of the collective; tr_dist_code).
 */
int tr_dist_reduce_step(tr_dist *d, trs_step_result *r, int requests, tr_error *err);

/**
 * Collective: gather every rank's default CPU generator state into p->rank_rng and, when the ranks train on CUDA
 * devices (cuda_index >= 0: this rank's device), each rank's own device's generator state into p->rank_cuda_rng
 * (malloc'd, freed by tr_dist_free_rng); sets p->world_size. One process: both stay NULL.
 */
int tr_dist_gather_rng(tr_dist *d, tr_ckpt_progress *p, int cuda_index, tr_error *err);
void tr_dist_free_rng(tr_ckpt_progress *p);

/**
 * After tr_checkpoint_load: give this rank its own saved generator state (rank 0's was restored by the load) and,
 * on a CUDA device (cuda_index >= 0), its own device's generator ("cuda_generator.rank<r>"; warned about when the
 * checkpoint has none). A checkpoint from another world size: warn through `warn`, every rank keeps rank 0's state.
 */
int tr_dist_restore_rng(tr_dist *d, const char *ckpt_dir, int saved_world_size, int cuda_index, tr_ckpt_warn_fn warn,
                        void *ctx, tr_error *err);

/** Open the run's log: rank 0 as tr_log_open; other ranks write nowhere (records and console go to /dev/null). */
int tr_dist_log_open(const tr_dist *d, tr_log *log, const tr_config *cfg, const char *run_dir, int64_t total_steps,
                     tr_error *err);

/** Map a failed shim status to the runtime's code: TRS_E_DIST -> TR_E_PEER, anything else -> TR_E_RUNTIME. */
int tr_dist_code(trs_status st);

#endif
