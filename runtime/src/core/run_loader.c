/*
 * run_loader.c -- a run's training batches: the epoch's order (a pure function of seed and epoch, sharded per
 * rank), the loader that gathers the next batch into one of two slots (on the prefetch thread when data.prefetch),
 * and the caller's batch callback (the embedding API).
 */
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "text.h"

trs_batch run_batch_view(const tr_run_state *t, int64_t n)
{
    trs_batch b = {.x = t->loader.xbuf, .y = t->loader.ybuf, .target = t->loader.tbuf, .ndim = t->shape.batch_ndim};
    b.shape[0] = n;
    for (int d = 1; d < t->shape.batch_ndim; d++) b.shape[d] = t->shape.sample_shape[d - 1];
    if (t->shape.block) { /* token data: ids [n, T] in, next-token targets [n, T] */
        b.x = NULL;
        b.x_ids = t->loader.idsbuf;
        b.y_ndim = 2;
        b.y_shape[0] = n;
        b.y_shape[1] = t->shape.block;
    }
    return b;
}

static int pos_ends_epoch(const tr_run_state *t, int64_t pos)
{
    return pos >= t->shape.steps_per_epoch * t->shape.step_batch || pos >= t->loader.order_n;
}

int run_epoch_done(const tr_run_state *t)
{
    return !t->data.next_batch && pos_ends_epoch(t, t->p.pos); /* a callback's batches have no epochs */
}

/* The order of the loader's epoch: a pure function of (seed, epoch), so a resume can rebuild it; in a
 * multi-process run, this rank's shard of it (dist.h), order_n long. */
static void make_order(tr_run_state *t)
{
    if (t->cfg->data.shuffle && !t->shape.block) tr_permutation(t->cfg->seed, (uint64_t)t->loader.epoch, t->train.n, t->loader.perm);
    else for (int64_t i = 0; i < t->train.n; i++) t->loader.perm[i] = i;
    tr_dist_shard(&t->dist, t->loader.perm, t->train.n, t->loader.perm + t->train.n);
}

/* The loader: gather the batch after the loader's cursor into `slot` and advance the cursor, starting a new epoch
 * (new order) when one is used up. On the prefetch thread when data.prefetch, else on the loop's thread; either
 * way batches come out in the same order with the same rows. */
static int load_batch(void *ctx, int slot)
{
    tr_run_state *t = ctx;
    batch_slot *b = &t->loader.slots[slot];
    if (pos_ends_epoch(t, t->loader.pos)) {
        /* data.cache: disk: what the epoch left out (drop_last, other ranks' shards) decoded now, so that the cache
         * file is written at the end of the first epoch */
        if (t->train.images) tr_image_disk_complete(t->train.images, &t->loader.buf);
        t->loader.epoch++;
        t->loader.pos = 0;
        make_order(t);
    }
    const int64_t bs = t->shape.step_batch;
    b->n = t->loader.pos + bs <= t->loader.order_n ? bs : t->loader.order_n - t->loader.pos;
    if (t->shape.block) {
        /* token data: window g = epoch x windows per epoch + index in the epoch (this rank's share of them) */
        for (int64_t i = 0; i < b->n; i++)
            t->loader.starts[i] = tr_window_start(t->cfg->seed, (uint64_t)(t->loader.epoch * t->train.n +
                                                                    t->loader.perm[t->loader.pos + i]),
                                           t->train.n_tokens, t->shape.block);
        tr_window_cut(t->train.tokens, t->loader.starts, b->n, t->shape.block, b->ids, b->y);
    } else if (t->train.images) { /* decoded here: on the prefetch thread when data.prefetch */
        const int rc = tr_image_gather(&t->train, t->loader.perm + t->loader.pos, b->n, &t->loader.augment, t->cfg->seed,
                                       (uint64_t)t->loader.epoch, b->x, b->y, &t->loader.buf, &t->loader.err);
        if (rc) return rc;
    } else {
        if (tr_augment_enabled(&t->loader.augment))
            tr_dataset_gather_augmented(&t->train, t->loader.perm + t->loader.pos, b->n, &t->loader.augment, t->cfg->seed,
                                        (uint64_t)t->loader.epoch, b->x, b->y);
        else
            tr_dataset_gather(&t->train, t->loader.perm + t->loader.pos, b->n, b->x, b->y);
        tr_dataset_gather_targets(&t->train, t->loader.perm + t->loader.pos, b->n, b->t);
    }
    t->loader.pos += b->n;
    b->epoch = t->loader.epoch;
    b->pos = t->loader.pos;
    return 0;
}

/* Position the loader at the run's cursor (fresh or restored) and start its thread when data.prefetch. */
int run_start_loader(tr_run_state *t, tr_error *err)
{
    if (t->data.next_batch) return TR_OK; /* the caller's callback is the loader */
    t->loader.epoch = t->p.epoch;
    t->loader.pos = t->p.pos;
    make_order(t);
    return t->cfg->data.prefetch ? tr_prefetch_start(&t->loader.pf, load_batch, t, err) : TR_OK;
}

/* Point the batch view at the next training batch and move the run's cursor past it; -1 when the loader failed
 * (an image file that does not decode: t->loader.err says which). */
static int64_t take_batch(tr_run_state *t)
{
    int slot = 0, rc = 0;
    if (t->cfg->data.prefetch) slot = tr_prefetch_take(&t->loader.pf, &rc);
    else rc = load_batch(t, slot);
    if (slot < 0 || rc) return -1;
    const batch_slot *b = &t->loader.slots[slot];
    t->loader.xbuf = b->x;
    t->loader.ybuf = b->y;
    t->loader.tbuf = b->t;
    t->loader.idsbuf = b->ids;
    t->p.epoch = b->epoch;
    t->p.pos = b->pos;
    return b->n;
}

/* The next training batch: from the caller's callback, or gathered from the data set in this epoch's order. */
int run_next_batch(tr_run_state *t, trs_batch *b, tr_error *err)
{
    if (t->data.next_batch) {
        *b = (trs_batch){0};
        const int rc = t->data.next_batch(t->data.ctx, t->p.step, t->shape.step_batch, b, err);
        if (rc) return rc;
        t->p.pos += b->shape[0];
        return TR_OK;
    }
    const int64_t n = take_batch(t);
    if (n < 0)
        return tr_error_set(err, t->loader.err.code ? t->loader.err.code : TR_E_RUNTIME, "training data: %s",
                            t->loader.err.msg);
    *b = run_batch_view(t, n);
    return TR_OK;
}
