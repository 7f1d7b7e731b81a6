/*
 * sys.h -- what the operating system says, for every layer: the monotonic clock and the memory this process may use.
 * Pure C (POSIX), no other trainrun header: io/ (a background save times itself), config/ (the model-spec and
 * device checks) and core/ (the log's clock, the watchdog's limit) all read these.
 */
#ifndef TR_SYS_H
#define TR_SYS_H

#include <stdint.h>

/** Monotonic clock in seconds (CLOCK_MONOTONIC). */
double tr_now(void);

/**
 * Memory available to this process in bytes: the smallest of physical memory (sysconf), the cgroup v2 limit
 * (/sys/fs/cgroup/memory.max, when numeric) and RLIMIT_AS, or 0 if none can be read.
 */
int64_t tr_memory_available(void);

#endif
