/*
 * arena.h -- one anonymous mapping for a large copy of state (a checkpoint's snapshot, checkpoint.h), outside
 * libtorch's allocator (the watchdog's allocated bytes never count it) and outside malloc's heap, with the last one
 * handed back kept resident as the process's one spare for the next. Thread-safe.
 */
#ifndef TR_ARENA_H
#define TR_ARENA_H

#include <stddef.h>

/**
 * A mapping of at least `need` bytes (0 counts as 1) into *a, its mapped length into *len: the spare when it is
 * large enough and not more than twice too large (else the spare is unmapped), or a fresh one, populated
 * (MAP_POPULATE). 0, or -1 with errno when none can be mapped.
 */
int tr_arena_get(size_t need, unsigned char **a, size_t *len);

/** Hand a mapping of tr_arena_get back (a NULL: no-op): it becomes the spare, replacing and unmapping an older one. */
void tr_arena_put(unsigned char *a, size_t len);

/** Unmap the spare (none: no-op). Mappings in use are not affected. */
void tr_arena_release_spare(void);

#endif
