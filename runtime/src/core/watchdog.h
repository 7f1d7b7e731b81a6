/*
 * watchdog.h -- the memory watchdog: allocated bytes against the baseline measured once warm-up is over.
 *
 * Why: a run that keeps a graph alive (a stored loss or logits), evaluates without no_grad or updates an EMA copy
 * that tracks grad grows by a few KiB to MiB per step and dies hours later. The watchdog samples allocated bytes
 * (trs_memory_stats_get: live CPU tensor storage, the CPU analogue of torch.cuda.memory_allocated) every
 * `every_steps` steps, fits growth in bytes per step by least squares over the last `window` samples, warns past
 * `warn_ratio` x baseline (the field habit is to worry at 20-30% over baseline), and at the hard limit -- the
 * smallest of limit_ratio x baseline, limit_fraction x available memory and limit_bytes, whichever are set --
 * acts: `warn` reports, `checkpoint_exit` stops the run with exit code 3. The limit counts as reached when the
 * fitted growth would cross it before the next sample, so the run stops before it is actually there.
 *
 * The baseline is taken at the first sample where the caller says warm-up is over (run.c: step >= warmup_steps,
 * after the first optimizer step, the first evaluation and the first checkpoint, which allocate state lazily).
 */
#ifndef TR_WATCHDOG_H
#define TR_WATCHDOG_H

#include <stdint.h>

#include "config.h"
#include "error.h"
#include "sys.h" /* tr_memory_available */

typedef enum tr_watchdog_event {
    TR_WD_EV_NONE = 0,   /**< nothing to report                                      */
    TR_WD_EV_BASELINE,   /**< the baseline was taken at this sample                  */
    TR_WD_EV_WARN,       /**< allocated crossed warn_ratio x baseline                */
    TR_WD_EV_LIMIT       /**< the hard limit is reached or would be by the next sample */
} tr_watchdog_event;

/** One report. Bytes are bytes; growth is bytes per optimizer step; steps_left < 0 means "not growing". */
typedef struct tr_watchdog_report {
    tr_watchdog_event event;
    int64_t step;
    int64_t baseline;
    int64_t current;
    int64_t limit;             /**< effective hard limit in bytes; 0 when none is set          */
    double growth_per_step;    /**< least-squares slope over the window; 0 with < 2 samples     */
    double steps_left;         /**< (limit - current) / growth when growing and limited, else -1 */
    int64_t reserved;          /**< reserved bytes at the sample (live + cached blocks: the CPU caching allocator's, or
                                    the CUDA one's); -1: not measured. Reported only: the watchdog acts on
                                    allocated (`current`). The caller fills it                           */
    int64_t rss;               /**< the process's resident set at the sample; the caller fills it   */
} tr_watchdog_report;

typedef struct tr_watchdog {
    int64_t every_steps, window;
    double warn_ratio, limit_ratio, limit_fraction;
    int64_t limit_bytes, available_bytes;
    int has_baseline;
    int64_t baseline, baseline_step, limit;
    int warned;                /**< a warning stands; cleared when allocated falls below the mark */
    int64_t *steps, *bytes;    /**< ring buffer of the last `window` samples after the baseline   */
    int64_t count, head;
    tr_watchdog_report last;   /**< the most recent sample's figures                              */
} tr_watchdog;

/** Set up from cfg->watchdog; `available` as from tr_memory_available(). TR_OK or TR_E_RUNTIME (no memory). */
int tr_watchdog_init(tr_watchdog *wd, const tr_config *cfg, int64_t available, tr_error *err);

/** Free the sample buffers. */
void tr_watchdog_free(tr_watchdog *wd);

/**
 * Whether warm-up is over after optimizer step `step` (the run's and the trainer's one rule): the lazily allocated
 * state exists -- optimizer state (the first step), evaluation buffers (`eval_waiting`: a periodic evaluation is
 * configured and has not run yet), the first step-interval checkpoint (`checkpoints` saved, when
 * checkpoint.every_steps is set) -- and watchdog.warmup_steps have passed.
 */
int tr_watchdog_warmed_up(const tr_config *cfg, int64_t step, int eval_waiting, int64_t checkpoints);

/**
 * Feed one sample: `bytes` allocated after optimizer step `step`. `warm` is nonzero once warm-up is over; the
 * first warm sample becomes the baseline. Returns the event (also in rep->event) and fills *rep (may be NULL).
 * WARN is returned once per crossing; LIMIT at every sample at or past the limit.
 */
tr_watchdog_event tr_watchdog_sample(tr_watchdog *wd, int64_t step, int64_t bytes, int warm,
                                     tr_watchdog_report *rep);

/**
 * The hard limit as far as it is known before the baseline: the smaller of limit_fraction x available memory and
 * limit_bytes (limit_ratio needs the baseline); 0 when neither is set.
 */
int64_t tr_watchdog_limit_without_baseline(const tr_watchdog *wd);

/** Least-squares slope of y over x for n points (0 when n < 2 or x is constant). */
double tr_least_squares_slope(const int64_t *x, const int64_t *y, int64_t n);

#endif
