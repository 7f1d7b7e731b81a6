/*
 * prefetch.c -- see prefetch.h. Counters instead of per-slot flags: item i lives in slot i % 2; the producer may
 * write item `filled` when it is at most one item ahead of the consumer's held item.
 */
#include "prefetch.h"

#include <signal.h>
#include <string.h>

/* The producer may write item `filled` into slot filled % 2 once no one holds that slot: items taken - 1 (held by
 * the consumer) and taken .. filled - 1 (ready, not yet taken) occupy slots, at most two in all. */
static int slot_free(const tr_prefetch *pf)
{
    const int in_use = (pf->filled - pf->taken) + pf->held;
    return in_use < 2;
}

static void *worker(void *arg)
{
    tr_prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->stop && !slot_free(pf)) pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->stop) break;
        const int slot = pf->filled % 2;
        pthread_mutex_unlock(&pf->mu);
        const int rc = pf->produce(pf->ctx, slot);
        pthread_mutex_lock(&pf->mu);
        if (rc) {
            pf->failed = rc;
            pthread_cond_broadcast(&pf->cv);
            break;
        }
        pf->filled++;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

int tr_prefetch_start(tr_prefetch *pf, tr_produce_fn produce, void *ctx, tr_error *err)
{
    memset(pf, 0, sizeof *pf);
    pf->produce = produce;
    pf->ctx = ctx;
    if (pthread_mutex_init(&pf->mu, NULL) != 0) return tr_error_set(err, TR_E_RUNTIME, "prefetch: mutex init failed");
    if (pthread_cond_init(&pf->cv, NULL) != 0) {
        pthread_mutex_destroy(&pf->mu);
        return tr_error_set(err, TR_E_RUNTIME, "prefetch: condition variable init failed");
    }
    /* The worker inherits a mask blocking every signal, so SIGINT / SIGTERM always reach the loop's thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(&pf->thread, NULL, worker, pf);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&pf->cv);
        pthread_mutex_destroy(&pf->mu);
        return tr_error_set(err, TR_E_RUNTIME, "prefetch: cannot start the worker thread: %s", strerror(rc));
    }
    pf->running = 1;
    return TR_OK;
}

int tr_prefetch_take(tr_prefetch *pf, int *produce_status)
{
    pthread_mutex_lock(&pf->mu);
    if (pf->held) {
        pf->held = 0;
        pthread_cond_broadcast(&pf->cv);
    }
    while (pf->filled == pf->taken && !pf->failed) pthread_cond_wait(&pf->cv, &pf->mu);
    int slot = -1;
    if (pf->filled > pf->taken) {
        slot = pf->taken % 2;
        pf->taken++;
        pf->held = 1;
    } else if (produce_status) {
        *produce_status = pf->failed;
    }
    pthread_mutex_unlock(&pf->mu);
    return slot;
}

void tr_prefetch_stop(tr_prefetch *pf)
{
    if (!pf->running) return;
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pthread_cond_destroy(&pf->cv);
    pthread_mutex_destroy(&pf->mu);
    pf->running = 0;
}
