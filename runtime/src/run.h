/*
 * run.h -- one training run from a config: set-up, the loop, final evaluation, summary.
 *
 * tr_run() runs a config to the end (the CLI). The same run a step at a time (the embedding API):
 *     tr_run_state *run;
 *     int rc = tr_run_open(cfg, &run, &err);           // set-up; *run is set even on failure
 *     while (rc == TR_OK) rc = tr_run_step(run, &err); // one optimizer step and its concerns per call
 *     if (rc == TR_RUN_DONE) rc = tr_run_finish(run, &err);   // last checkpoint, test, summary.json
 *     rc = tr_run_close(run, rc, &err, &summary);      // frees; returns rc
 */
#ifndef TR_RUN_H
#define TR_RUN_H

#include <stdint.h>

#include "config.h"
#include "error.h"

/** The figures of one evaluation (metrics.h): which of them mean something depends on the loss. */
typedef struct tr_eval_figures {
    int has;                    /**< 1 when this evaluation ran (in this process)                        */
    double loss, accuracy, top_k_accuracy, micro_f1, macro_f1, mse, mae;
    int64_t samples;
} tr_eval_figures;

/** What a finished (or stopped) run reports. Accuracies are fractions in [0, 1]; times in seconds. */
typedef struct tr_summary {
    char run_dir[TR_PATH_MAX];  /**< directory holding config.yaml, metrics.jsonl, summary.json          */
    int64_t params;             /**< parameter elements                                                  */
    int64_t steps;              /**< optimizer steps taken                                               */
    int64_t epochs;             /**< epochs started                                                      */
    double train_seconds;       /**< wall time in the training loop, evaluation included                 */
    double samples_per_s;       /**< training samples / time spent in train steps                        */
    double last_loss;           /**< mean training loss over the last log window                         */
    int has_val;
    double val_loss, val_accuracy;
    int has_test;
    double test_loss, test_accuracy;
    int64_t test_samples;
    int stopped;                /**< 1 when the run ended early on tr_request_stop() / tr_run_request_stop() */
    int already_complete;       /**< 1 when run.resume found the run finished: nothing was trained or written */
    int watchdog_stopped;       /**< 1 when the watchdog's checkpoint_exit action ended the run            */
    int64_t baseline_bytes;     /**< watchdog baseline (allocated bytes after warm-up); 0 if never taken   */
    int64_t baseline_step;      /**< step the baseline was taken at                                       */
    int64_t final_bytes;        /**< allocated bytes at the end of the loop                               */
    int64_t peak_bytes;         /**< peak allocated bytes over the process                                */
    double growth_per_step;     /**< the watchdog's last fitted growth, bytes per step                    */
    tr_eval_figures val_live, val_ema, test_live, test_ema; /**< the last evaluation of each split and weights */
    int task;                   /**< tr_task (metrics.h): 0 classification, 1 multi-label, 2 regression    */
    int top_k;                  /**< eval.top_k                                                           */
} tr_summary;

/**
 * Run `cfg` to the end: threads and seed first, then data, model, optimizer, run directory, the loop, and the test
 * evaluation. Returns TR_OK; TR_E_CONFIG for a bad model spec or a config that contradicts the data;
 * TR_E_RUNTIME for I/O, data or libtorch failures; TR_E_SIGNAL when stopped by tr_request_stop(); TR_E_WATCHDOG
 * when the memory watchdog's checkpoint_exit action stopped it (the summary is filled in both cases). `sum` may be NULL.
 */
int tr_run(const tr_config *cfg, tr_summary *sum, tr_error *err);

/** Ask every running loop to stop after its current step (the CLI's signal handler). Async-signal-safe. */
void tr_request_stop(void);

/** tr_run_step's "the loop is over" (not an error): call tr_run_finish. Distinct from every TR_* code. */
#define TR_RUN_DONE 100

/** A run opened by tr_run_open. `cfg` must stay valid until tr_run_close. */
typedef struct tr_run_state tr_run_state;

/**
 * Set the run up: threads and seed first, then data, model, optimizer, run directory, log, and a resume. *out is
 * set even on failure (NULL only when out of memory) and must be passed to tr_run_close. A run that resume finds
 * complete opens with TR_OK, summary.already_complete = 1 and nothing to step. Errors as tr_run.
 */
int tr_run_open(const tr_config *cfg, tr_run_state **out, tr_error *err);

/**
 * Take one optimizer step, then log, validate, watch memory and checkpoint when due. Returns TR_OK after a step,
 * TR_RUN_DONE when the loop is over (all steps taken, a stop was requested, or the watchdog stopped it; no step
 * taken), or an error (TR_E_RUNTIME; the run is over and tr_run_close reports it).
 */
int tr_run_step(tr_run_state *run, tr_error *err);

/**
 * End the run after TR_RUN_DONE: the last checkpoint, the partial log window of an early stop, the parameter
 * checksum of the trace, the test evaluation and summary.json. Returns TR_OK, TR_E_SIGNAL (stopped),
 * TR_E_WATCHDOG, or an error. A second call returns the first one's status.
 */
int tr_run_finish(tr_run_state *run, tr_error *err);

/** Ask this run alone to stop after its current step. Async-signal-safe. */
void tr_run_request_stop(tr_run_state *run);

/** The summary so far (complete after tr_run_finish). Valid until tr_run_close. */
const tr_summary *tr_run_summary(const tr_run_state *run);

/**
 * Write summary.json if the run has not yet (with status `rc` and err's message), free everything, copy the
 * summary into *sum (may be NULL). NULL run: *sum is zeroed. Returns rc.
 */
int tr_run_close(tr_run_state *run, int rc, const tr_error *err, tr_summary *sum);

#endif
