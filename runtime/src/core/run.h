/*
 * run.h -- one training run from a config: set-up, the loop, final evaluation, summary.
 *
 * tr_run() runs a config to the end (`trainrun check` and `verify`). The same run a step at a time (the embedding
 * API's trainrun_run, over which the CLI's `train` is written):
 *     tr_run_state *run;
 *     int rc = tr_run_open(cfg, NULL, &run, &err);     // set-up (NULL: the config's data); *run set even on failure
 *     while (rc == TR_OK) rc = tr_run_step(run, &err); // one optimizer step and its concerns per call
 *     if (rc == TR_RUN_DONE) rc = tr_run_finish(run, &err);   // last checkpoint, test, summary.json
 *     rc = tr_run_close(run, rc, &err, &summary);      // frees; returns rc
 */
#ifndef TR_RUN_H
#define TR_RUN_H

#include <signal.h>
#include <stdint.h>

#include "config.h"
#include "data.h"
#include "error.h"
#include "event.h"
#include "log.h"
#include "model_spec.h"
#include "trainrun_shim.h"
#include "memreport.h"
#include "metrics.h"
#include "watchdog.h"


/** What a finished (or stopped) run reports. Accuracies are fractions in [0, 1]; times in seconds. */
typedef struct tr_summary {
    char run_dir[TR_PATH_MAX];  /**< directory holding config.yaml, metrics.jsonl, summary.json          */
    int64_t params;             /**< parameter elements                                                  */
    int64_t steps;              /**< optimizer steps taken                                               */
    int64_t epochs;             /**< epochs started                                                      */
    double epochs_completed;    /**< steps / steps per epoch: epochs' worth of batches trained (0: no epochs) */
    double train_seconds;       /**< wall time in the training loop, evaluation included                 */
    double samples_per_s;       /**< training samples / time spent in train steps                        */
    double last_loss;           /**< mean training loss over the last log window                         */
    int has_val;
    double val_loss, val_accuracy;
    int has_test;
    double test_loss, test_accuracy;
    int64_t test_samples;
    int stopped;                /**< 1 when the run ended early on a stop request (tr_run_request_stop, tr_run_data.stop) */
    int already_complete;       /**< 1 when run.resume found the run finished: nothing was trained or written */
    int watchdog_stopped;       /**< 1 when the watchdog's checkpoint_exit action ended the run            */
    int64_t baseline_bytes;     /**< watchdog baseline (allocated bytes after warm-up); 0 if never taken   */
    int64_t baseline_step;      /**< step the baseline was taken at                                       */
    int64_t final_bytes;        /**< allocated bytes at the end of the loop (the run's device: device.h)  */
    int64_t peak_bytes;         /**< peak allocated bytes over the process (of the run's device)          */
    int64_t final_reserved_bytes; /**< reserved bytes at the end of the loop (live + cached blocks, device.h) */
    char device[32];            /**< the device the run trained on: "cpu", "cuda:N"                       */
    int64_t peak_reserved_bytes; /**< peak reserved bytes of the CPU allocator over the process; -1 on CUDA */
    int64_t final_rss_bytes;    /**< resident set size at the end of the loop                            */
    int64_t peak_rss_bytes;     /**< peak resident set size of the process (ru_maxrss)                    */
    double growth_per_step;     /**< the watchdog's last fitted growth, bytes per step                    */
    tr_eval_figures val_live, val_ema, test_live, test_ema; /**< the last evaluation of each split and weights */
    int task;                   /**< tr_task (metrics.h): 0 classification, 1 multi-label, 2 regression    */
    int top_k;                  /**< eval.top_k                                                           */
    int world_size;             /**< ranks of the run (1: one process; dist.h)                            */
    int rank;                   /**< this process's rank (0 in one-process runs)                          */
    double allreduce_seconds;   /**< this process's seconds waiting for all-reduce collectives in the loop */
    double allreduce_share;     /**< allreduce_seconds / this process's seconds in train steps            */
    int early_stopped;          /**< 1 when early_stopping ended the run (exit code 0)                     */
    char stop_reason[320];      /**< why, in words ("" when it did not, or an earlier process stopped it)  */
    int64_t best_step;          /**< checkpoint.monitor: the best checkpoint's step, -1 without one         */
    double best_score;          /**< its score                                                            */
    char best_monitor[40];      /**< the metric it is best by                                             */
} tr_summary;

/**
 * Run `cfg` to the end: threads and seed first, then data, model, optimizer, run directory, the loop, and the test
 * evaluation. Returns TR_OK; TR_E_CONFIG for a bad model spec or a config that contradicts the data;
 * TR_E_RUNTIME for I/O, data or libtorch failures; TR_E_PEER when another rank of a multi-process run
 * failed or hung (dist.h); TR_E_WATCHDOG when the memory watchdog's checkpoint_exit action stopped it (the summary
 * is filled). A run whose first step after a resume failed, and which set that checkpoint aside, starts again at once
 * from the next older one (tr_run_restart_due). `sum` may be NULL.
 */
