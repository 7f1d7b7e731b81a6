/*
 * loader.h -- the training batches of a data set, in the order a run takes them: the epoch's order (a pure function
 * of the seed and the epoch, sharded per rank), a double buffer of batches gathered from it (on a prefetching
 * thread when asked), the cursor (epoch, position) a checkpoint carries. Runs (run_loader.c) and the embedding
 * API's trainers (trainrun_trainer_next_batch) both read their batches through it, so a trainer's loop over the
 * config's data sees the run's batches row for row.
 */
#ifndef TR_LOADER_H
#define TR_LOADER_H

#include <stdint.h>

#include "config.h"
#include "data.h"
#include "dist.h"
#include "error.h"
#include "image_folder.h"
#include "prefetch.h"

/** One batch gathered by the loader; its buffers are allocated once, in tr_loader_open. */
typedef struct tr_loader_slot {
    float *x;                   /* [step_batch, ...] features (not for token data)                  */
    int64_t *y;                 /* [step_batch] labels, or [step_batch, block] next-token targets   */
    float *t;                   /* [step_batch, t_cols] float targets (multi-hot / regression), or NULL */
    int64_t *ids;               /* token data: [step_batch, block] input ids, else NULL             */
    int64_t n, epoch, pos;      /* rows in it; the epoch it belongs to and the cursor after it      */
} tr_loader_slot;

/** How a loader batches its data set (set once, at tr_loader_open). */
typedef struct tr_loader_opts {
    uint64_t seed;              /* the config's seed: the epoch's order and the augmentation's draws   */
    int shuffle;                /* data.shuffle (token data draw their windows instead)                */
    int prefetch;               /* data.prefetch: gather the next batch on a thread                    */
    int64_t step_batch;         /* samples per optimizer step: batch_size x accumulate_steps            */
    int64_t steps_per_epoch;    /* optimizer steps an epoch (train.drop_last rounds down)              */
    tr_augment augment;         /* data.augment (tr_loader_augment)                                    */
} tr_loader_opts;

typedef struct tr_loader {
    tr_dataset *ds;             /* the training set (image folders' disk cache is completed through it) */
    const tr_dist *dist;        /* this rank's shard of each epoch's order                             */
    tr_loader_opts o;
    tr_loader_slot slots[2];    /* the double buffer                                                    */
    int64_t *perm;              /* the epoch's order (this rank's shard), then scratch for sharding it  */
    int64_t *starts;            /* token data: a batch's window starts                                  */
    int64_t order_n;            /* samples in an epoch's order: ds->n, or the rank's shard             */
    int64_t epoch, pos;         /* the loader's cursor: one batch ahead of what was taken               */
    int started;                /* tr_loader_start positioned it (and started the thread)               */
    tr_prefetch pf;             /* the worker thread when o.prefetch                                    */
    tr_image_buf buf;           /* image folders: the loader's decoding memory (its thread's)            */
    tr_error err;               /* why gathering failed (a file that does not decode)                    */
} tr_loader;

/**
 * data.augment for the training batches of `d`: only for image samples [C, H, W] with H, W > 1, the padding
 * smaller than the image; the padding value a black pixel after data.mean / data.std when `from_files` and the
 * data are IDX files or image folders, else 0 (npy files and a caller's arrays are in their own units).
 * TR_OK, or TR_E_CONFIG naming the data.augment key.
 */
int tr_loader_augment(const tr_config *cfg, const tr_dataset *d, int from_files, tr_augment *a, tr_error *err);

/**
 * Set `l` up over `ds` (n >= 1 samples of c x h x w floats, or token windows) for `dist`'s rank: the order, the
 * two slots of o->step_batch samples. Nothing is gathered yet. TR_OK, or TR_E_RUNTIME (no memory).
 */
int tr_loader_open(tr_loader *l, tr_dataset *ds, const tr_dist *dist, const tr_loader_opts *o, tr_error *err);

/** Samples in an epoch of this rank's order. */
static inline int64_t tr_loader_epoch_samples(const tr_loader *l) { return l->order_n; }

/** Cursor position `pos` stands at the end of an epoch (steps_per_epoch batches, or the whole order, taken). */
int tr_loader_epoch_ends(const tr_loader *l, int64_t pos);

/**
 * Position the loader at cursor (epoch, pos) -- a fresh start is (0, 0), a resume its checkpoint's -- and start its
 * thread with o.prefetch. A loader already started is stopped first, so a trainer can move it.
 * TR_OK or TR_E_RUNTIME (no thread).
 */
int tr_loader_start(tr_loader *l, int64_t epoch, int64_t pos, tr_error *err);

/**
 * The next batch (the one after the cursor; a new epoch and its order once one is used up), owned by the loader
 * until the next take. NULL when gathering failed: *err says why, led by "training data: ".
 */
const tr_loader_slot *tr_loader_take(tr_loader *l, tr_error *err);

/** Stop the thread and free the buffers (the data set stays the caller's); a zeroed loader is a no-op. */
void tr_loader_close(tr_loader *l);

#endif
