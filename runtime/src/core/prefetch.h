/*
 * prefetch.h -- a producer run one item ahead on a worker thread, over two caller-owned slots (double buffering).
 *
 * The training loop hands batch preparation (the gather of a batch's rows into a contiguous buffer) to a worker
 * thread, so batch k+1 is prepared while step k runs on the loop's thread, where it would otherwise add to every
 * step of a data-bound run (bench/RESULTS.md, "Batch prefetch"). The producer fills slots strictly in order (0, 1, 0,
 * 1, ...) and the consumer takes them in the same order, so what the loop sees is exactly what a synchronous
 * producer would give: prefetching changes timing, never data, and bit-identical runs stay bit-identical.
 *
 * Slot ownership: a slot taken by tr_prefetch_take() belongs to the consumer until its next take (or stop); the
 * producer only ever writes the other slot. Hand-over is by mutex + condition variable, never spinning (on a
 * 2-core machine a spinning waiter would steal the step's core).
 */
#ifndef TR_PREFETCH_H
#define TR_PREFETCH_H

#include <pthread.h>

#include "error.h"

/** Fill slot `slot` (0 or 1) with the next item. Runs on the worker thread. Returns 0, or nonzero to stop the
 * producer (that status comes back from the take that would have received the item). */
typedef int (*tr_produce_fn)(void *ctx, int slot);

typedef struct tr_prefetch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tr_produce_fn produce;
    void *ctx;
    int filled;     /* items produced so far (slot of item i: i % 2)   */
    int taken;      /* items taken so far                              */
    int held;       /* 1 while the consumer holds item taken - 1       */
    int failed;     /* the producer's nonzero status, 0 while healthy  */
    int stop;       /* set by tr_prefetch_stop                         */
    int running;    /* 1 between a successful start and stop           */
} tr_prefetch;

/**
 * Start the worker, which begins producing item 0 into slot 0 at once. Returns TR_OK, or TR_E_RUNTIME when the
 * thread cannot be created (`pf` is then not running and tr_prefetch_stop is a no-op).
 */
int tr_prefetch_start(tr_prefetch *pf, tr_produce_fn produce, void *ctx, tr_error *err);

/**
 * Release the slot taken last (if any), wait until the next item is produced and return its slot (0 or 1); or
 * -1 when the producer failed (*produce_status then holds its nonzero status).
 */
int tr_prefetch_take(tr_prefetch *pf, int *produce_status);

/** Stop and join the worker; an item being produced is finished first. Safe on a never-started `pf`. */
void tr_prefetch_stop(tr_prefetch *pf);

#endif