int tr_run(const tr_config *cfg, tr_summary *sum, tr_error *err);

/**
 * The config's file data, as a run sees it: training, validation (carved by data.val_size) and -- with
 * eval.test_at_end or eval.split: test -- test sets, read and normalised per data.format (idx, csv or npy).
 * The caller frees the three with tr_dataset_free. Errors: TR_E_RUNTIME (files; naming the file and offset or
 * line), TR_E_CONFIG (naming the key).
 */
int tr_load_data(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err);

/**
 * What defines a run, into its directory `dir`: model.yaml (the model spec) or model.pt / model.pt.gz (the
 * TorchScript archive, byte for byte) and config.yaml (cfg with model.spec / model.torchscript pointing at that
 * copy, and absolute data, init and run paths), so that `trainrun DIR/config.yaml` repeats or continues it and
 * `trainrun predict DIR` finds its model; both written atomically. `resumed`: a rewrite after a resume, whose
 * changed keys go to `log` as one "updated:" line (log may be NULL). Runs and trainers (trainrun_trainer_open_dir)
 * write them. TR_OK, or TR_E_RUNTIME naming the file.
 */
int tr_run_dir_write_config(const tr_config *cfg, const char *dir, int resumed, tr_log *log, tr_error *err);

/**
 * Token data's vocabulary `mine` (the training split's, tr_load_data) for run directory `dir`: checked against the
 * one the weights were trained with -- `resumed_from`'s vocab.json and then dir's when resuming ("" for a fresh
 * start), else init.from's run directory's -- then written as dir/vocab.json (atomically), which every checkpoint
 * then copies, so `trainrun sample DIR` decodes. The first vocab.json found decides. Runs and trainers (open_data,
 * open_dir) call it on the main rank. Errors: TR_E_CONFIG ("FILE: the weights were trained with another
 * vocabulary ...", or a vocab.json that does not parse, naming its field), TR_E_RUNTIME (a file unreadable or
 * unwritable, named).
 */
int tr_run_dir_vocab(const tr_config *cfg, const char *dir, const char *resumed_from, const tr_vocab *mine,
                     tr_error *err);

/**
 * RUN_DIR/confusion_SPLIT.csv (SPLIT "val" or "test"; confusion_SPLIT_ema.csv for the EMA's weights): the latest
 * confusion matrix of that split and weights (tr_metrics_write_confusion), written atomically after each
 * cross-entropy evaluation by runs and trainers (trainrun_trainer_evaluate) on the main rank. TR_OK, or
 * TR_E_RUNTIME naming the file.
 */
int tr_run_dir_write_confusion(const char *dir, const char *split, int ema, const tr_metrics *m, tr_error *err);

/**
 * RUN_DIR/curves.png redrawn from RUN_DIR/metrics.jsonl (plot.h): after each evaluation and at the end, by runs
 * and trainers with a log (trainrun_trainer_open_log) on the main rank. A failure is logged to `log` once as a
 * warning and sets *failed, after which it is not tried again; the loop goes on.
 */
void tr_run_dir_draw_curves(const char *dir, int *failed, tr_log *log);

/** What summary.json says beyond the tr_summary: the config, and the facts of the run or trainer it describes. */
typedef struct tr_summary_context {
    const tr_config *cfg;
    int64_t block;              /**< token data: tokens a sample (tokens_per_s); 0 otherwise              */
    const tr_metrics *metrics;  /**< the evaluation's: its task and the language model's bits name        */
    int malloc_tuning;          /**< glibc's malloc thresholds were pinned (tr_setup_threads)              */
    const tr_dataset *sets[3];  /**< train, val, test: data.cache disk's counts (NULL or without images: none) */
} tr_summary_context;

/** The end's memory figures into *s: final allocated / reserved / RSS and the peak allocated of `device`
 *  (tr_memory_read), the process's peak reserved (-1 on CUDA) and peak RSS; left as they were where unreadable. */
void tr_summary_memory(tr_summary *s, const tr_device *device);

/**
 * RUN_DIR/summary.json (summary.c lists its keys): `s` with the context `c`, the status named from `rc`
 * ("completed" TR_OK, "watchdog", "interrupted" TR_E_SIGNAL, "peer_failed", else "error", with `error` for
 * TR_E_RUNTIME and TR_E_CONFIG), one line through the atomic path. A failure is a warning in `log` (may be NULL),
 * not an error. Runs (at their end) and trainers with a log (at close) write it on the main rank.
 */
void tr_summary_write(const char *dir, const tr_summary *s, const tr_summary_context *c, int rc, const char *error,
                      tr_log *log);

/** tr_run_step's "the loop is over" (not an error): call tr_run_finish. Distinct from every TR_* code. */
#define TR_RUN_DONE 100

/** A run opened by tr_run_open. `cfg` must stay valid until tr_run_close. */
typedef struct tr_run_state tr_run_state;

