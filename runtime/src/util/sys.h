/*
 * sys.h -- what the operating system says, for every layer: the monotonic clock, the UTC wall-clock stamp and the
 * memory this process may use. Pure C (POSIX), no other trainrun header: io/ (a background save times itself; the
 * checkpoint meta's saved_at and the run lock's holder text carry the stamp), config/ (the model-spec and device
 * checks) and core/ (the log's clock, the watchdog's limit) all read these.
 */
#ifndef TR_SYS_H
#define TR_SYS_H

#include <stdint.h>

/** Monotonic clock in seconds (CLOCK_MONOTONIC). */
double tr_now(void);

/** The wall clock now, in UTC, as "YYYY-MM-DDTHH:MM:SSZ" into `out` (20 characters and the NUL). */
void tr_utc_stamp(char out[32]);

/**
 * Memory available to this process in bytes: the smallest of physical memory (sysconf), the cgroup v2 limit
 * (/sys/fs/cgroup/memory.max, when numeric) and RLIMIT_AS, or 0 if none can be read.
 */
int64_t tr_memory_available(void);

#endif
