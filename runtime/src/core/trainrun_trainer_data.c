/*
 * trainrun_trainer_data.c -- a trainer over the config's data (trainrun.h): the data files as data sources
 * (trainrun_trainer_open_data), the run's training batches from them in the run's order
 * (trainrun_trainer_next_batch, over loader.h as a run's), and the batches of an evaluation pass.
 */
#include "trainrun_trainer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "run.h"
#include "text.h"

/* The data set `ds` (the config's, taken over) as a data source whose batches have the model's input shape. */
static int data_of_files(trainrun_trainer *tr, tr_dataset *ds, const char *split, trainrun_data **out)
{
    trainrun_data *d = calloc(1, sizeof *d);
    if (!d) {
        tr_dataset_free(ds);
        return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "open_data: out of memory");
    }
    d->ds = *ds;
    memset(ds, 0, sizeof *ds);
    d->from_files = 1;
    d->ndim = d->ds.block ? 2 : tr->input.ndim + 1;
    int64_t elems = 1;
    for (int i = 0; i + 1 < d->ndim; i++) elems *= d->sample[i] = d->ds.block ? d->ds.block : tr->input.shape[i];
    *out = d;
    if (elems != d->ds.c * d->ds.h * d->ds.w)
        return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "open_data: the %s samples have %lld values but the "
                            "model's input %lld", split, (long long)(d->ds.c * d->ds.h * d->ds.w), (long long)elems);
    return TRAINRUN_OK;
}

int trainrun_trainer_open_data(trainrun_trainer *tr, trainrun_data **train, trainrun_data **val,
                               trainrun_data **test)
{
    trainrun_data **outs[3] = {train, val, test};
    for (int i = 0; i < 3; i++)
        if (outs[i]) *outs[i] = NULL;
    int rc = trainer_begin(tr, train || val || test ? tr : NULL, "open_data: train, val and test are all NULL", 1);
    if (rc) return rc;
    tr_dataset sets[3];
    memset(sets, 0, sizeof sets);
    if ((rc = tr_load_data(&tr->cfg, &sets[0], &sets[1], &sets[2], &tr->err))) {
        for (int i = 0; i < 3; i++) tr_dataset_free(&sets[i]);
        return rc; /* the message names the file or the key (tr_load_data) */
    }
    if (sets[0].block) { /* token data: the ids mean the training split's vocabulary, checked and kept beside the
                          * weights in the run directory (and again by open_dir when it comes later) */
        tr_vocab_free(&tr->dir.vocab);
        rc = tr_vocab_copy(&sets[0].vocab, &tr->dir.vocab, &tr->err);
        if (!rc && tr->dir.path[0] && tr_dist_is_main(&tr->dist))
            rc = tr_run_dir_vocab(&tr->cfg, tr->dir.path, tr->dir.resumed_from, &tr->dir.vocab, &tr->err);
        if (tr->dir.path[0]) rc = tr_dist_agree(&tr->dist, rc, &tr->err); /* rank 0's refusal is every rank's */
        if (rc) tr_vocab_free(&tr->dir.vocab);
    }
    static const char *const names[] = {"training", "validation", "test"};
    for (int i = 0; !rc && i < 3; i++)
        if (outs[i] && sets[i].n > 0) rc = data_of_files(tr, &sets[i], names[i], outs[i]); /* takes sets[i] over */
    for (int i = 0; i < 3; i++) tr_dataset_free(&sets[i]); /* the sets not taken over (zeroed ones are) */
    if (rc)
        for (int i = 0; i < 3; i++)
            if (outs[i]) {
                trainrun_data_close(*outs[i]);
                *outs[i] = NULL;
            }
    return rc;
}

/* ================================================================================================ batches */

/* The loader over `data`, opened at the first batch and again for another source. */
static int open_loader(trainrun_trainer *tr, trainrun_data *data)
{
    if (tr->batches.data) atomic_fetch_sub(&tr->batches.data->users, 1);
    tr_loader_close(&tr->batches.loader);
    tr->batches.data = NULL;
    const tr_config *cfg = &tr->cfg;
    const int64_t bs = cfg->train.batch_size * cfg->train.accumulate_steps;
    const int64_t epoch_n = tr_dist_shard_size(&tr->dist, data->ds.n);
    if (epoch_n < bs)
        return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "train.batch_size: %lld x accumulate_steps %lld is larger "
                            "than the %lld training samples%s", (long long)cfg->train.batch_size,
                            (long long)cfg->train.accumulate_steps, (long long)epoch_n,
                            tr->dist.world_size > 1 ? " of this rank" : "");
    tr_loader_opts o = {.seed = cfg->seed, .shuffle = cfg->data.shuffle, .prefetch = cfg->data.prefetch,
                        .step_batch = bs, .steps_per_epoch = cfg->train.drop_last ? epoch_n / bs
                                                                                   : (epoch_n + bs - 1) / bs};
    int rc = tr_loader_augment(cfg, &data->ds, data->from_files, &o.augment, &tr->err);
    if (!rc) rc = tr_loader_open(&tr->batches.loader, &data->ds, &tr->dist, &o, &tr->err);
    if (rc) {
        tr_loader_close(&tr->batches.loader);
        return rc == TR_E_CONFIG ? TRAINRUN_E_CONFIG : TRAINRUN_E_NOMEM;
    }
    atomic_fetch_add(&data->users, 1);
    tr->batches.data = data;
    return TRAINRUN_OK;
}