/**
 * The training batch for optimizer step `step` (0-based), of up to `batch_size` samples, into *b: pointers that
 * stay valid until the next call (shape[0] = samples). Returns TR_OK or an error set in err (ends the run).
 */
typedef int (*tr_batch_fn)(void *ctx, int64_t step, int64_t batch_size, trs_batch *b, tr_error *err);

/**
 * Data supplied by the caller instead of the config's files (the embedding API); all zero but `log`: the config's. Borrowed: it must outlive the
 * run, and is used as given (no normalisation, no validation split). Either `train` (shuffled and batched by the
 * run, the same order as file data: tr_permutation(seed, epoch)) or `next_batch` with the per-sample shape c, h, w
 * (then train.max_steps must be set: a callback has no epochs). `val` and `test` may be NULL.
 */
typedef struct tr_run_data {
    const tr_dataset *train, *val, *test;
    tr_batch_fn next_batch;
    void *ctx;
    int64_t c, h, w;
    int train_from_files;       /**< train is the config's files as tr_load_data read them (trainrun_trainer_open_data):
                                     data.augment pads with the normalised black pixel, as the run's own do      */
    tr_log_sink log;            /**< where console lines go instead of stderr (log.h); zero: stderr          */
    tr_clock clock;             /**< the run's time (log.h): every_seconds checkpoints, elapsed_s, progress
                                     cadence, samples/s; zero: CLOCK_MONOTONIC                                */
    const volatile sig_atomic_t *stop; /**< the caller's stop flag (a signal handler sets it): non-zero asks the
                                     run to stop as tr_run_request_stop does, read wherever the run checks for a
                                     stop (the loop, a rendezvous); NULL: none                                */
} tr_run_data;

/** Called with every event of the run's event path (event.h), in order, while the run holds the libtorch lock:
 * copy what you need (its strings and metrics are the run's), call no run function. */
typedef void (*tr_run_event_fn)(void *ctx, const tr_event *ev);

/**
 * Set the run up: threads and seed first, then data (`data`'s, or with data NULL the config's files), model,
 * optimizer, run directory, log, and a resume. *out is
 * set even on failure (NULL only when out of memory) and must be passed to tr_run_close. A run that resume finds
 * complete opens with TR_OK, summary.already_complete = 1 and nothing to step. Errors as tr_run.
 */
int tr_run_open(const tr_config *cfg, const tr_run_data *data, tr_run_state **out, tr_error *err);

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

/**
 * Report the run's end now, if it has not been reported: the summary is filled (tr_run_summary) and summary.json
 * written with status `rc` and err's message. tr_run_finish and tr_run_close do it too; a caller that reads the
 * summary of a run ended by an error before closing it calls this first.
 */
void tr_run_end(tr_run_state *run, int rc, const tr_error *err);

/**
 * Whether a run that ended with `rc` is to be started again at once: its first step after a resume failed and the
 * checkpoint was set aside (step-N.unresumable), in a one-process run that no stop was asked of. Each start sets
 * one checkpoint aside, so starting again ends. The ranks of a multi-process run leave that to the next start.
 * When it is, the run's log says so ("<err's message>; starting again").
 */
int tr_run_restart_due(tr_run_state *run, int rc, const tr_error *err);

/** Report every later event to fn(ctx, event); NULL turns it off. */
void tr_run_set_event_hook(tr_run_state *run, tr_run_event_fn fn, void *ctx);

/**
 * An evaluation outside the schedule: the scheduled evaluation pass (eval mode under no_grad, the weights
 * eval.weights names, an eval record and event) over the validation (test 0) or test (test 1) data, now; its
 * figures into *out (may be NULL). Model selection and early stopping are left alone. Errors: TR_E_CONFIG (the run
 * has ended, or has no such data), the pass's own.
 */
int tr_run_evaluate(tr_run_state *run, int test, tr_eval_figures *out, tr_error *err);

/** The summary so far (complete after tr_run_finish). Valid until tr_run_close. */
const tr_summary *tr_run_summary(const tr_run_state *run);

/** The optimizer steps the run plans in all (train.max_steps, or epochs x steps per epoch); 0 before set-up. */
int64_t tr_run_total_steps(const tr_run_state *run);

/**
 * Write summary.json if the run has not yet (with status `rc` and err's message), free everything, copy the
 * summary into *sum (may be NULL). NULL run: *sum is zeroed. Returns rc.
 */
int tr_run_close(tr_run_state *run, int rc, const tr_error *err, tr_summary *sum);

/**
 * What grew since the run's watchdog baseline, by (phase, size), largest first (memreport.h): *out is malloc'd
 * (free it), *n its length; both 0 / NULL before the baseline. TR_OK or TR_E_RUNTIME.
 */
int tr_run_memory_growth(tr_run_state *run, tr_mem_growth **out, size_t *n, tr_error *err);

#endif
