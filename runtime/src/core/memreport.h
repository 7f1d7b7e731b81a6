/*
 * memreport.h -- leak attribution: what grew since the watchdog's baseline, by (phase, size).
 *
 * Why: "growth 4.00 KiB/step" says that memory leaks, not what leaks. Every live CPU block carries the step phase
 * that allocated it and its size (trs_memory_live_keys), so the difference between two snapshots of the live
 * blocks, grouped by (phase, size), names the growth: "+4096 B/step: 1 block of 4096 B per step, allocated in train
 * forward, still alive" -- the C counterpart of diffing two torch.cuda.memory_snapshot()s (memory_viz).
 */
#ifndef TR_MEMREPORT_H
#define TR_MEMREPORT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "log.h"
#include "trainrun_shim.h"

/** The live blocks at one step, grouped by (phase, size), sorted by phase then size (trs_memory_live_keys). */
typedef struct tr_memsnap {
    trs_memory_key *keys;
    size_t n;
    int64_t step;
    int taken;          /**< 1 once a snapshot is held */
} tr_memsnap;

/** Growth of one (phase, size) key between two snapshots. */
typedef struct tr_mem_growth {
    int phase;                /**< trs_mem_phase                                                  */
    int64_t size;             /**< bytes each block requested                                     */
    int64_t blocks;           /**< live blocks now minus at the baseline (> 0 for growth)         */
    int64_t bytes;            /**< live bytes now minus at the baseline                           */
    double bytes_per_step;    /**< bytes / steps since the baseline (0 when no step has passed)   */
    double blocks_per_step;   /**< blocks / steps since the baseline                              */
} tr_mem_growth;

/** Take a snapshot of the live blocks now, at `step` (replacing what *s held). TR_OK or TR_E_RUNTIME. */
int tr_memsnap_take(tr_memsnap *s, int64_t step, tr_error *err);

/** Free a snapshot's keys (a zeroed or freed snapshot is fine). */
void tr_memsnap_free(tr_memsnap *s);

/**
 * The keys whose live bytes grew from `base` to `cur`, largest growth first (ties: phase, then size); per-step
 * rates over cur->step - base->step steps. Returns the count and sets *out to a malloc'd array (NULL when 0, or
 * when out of memory: then it returns 0 and sets *oom when oom is not NULL).
 */
size_t tr_memsnap_diff(const tr_memsnap *base, const tr_memsnap *cur, tr_mem_growth **out, int *oom);

/**
 * One growth as a line, e.g. "+4096 B/step: 1 block of 4096 B per step, allocated in train forward, still alive
 * (+40 blocks, 163840 B since step 200)"; a key that grows by less than a block per step reads "1 block of 4096 B
 * every 500 steps".
 */
void tr_mem_growth_line(const tr_mem_growth *g, int64_t base_step, char *buf, size_t n);

/**
 * Write `path` (RUN_DIR/memory_report.json, with cJSON; replaced atomically): why ("warn", "limit", "end",
 * "check"), the baseline and current step, allocated / reserved / RSS now and at the baseline, and the growth
 * list (phase, block_bytes, blocks, bytes, bytes_per_step, blocks_per_step, line), largest first; `backtrace`
 * (may be NULL or "") is the fastest-growing key's allocating call stack, one frame a line.
 * TR_OK or TR_E_RUNTIME naming the file.
 */
int tr_memreport_write(const char *path, const char *reason, int64_t base_step, int64_t step,
                       const trs_memory_stats *base_stats, const trs_memory_stats *now, const tr_mem_growth *g,
                       size_t n, const char *backtrace, tr_error *err);

/**
 * The watchdog's report of what grew since the baseline `base` (taken at base->step, with the allocator's figures
 * base_stats then), at `step` for `reason` ("warn", "limit", "end"), into run directory `dir`: the five largest
 * (phase, size) keys as log lines (log_lines), with the fastest-growing key's allocating call stack (`backtrace`,
 * watchdog.backtrace), and DIR/memory_report.json (tr_memreport_write); on a CUDA device (`cuda`) first
 * DIR/memory_snapshot.pickle, the caching allocator's snapshot -- at "end" only while `recording_history`
 * (watchdog.snapshot). Nothing but the snapshot without a baseline taken. What fails is a "watchdog: ..." line
 * in `log` (NULL: no lines at all), never fatal. Runs (run_watchdog.c) and trainers (trainrun_trainer_watchdog) on
 * the main rank call it.
 */
void tr_memreport_report(const char *dir, const char *reason, int64_t step, const tr_memsnap *base,
                         const trs_memory_stats *base_stats, int cuda, int recording_history, int backtrace,
                         int log_lines, tr_log *log);

#endif
