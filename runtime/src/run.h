/*
 * run.h -- one training run from a config: set-up, the loop, final evaluation, summary.
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
    int stopped;                /**< 1 when the run ended early on tr_request_stop()                      */
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

/** Ask the running loop to stop after the current step. Async-signal-safe. */
void tr_request_stop(void);

#endif
