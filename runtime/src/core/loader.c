/*
 * loader.c -- the training batches of a data set (loader.h): the epoch's order, the batches gathered in it into a
 * double buffer (on the prefetch thread with data.prefetch), and data.augment's set-up.
 */
#include "loader.h"

#include <stdlib.h>
#include <string.h>

#include "text.h"

int tr_loader_augment(const tr_config *cfg, const tr_dataset *d, int from_files, tr_augment *a, tr_error *err)
{
    memset(a, 0, sizeof *a);
    a->crop_padding = cfg->data.augment.crop_padding;
    a->hflip = cfg->data.augment.hflip;
    if (!tr_augment_enabled(a)) return TR_OK;
    const char *key = a->crop_padding > 0 ? "data.augment.crop_padding" : "data.augment.hflip";
    if (d->tokens || d->h < 2 || d->w < 2)
        return tr_error_set(err, TR_E_CONFIG, "%s: augmentation needs image samples [C, H, W]; this data set's "
                            "samples are %s", key, d->tokens ? "token windows" : "flat feature vectors");
    if (a->crop_padding >= d->h || a->crop_padding >= d->w)
        return tr_error_set(err, TR_E_CONFIG, "data.augment.crop_padding: %lld pixels is not smaller than the "
                            "%lld x %lld images", (long long)a->crop_padding, (long long)d->h, (long long)d->w);
    a->n_fill = 1;
    if ((cfg->data.format == TR_DATA_IDX || cfg->data.format == TR_DATA_IMAGE_FOLDER) && from_files) {
        const int nm = cfg->data.n_mean, ns = cfg->data.n_std, cap = (int)(sizeof a->fill / sizeof a->fill[0]);
        a->n_fill = nm > ns ? nm : ns;
        if (a->n_fill > cap) a->n_fill = cap; /* data.mean / data.std hold at most TR_MAX_CHANNELS = 4 */
        for (int k = 0; k < a->n_fill; k++) /* as tr_dataset_normalize computes it, for a pixel of 0 */
            a->fill[k] = (0.0f - (float)cfg->data.mean[nm > 1 ? k : 0]) / (float)cfg->data.std[ns > 1 ? k : 0];
    }
    return TR_OK;
}

int tr_loader_open(tr_loader *l, tr_dataset *ds, const tr_dist *dist, const tr_loader_opts *o, tr_error *err)
{
    l->ds = ds;
    l->dist = dist;
    l->o = *o;
    l->order_n = tr_dist_shard_size(dist, ds->n);
    const size_t bs = (size_t)o->step_batch, per = ds->block ? (size_t)ds->block : 1; /* targets per sample */
    const size_t feat = (size_t)(ds->c * ds->h * ds->w);
    for (int i = 0; i < 2; i++) {
        tr_loader_slot *s = &l->slots[i];
        s->x = malloc(bs * feat * sizeof *s->x);
        s->y = malloc(bs * per * sizeof *s->y);
        if (ds->block) s->ids = malloc(bs * per * sizeof *s->ids);
        if (ds->t_cols > 0) s->t = malloc(bs * (size_t)ds->t_cols * sizeof *s->t);
        if (!s->x || !s->y || (ds->block && !s->ids) || (ds->t_cols > 0 && !s->t))
            return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
    }
    l->perm = malloc(2 * (size_t)(ds->n > 0 ? ds->n : 1) * sizeof *l->perm); /* the order, and scratch to shard it */
    if (ds->block) l->starts = malloc(bs * sizeof *l->starts);
    if (!l->perm || (ds->block && !l->starts))
        return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
    return TR_OK;
}

int tr_loader_epoch_ends(const tr_loader *l, int64_t pos)
{
    return pos >= l->o.steps_per_epoch * l->o.step_batch || pos >= l->order_n;
}

/* The order of the loader's epoch: a pure function of (seed, epoch), so a resume can rebuild it; in a
 * multi-process run, this rank's shard of it (dist.h), order_n long. */
