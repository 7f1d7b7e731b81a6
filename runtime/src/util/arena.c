/*
 * arena.c -- anonymous mappings for state copied out of libtorch, with one spare kept resident (arena.h).
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE */
#include "arena.h"

#include <pthread.h>
#include <sys/mman.h>

/* The spare: the mapping last handed back (tr_arena_put), kept resident for the next tr_arena_get. Why keep it: a
 * fresh mapping's pages are allocated and zeroed by the kernel as they are populated, which costs more than copying
 * the state into them (under a hypervisor that takes freed guest memory back, each page is a host fault as well);
 * a kept one is already resident. Why not MADV_FREE its pages between uses: the kernel may take such pages back at
 * any moment, even with memory to spare, and the next use then faults all of them in afresh. So the spare holds its
 * bytes of RSS until it is reused or released, as PyTorch's cached staging buffers for async checkpoints do (the
 * figures: bench/checkpoint_async.md). One spare per process, under a lock (mappings may be handed back on a writer
 * thread). */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *spare_arena;
static size_t spare_map;

static void arena_unmap(unsigned char *a, size_t len)
{
    if (a) munmap(a, len);
}

/* Make a[len] the spare mapping (NULL, 0: none) under spare_lock; returns the previous spare (NULL: none) and its
 * length in *old_len, which the caller now owns. */
static unsigned char *exchange_spare(unsigned char *a, size_t len, size_t *old_len)
{
    pthread_mutex_lock(&spare_lock);
    unsigned char *old = spare_arena;
    *old_len = spare_map;
    spare_arena = a;
    spare_map = len;
    pthread_mutex_unlock(&spare_lock);
    return old;
}

int tr_arena_get(size_t need, unsigned char **a, size_t *len)
{
    if (need == 0) need = 1;
    size_t sl;
    unsigned char *sp = exchange_spare(NULL, 0, &sl);
    if (sp && sl >= need && sl / 2 <= need) {
        *a = sp;
        *len = sl;
        return 0;
    }
    arena_unmap(sp, sl);
    void *m = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) return -1;
    *a = m;
    *len = need;
    return 0;
}

void tr_arena_put(unsigned char *a, size_t len)
{
    if (!a) return;
    size_t old_len;
    unsigned char *old = exchange_spare(a, len, &old_len);
    arena_unmap(old, old_len);
}

void tr_arena_release_spare(void)
{
    size_t len;
    unsigned char *a = exchange_spare(NULL, 0, &len);
    arena_unmap(a, len);
}