int trainrun_trainer_next_batch(trainrun_trainer *tr, trainrun_data *data, trainrun_batch *batch)
{
    int rc = trainer_begin(tr, data && batch ? tr : NULL, "next_batch: data or batch is NULL", 1);
    if (rc) return rc;
    if (data->fn) return tr_api_invalid(&tr->err, "next_batch: the data are a batch callback: call it yourself");
    if (data->ds.n == 0 || data->ds.unlabeled)
        return tr_api_invalid(&tr->err, "next_batch: the data have no targets to train on");
    if (tr->batches.data != data && (rc = open_loader(tr, data))) return rc;
    tr_loader *l = &tr->batches.loader;
    /* where the last batch left the cursor: unless the caller moved it (set_data_position, a load), the loader
     * goes on from there; else it starts again at the trainer's cursor */
    if (!l->started || tr->batches.epoch != tr->p.epoch || tr->batches.pos != tr->p.pos)
        if ((rc = tr_loader_start(l, tr->p.epoch, tr->p.pos, &tr->err))) return rc;
    const tr_loader_slot *s = tr_loader_take(l, &tr->err);
    if (!s) return tr->err.code ? tr->err.code : TRAINRUN_E_RUNTIME; /* a file that does not decode */
    tr->p.epoch = s->epoch;
    tr->p.pos = s->pos;
    tr->batches.epoch = s->epoch; /* the cursor handed out, for the next call's check */
    tr->batches.pos = s->pos;
    memset(batch, 0, sizeof *batch);
    batch->ndim = data->ndim;
    batch->shape[0] = s->n;
    for (int i = 1; i < data->ndim; i++) batch->shape[i] = data->sample[i - 1];
    batch->x = data->ds.block ? (const void *)s->ids : (const void *)s->x;
    batch->x_dtype = data->ds.block ? TRAINRUN_INT64 : TRAINRUN_FLOAT32;
    batch->y = data->ds.t_cols ? (const void *)s->t : (const void *)s->y;
    batch->y_dtype = data->ds.t_cols ? TRAINRUN_FLOAT32 : TRAINRUN_INT64;
    return TRAINRUN_OK;
}

/* ================================================================================================ evaluation */

int trainer_data_evaluable(trainrun_trainer *tr, const trainrun_data *data)
{
    if (data->fn)
        return tr_api_invalid(&tr->err, "evaluate: the data are a batch callback, which has no end: evaluate an "
                              "arrays source (trainrun_data_arrays) or the config's data (trainrun_trainer_open_data)");
    if (data->ds.n == 0 || data->ds.unlabeled)
        return tr_api_invalid(&tr->err, "evaluate: the data have no targets to evaluate against");
    if (data->ds.block && tr->batches.cap < tr->cfg.eval.batch_size) { /* one evaluation batch of windows */
        const size_t ebs = (size_t)tr->cfg.eval.batch_size, per = (size_t)data->ds.block;
        free(tr->batches.ids);
        free(tr->batches.y);
        free(tr->batches.starts);
        tr->batches.ids = malloc(ebs * per * sizeof *tr->batches.ids);
        tr->batches.y = malloc(ebs * per * sizeof *tr->batches.y);
        tr->batches.starts = malloc(ebs * sizeof *tr->batches.starts);
        tr->batches.cap = tr->batches.ids && tr->batches.y && tr->batches.starts ? (int64_t)ebs : 0;
        if (!tr->batches.cap) return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "evaluate: out of memory");
    }
    return TRAINRUN_OK;
}

/* Samples i .. i + n - 1 as the caller's batch view would give them (trainer_batch_in): rows in memory, image
 * files decoded, or token data's fixed windows i, i + 1, ... starting at multiples of the block -- as a run's. */
int trainer_eval_batch(void *ctx, int64_t i, int64_t n, trs_batch *b, tr_error *err)
{
    const trainer_eval_source *src = ctx;
    trainrun_trainer *tr = src->tr;
    const trainrun_data *d = src->data;
    const tr_dataset *ds = &d->ds;
    trainrun_batch v = {.ndim = d->ndim, .shape = {n, d->sample[0], d->sample[1], d->sample[2]}};
    if (ds->block) {
        for (int64_t j = 0; j < n; j++) tr->batches.starts[j] = (i + j) * ds->block;
        tr_window_cut(ds->tokens, tr->batches.starts, n, ds->block, tr->batches.ids, tr->batches.y);
        v.x = tr->batches.ids;
        v.x_dtype = TRAINRUN_INT64;
        v.y = tr->batches.y;
        v.y_dtype = TRAINRUN_INT64;
    } else {
        const int64_t tc = ds->t_cols;
        if (!(v.x = tr_dataset_rows(ds, i, n, &tr->batches.eval_buf, err))) return err->code;
        v.x_dtype = TRAINRUN_FLOAT32;
        v.y = tc ? (const void *)(ds->t + i * tc) : (const void *)(ds->y + i);
        v.y_dtype = tc ? TRAINRUN_FLOAT32 : TRAINRUN_INT64;
    }
    return trainer_batch_in(tr, &v, b); /* its errors into the trainer's own message, which err is */
}

void trainer_data_close(trainrun_trainer *tr)
{
    if (tr->batches.data) atomic_fetch_sub(&tr->batches.data->users, 1);
    tr_loader_close(&tr->batches.loader);
    tr_image_buf_free(&tr->batches.eval_buf);
    free(tr->batches.ids);
    free(tr->batches.y);
    free(tr->batches.starts);
    memset(&tr->batches, 0, sizeof tr->batches);
}
