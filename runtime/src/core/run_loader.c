/*
 * run_loader.c -- a run's training batches as its step reads them: the loader's (loader.h: the epoch's order, the
 * prefetching double buffer), positioned at the run's cursor, or the caller's batch callback (the embedding API).
 */
#include "run_internal.h"

trs_batch run_batch_view(const tr_run_state *t, const tr_loader_slot *s, int64_t n)
{
    trs_batch b = {.ndim = t->shape.batch_ndim};
    if (s) b.x = s->x, b.y = s->y, b.target = s->t;
    b.shape[0] = n;
    for (int d = 1; d < t->shape.batch_ndim; d++) b.shape[d] = t->shape.sample_shape[d - 1];
    if (t->shape.block) { /* token data: ids [n, T] in, next-token targets [n, T] */
        b.x = NULL;
        b.x_ids = s ? s->ids : NULL;
        b.y_ndim = 2;
        b.y_shape[0] = n;
        b.y_shape[1] = t->shape.block;
    }
    return b;
}

int run_epoch_done(const tr_run_state *t)
{
    return !t->data.next_batch && tr_loader_epoch_ends(&t->loader, t->p.pos); /* a callback's have no epochs */
}

/* Position the loader at the run's cursor (fresh or restored) and start its thread when data.prefetch. */
int run_start_loader(tr_run_state *t, tr_error *err)
{
    if (t->data.next_batch) return TR_OK; /* the caller's callback is the loader */
    return tr_loader_start(&t->loader, t->p.epoch, t->p.pos, err);
}

/* The next training batch: from the caller's callback, or the loader's in this epoch's order; the run's cursor
 * moves past it. */
int run_next_batch(tr_run_state *t, trs_batch *b, tr_error *err)
{
    if (t->data.next_batch) {
        *b = (trs_batch){0};
        const int rc = t->data.next_batch(t->data.ctx, t->p.step, t->shape.step_batch, b, err);
        if (rc) return rc;
        t->p.pos += b->shape[0];
        return TR_OK;
    }
    const tr_loader_slot *s = tr_loader_take(&t->loader, err);
    if (!s) return err->code;
    t->p.epoch = s->epoch;
    t->p.pos = s->pos;
    *b = run_batch_view(t, s, s->n);
    return TR_OK;
}
