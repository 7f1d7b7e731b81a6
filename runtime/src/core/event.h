/*
 * event.h -- the one path everything a run reports takes. Each observable thing (a step, a closed log window, an
 * evaluation, a checkpoint, a watchdog report, a resume, the end of training, the end of the run) becomes one
 * tr_event, handed in order to every sink of the run (run.c's emit):
 *   metrics.jsonl and the console   log.c      tr_log_event       (metrics.csv follows metrics.jsonl: history.h)
 *   the trace (log.trace)           trace.c    tr_trace_event
 *   the embedding API's hook        run.c      tr_run_set_event_hook's function
 *   the summary                     summary.c  summary.json at the end
 * A new output is a new sink; nothing else changes. Fields not named for a kind are 0 / NULL.
 */
#ifndef TR_EVENT_H
#define TR_EVENT_H

#include <stdint.h>

#include "error.h"
#include "watchdog.h"

struct tr_metrics;

typedef enum tr_event_kind {
    TR_EV_STEP = 1,   /**< an optimizer step was taken: loss (mean per sample), lr, grad_norm, samples, correct     */
    TR_EV_TRAIN,      /**< a log window closed: loss and accuracy (means over it), lr, samples_per_s, partial (the
                           window was closed early by a stop)                                                   */
    TR_EV_EVAL,       /**< an evaluation pass: split ("val", "test"), weights ("live", "ema"), metrics (the counts:
                           metrics.h) and its loss, accuracy, correct, samples; top_k; seconds; reported (these are
                           the weights eval.weights reports to the caller)                                      */
    TR_EV_CHECKPOINT, /**< a checkpoint was saved (step, epoch: the checkpoint's): reason, path, bytes, seconds
                           (snapshot to renamed directory), stall_seconds (the loop's pause), elapsed (training
                           seconds at the snapshot)                                                            */
    TR_EV_WATCHDOG,   /**< a watchdog report (baseline, warn, limit): watchdog                                     */
    TR_EV_RESUME,     /**< the run continues from a checkpoint: position (the data cursor), path                  */
    TR_EV_TRAINED,    /**< training is over and not stopped early: crc, abs_sum (the final parameters' digest)      */
    TR_EV_END         /**< the run ended with status rc (err: its message; may be NULL)                            */
} tr_event_kind;

typedef struct tr_event {
    tr_event_kind kind;
    int64_t step, epoch;             /**< optimizer steps done; 0-based epoch                                  */
    double loss, accuracy, lr, grad_norm, samples_per_s;
    int64_t samples, correct;
    int64_t targets;                 /**< step: the labels its accuracy counts over (N, N x T, less -100s)    */
    int partial;
    const char *split, *weights;
    const struct tr_metrics *metrics;
    int top_k, reported;
    double seconds, stall_seconds, elapsed;
    const char *reason, *path;       /**< checkpoint: "steps", "interval", "best", "end", "signal", "watchdog" */
    int64_t bytes, position;
    tr_watchdog_report watchdog;
    uint32_t crc;
    double abs_sum;
    const struct tr_param_digest *params; /**< TR_EV_TRAINED: every state_dict entry's digest (may be NULL)  */
    int64_t n_params;
    int rc;
    const tr_error *err;
} tr_event;

#endif