static void make_order(tr_loader *l)
{
    const int64_t n = l->ds->n;
    if (l->o.shuffle && !l->ds->block) tr_permutation(l->o.seed, (uint64_t)l->epoch, n, l->perm);
    else for (int64_t i = 0; i < n; i++) l->perm[i] = i;
    tr_dist_shard(l->dist, l->perm, n, l->perm + n);
}

/* Gather the batch after the loader's cursor into `slot` and advance the cursor, starting a new epoch (new order)
 * when one is used up. On the prefetch thread with o.prefetch, else on the caller's; either way batches come out
 * in the same order with the same rows. */
static int load_batch(void *ctx, int slot)
{
    tr_loader *l = ctx;
    tr_dataset *ds = l->ds;
    tr_loader_slot *b = &l->slots[slot];
    if (tr_loader_epoch_ends(l, l->pos)) {
        /* data.cache: disk: what the epoch left out (drop_last, other ranks' shards) decoded now, so that the cache
         * file is written at the end of the first epoch */
        if (ds->images) tr_image_disk_complete(ds->images, &l->buf);
        l->epoch++;
        l->pos = 0;
        make_order(l);
    }
    const int64_t bs = l->o.step_batch, *idx = l->perm + l->pos;
    const uint64_t seed = l->o.seed, epoch = (uint64_t)l->epoch;
    b->n = l->pos + bs <= l->order_n ? bs : l->order_n - l->pos;
    if (ds->block) {
        /* token data: window g = epoch x windows per epoch + index in the epoch (this rank's share of them) */
        for (int64_t i = 0; i < b->n; i++)
            l->starts[i] = tr_window_start(seed, (uint64_t)(l->epoch * ds->n + idx[i]), ds->n_tokens, ds->block);
        tr_window_cut(ds->tokens, l->starts, b->n, ds->block, b->ids, b->y);
    } else if (ds->images) { /* decoded here: on the prefetch thread with o.prefetch */
        const int rc = tr_image_gather(ds, idx, b->n, &l->o.augment, seed, epoch, b->x, b->y, &l->buf, &l->err);
        if (rc) return rc;
    } else {
        if (tr_augment_enabled(&l->o.augment))
            tr_dataset_gather_augmented(ds, idx, b->n, &l->o.augment, seed, epoch, b->x, b->y);
        else
            tr_dataset_gather(ds, idx, b->n, b->x, b->y);
        tr_dataset_gather_targets(ds, idx, b->n, b->t);
    }
    l->pos += b->n;
    b->epoch = l->epoch;
    b->pos = l->pos;
    return 0;
}

int tr_loader_start(tr_loader *l, int64_t epoch, int64_t pos, tr_error *err)
{
    tr_prefetch_stop(&l->pf);
    l->epoch = epoch;
    l->pos = pos;
    l->started = 1;
    make_order(l);
    return l->o.prefetch ? tr_prefetch_start(&l->pf, load_batch, l, err) : TR_OK;
}

const tr_loader_slot *tr_loader_take(tr_loader *l, tr_error *err)
{
    int slot = 0, rc = 0;
    if (l->o.prefetch) slot = tr_prefetch_take(&l->pf, &rc);
    else rc = load_batch(l, slot);
    if (slot >= 0 && !rc) return &l->slots[slot];
    tr_error_set(err, l->err.code ? l->err.code : TR_E_RUNTIME, "training data: %s", l->err.msg);
    return NULL;
}

void tr_loader_close(tr_loader *l)
{
    tr_prefetch_stop(&l->pf); /* first: the thread reads the data set and writes the slots */
    for (int i = 0; i < 2; i++) {
        free(l->slots[i].x);
        free(l->slots[i].y);
        free(l->slots[i].t);
        free(l->slots[i].ids);
    }
    tr_image_buf_free(&l->buf);
    free(l->perm);
    free(l->starts);
    memset(l, 0, sizeof *l);
}
