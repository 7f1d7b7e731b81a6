/*
 * trainrun.h -- libtrainrun, the embedding API: train PyTorch models (through libtorch) from a C program.
 *
 * Two levels:
 *   - a run (trainrun_run_*): everything `trainrun CONFIG.yaml` does -- data, loop, LR schedule, evaluation,
 *     crash-safe checkpoints and resume, the memory watchdog, metrics.jsonl -- driven to the end or a step at a
 *     time, with events (step, eval, checkpoint, watchdog) as they happen and a final summary;
 *   - a trainer (trainrun_trainer_*): the model and optimizer of a config, for the caller's own loop: a train or
 *     eval step on the caller's batch, set the lr, save and load checkpoints, memory statistics.
 * Data comes from the config's files, from the caller's arrays (trainrun_data_arrays: the run shuffles and
 * batches them exactly as it does file data) or from a next-batch callback (trainrun_data_callback).
 *
 * Only scalars come back: no tensor crosses this API, no C++ exception either.
 *
 * Conventions (after sqlite3.h):
 *   - every function that can fail returns an int status: TRAINRUN_OK (0) or one of the codes below;
 *   - handles are opaque and come in open/close pairs. An open function sets *out to a new handle even when it
 *     fails (unless memory ran out: then *out is NULL and it returns TRAINRUN_E_NOMEM), so the message can be read
 *     with trainrun_*_errmsg(); close it either way;
 *   - the message of the last failing call on a handle is read from the handle (trainrun_run_errmsg, ...); it is
 *     owned by the handle and valid until the next call on it. trainrun_errstr() names a status code;
 *   - NULL handles or pointers, wrong shapes, wrong dtype codes and calls out of order return
 *     TRAINRUN_E_INVALID and change nothing -- a batch whose per-sample shape does not fit the model is refused
 *     before the forward; a forward that fails inside libtorch returns TRAINRUN_E_RUNTIME; either way the handle
 *     stays usable for the next call;
 *   - closing NULL is a no-op that returns TRAINRUN_OK (as free(NULL)); closing a data source that an open run
 *     still uses returns TRAINRUN_E_BUSY and frees nothing (as sqlite3_close with statements open).
 *
 * Threads: each handle is used by one thread at a time. Different runs and trainers may be used from different
 * threads at once: libtorch's default CPU generator and thread settings are process-wide, so every call that runs
 * libtorch holds one process-wide lock with its handle's own generator state swapped in. Runs in two threads thus
 * interleave a step at a time and each produces, bit for bit, the loss trace it produces alone; they do not train
 * in parallel. Memory statistics (allocated bytes) are process-wide, so the watchdog of one run also sees the
 * tensors of the others. The config's process-wide settings (threads, interop_threads, deterministic, and
 * malloc_tuning, which pins glibc malloc's mmap and trim thresholds for the whole program) take effect when a run
 * is set up or a trainer opened; set malloc_tuning: false to leave your program's malloc alone.
 *
 * Devices: the config key `device` (cpu | cuda | cuda:N) says where the model, its optimizer state and EMA live.
 * Batches are host memory either way; on a CUDA device a step stages them in pinned memory and copies them with
 * non_blocking, and its scalars come back in one device-to-host copy, the step's one synchronisation (after
 * backward, before the optimizer step). `device: cuda` with a trainrun built against a CPU-only libtorch is refused
 * when the run is set up or the trainer opened (TRAINRUN_E_CONFIG, the message says so).
 *
 * Build: pkg-config --cflags --libs trainrun (its flags carry the run path to the install's lib/), or CMake
 * find_package(trainrun) and target trainrun::trainrun; static: pkg-config --cflags --libs trainrun-static.
 * The shared library links libtorch privately: programs need no libtorch headers or link flags.
 * Log lines: a run prints what the command line prints on stderr unless trainrun_run_set_log routes or silences
 * them.
 */
#ifndef TRAINRUN_H
#define TRAINRUN_H

#include <stddef.h>
#include <stdint.h>

#include <trainrun/trainrun_version.h> /* TRAINRUN_VERSION, generated from CMakeLists.txt's project(VERSION) */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ status codes */

/** Status codes. 1-4 and 9 equal the exit codes of the `trainrun` command line. */
enum trainrun_status {
    TRAINRUN_OK = 0,            /**< success                                                                   */
    TRAINRUN_E_RUNTIME = 1,     /**< I/O, data or libtorch failure                                             */
    TRAINRUN_E_CONFIG = 2,      /**< bad config, override or model spec, or a config that contradicts the data */
    TRAINRUN_E_WATCHDOG = 3,    /**< the run was stopped by the memory watchdog; a checkpoint was saved (a
                                     trainer's watchdog: the limit is reached, save and stop)                  */
    TRAINRUN_E_STOPPED = 4,     /**< the run was stopped by trainrun_run_stop(); a checkpoint was saved (a
                                     trainer's checkpoint_due after trainrun_trainer_request_stop: save, stop)  */
    TRAINRUN_E_INVALID = 6,     /**< invalid argument (NULL, shape, dtype code, range) or call out of order   */
    TRAINRUN_E_NOMEM = 7,       /**< out of memory                                                             */
    TRAINRUN_E_NONFINITE = 8,   /**< the loss was NaN or infinite: the optimizer step was skipped              */
    TRAINRUN_E_PEER = 9,        /**< a run of several processes (WORLD_SIZE > 1): another rank failed or hung   */
    TRAINRUN_E_BUSY = 10,       /**< trainrun_data_close: an open run still uses the data; nothing was freed      */
    TRAINRUN_E_LOCKED = 11,     /**< the first trainrun_run_step, trainrun_trainer_open_dir: another process (or
                                     open run or trainer) holds the run directory's lock (RUN_DIR/trainrun.lock):
                                     a run directory has one writer.
                                     The message names the holder's pid and host; nothing was written           */
    TRAINRUN_DONE = 100         /**< trainrun_run_step / trainrun_run_next_event: nothing more (not an error)  */
};

/** A short English description of a status code ("invalid argument"). Static storage; never NULL. */
const char *trainrun_errstr(int status);

/** The library's version, TRAINRUN_VERSION of the build. Static storage. */
const char *trainrun_version(void);

/* ------------------------------------------------------------------------------------------------ batches */

/** Element type codes of a batch view. 0 is no type, so a zeroed view is refused. */
enum trainrun_dtype {
    TRAINRUN_FLOAT32 = 1,       /**< IEEE-754 binary32, native byte order */
    TRAINRUN_INT64 = 2          /**< int64_t                              */
};

/**
 * A view of a batch in the caller's memory: nothing is copied until the call that takes it, and the memory must
 * stay valid during that call. Arrays are C-contiguous (row-major), native byte order.
 *   x:     the input, shape [shape[0] = N, ..., shape[ndim-1]], ndim 2 to 4:
 *            x_dtype TRAINRUN_FLOAT32: float features -- [N, D], [N, T, D], [N, C, H, W], matching the model
 *                                      spec's `input` (which is shape[1..ndim));
 *            x_dtype TRAINRUN_INT64:   int64 token ids, e.g. [N, T], for models that embed them (TorchScript).
 *   y:     the targets; their shape follows from the model's output [N, ...out] (trainrun_trainer_output_shape):
 *            y_dtype TRAINRUN_INT64:   class indices for cross_entropy: [N] for outputs [N, C], [N, T] for
 *                                      outputs [N, T, C]; each in [0, C), or -100 (TRAINRUN_IGNORE_INDEX: left out
 *                                      of the loss's mean and of the counts, as PyTorch's ignore_index);
 *            y_dtype TRAINRUN_FLOAT32: float targets of the output's shape ([N, K]): multi-hot 0/1 per class
 *                                      (train.loss: bce_with_logits) or regression values (mse, smooth_l1).
 *          NULL for trainrun_trainer_predict, which reads only x.
 * (Up to 0.1.0 only FLOAT32 [N, D] / [N, C, H, W] inputs with INT64 [N] labels were taken; the layout is unchanged.)
 */
typedef struct trainrun_batch {
    const void *x;
    int x_dtype;
    int ndim;
    int64_t shape[4];
    const void *y;
    int y_dtype;
} trainrun_batch;

/** The class index that cross_entropy ignores (PyTorch's default ignore_index). */
#define TRAINRUN_IGNORE_INDEX (-100)

/** What a step returns: scalars only. */
typedef struct trainrun_step_result {
    double loss;          /**< mean loss over the batch (the float32 value as a double)                       */
    int64_t samples;      /**< N                                                                              */
    int64_t correct;      /**< cross_entropy: targets whose highest logit is at the label (per position for
                               [N, T] labels; -100 positions not counted); bce_with_logits: samples with every
                               class right (logit > 0 <=> target > 0.5); regression: 0                        */
    double accuracy;      /**< correct / targets counted (N, or the positions of [N, T] labels that are not -100) */
    double grad_norm;     /**< train step with optim.grad_clip_norm > 0: global L2 gradient norm before
                               clipping (torch.nn.utils.clip_grad_norm_); otherwise 0                        */
} trainrun_step_result;

/* ------------------------------------------------------------------------------------------------ data */

/** A data source supplied by the caller: arrays (copied) or a next-batch callback. */
typedef struct trainrun_data trainrun_data;

/**
 * A data set from arrays: `all` views all N samples ([N, D] or [N, C, H, W] float32 features and [N] int64
 * labels), which are copied, so the caller's arrays may be freed on return. A run given it as training data
 * shuffles it every epoch with the same permutation as file data (a pure function of the config's seed and the
 * epoch) and batches it by train.batch_size; as validation or test data it is evaluated in order. The features are
 * used as given (the config's data.mean / data.std apply to files only).
 * Errors: TRAINRUN_E_INVALID (NULL, ndim not 2 or 4, a size < 1, a dtype code other than FLOAT32 / INT64, a
 * negative label), TRAINRUN_E_NOMEM.
 */
int trainrun_data_arrays(const trainrun_batch *all, trainrun_data **out);

/**
 * trainrun_data_arrays with the targets' kind said: target_cols 0 takes all->y as INT64 class indices [N] (as
 * trainrun_data_arrays); target_cols K >= 1 takes all->y as FLOAT32 targets [N, K] -- multi-hot 0/1 for a config
 * with train.loss: bce_with_logits, regression values for mse / smooth_l1 (K must equal the model's outputs; the
 * run checks it at set-up). Inputs: FLOAT32 as in trainrun_data_arrays. Copied; the caller's arrays may be freed.
 * Errors: those of trainrun_data_arrays; TRAINRUN_E_INVALID for a y_dtype that does not fit target_cols, a
 * target_cols < 0, or a non-finite target.
 */
int trainrun_data_arrays_targets(const trainrun_batch *all, int64_t target_cols, trainrun_data **out);

/**
 * The training batch for optimizer step `step` (0-based; a resumed run continues at the step after its
 * checkpoint, so a batch that is a pure function of `step` makes a resume exact), of at most `batch_size`
 * (train.batch_size) samples: fill *batch with a view valid until the next call or the end of the run.
 * Return 0, or nonzero to fail the run with TRAINRUN_E_RUNTIME. It runs inside trainrun_run_step holding the
 * library's lock: it must not call trainrun functions.
 */
typedef int (*trainrun_batch_fn)(void *ctx, int64_t step, int64_t batch_size, trainrun_batch *batch);

/**
 * A training data source that calls fn(ctx, ...) for every batch. sample_shape: the per-sample shape, [D]
 * (sample_ndim 1) or [C, H, W] (sample_ndim 3); every batch must have it. A run fed by a callback needs
 * train.max_steps > 0 (a callback has no epochs). Errors: TRAINRUN_E_INVALID (NULL fn or shape, bad ndim or size).
 */
int trainrun_data_callback(trainrun_batch_fn fn, void *ctx, const int64_t *sample_shape, int sample_ndim,
                           trainrun_data **out);

/** Message of the last failing call on `data` ("" if none; a static message for NULL). */
const char *trainrun_data_errmsg(const trainrun_data *data);

/**
 * Free a data source; NULL is a no-op (TRAINRUN_OK). Errors: TRAINRUN_E_BUSY when a run it was given to
 * (trainrun_run_set_data) is still open -- nothing is freed; close the run first, then the data.
 */
int trainrun_data_close(trainrun_data *data);

/* ------------------------------------------------------------------------------------------------ runs */

/** A training run: what `trainrun CONFIG.yaml` does, driven by the caller. */
typedef struct trainrun_run trainrun_run;

/**
 * Open a run from the YAML config file at `config_path`, then `n_overrides` "key.path=value" overrides applied in
 * order (as on the command line; NULL with 0). Relative paths in the config resolve against its directory.
 * Nothing is loaded or trained yet: trainrun_run_set_data and trainrun_run_set_callback may follow; the first
 * trainrun_run_step sets the run up.
 * Errors: TRAINRUN_E_CONFIG ("FILE:LINE:COL: key.path: message", or "override 'k=v': ..."), TRAINRUN_E_INVALID
 * (NULL path or out, n_overrides < 0, NULL overrides with n_overrides > 0), TRAINRUN_E_NOMEM.
 */
int trainrun_run_open(const char *config_path, const char *const *overrides, int n_overrides, trainrun_run **out);

/** trainrun_run_open for YAML text; relative paths in it resolve against the working directory. */
int trainrun_run_open_yaml(const char *yaml, const char *const *overrides, int n_overrides, trainrun_run **out);

/** Which part of a run's data trainrun_run_set_data supplies. */
enum trainrun_split {
    TRAINRUN_TRAIN = 1,         /**< training data: arrays or a callback; replaces the config's files      */
    TRAINRUN_VAL = 2,           /**< validation data (arrays): replaces the split carved by data.val_size */
    TRAINRUN_TEST = 3           /**< test data (arrays), evaluated at the end when eval.test_at_end       */
};

/**
 * Use the caller's data for `split` instead of the config's files. Supplying TRAIN makes the run use caller data
 * only: then VAL and TEST are what the caller supplies (none by default). Must come before the first
 * trainrun_run_step; `data` must stay open until the run is closed. Arrays are the caller's as given (data.augment's
 * crop pads with 0); sources from trainrun_trainer_open_data are the config's files, normalised, and their crop
 * pads with the normalised black pixel, as the run's own files do -- so a run given them trains as one that reads
 * them. Errors: TRAINRUN_E_INVALID (NULL, unknown split, a callback for VAL or TEST, a call after the first step).
 */
int trainrun_run_set_data(trainrun_run *run, int split, trainrun_data *data);

/** Kinds of events. */
enum trainrun_event_kind {
    TRAINRUN_EVENT_STEP = 1,        /**< an optimizer step was taken                                          */
    TRAINRUN_EVENT_EVAL = 2,        /**< an evaluation pass over validation or test data ended                */
    TRAINRUN_EVENT_CHECKPOINT = 3,  /**< a checkpoint was saved                                                */
    TRAINRUN_EVENT_WATCHDOG = 4,    /**< the memory watchdog took its baseline, warned, or reached its limit   */
    TRAINRUN_EVENT_WARNING = 5      /**< something the caller should know that is not an error (a trainer's run
                                         directory: a damaged checkpoint skipped, one set aside, a lock the file
                                         system does not enforce, the checkpoint init.from's run directory gave) */
};

/** Watchdog reports (trainrun_event.watchdog). */
enum trainrun_watchdog_kind {
    TRAINRUN_WATCHDOG_BASELINE = 1, /**< baseline taken: allocated bytes once warm-up is over                  */
    TRAINRUN_WATCHDOG_WARN = 2,     /**< allocated crossed watchdog.warn_ratio x baseline                      */
    TRAINRUN_WATCHDOG_LIMIT = 3     /**< the hard limit is reached or would be by the next sample              */
};

/**
 * One event. `kind`, `step` (optimizer steps done, after the event's step) and `epoch` (0-based) are always set;
 * the rest per kind, 0 / NULL otherwise:
 *   STEP:       loss (the step's mean batch loss), lr (the lr it used), samples, correct, accuracy (correct over
 *               the labels counted: N, or N x T positions less -100s), grad_norm
 *   EVAL:       split ("val" / "test"), loss (mean per sample over the whole split), samples, correct, accuracy,
 *               seconds (wall time of the pass)
 *   CHECKPOINT: reason ("steps", "interval", "best", "end", "signal" for a stop, "watchdog"; a trainer's save
 *               nothing asked for: "manual"), path (its directory), bytes (written), seconds (to save)
 *   WATCHDOG:   watchdog (a trainrun_watchdog_kind), allocated_bytes, baseline_bytes, limit_bytes (0: none),
 *               growth_per_step (bytes per optimizer step, least-squares fit over watchdog.window samples),
 *               steps_left (steps until the limit at that growth; -1: not growing or no limit)
 *   WARNING:    message
 * Strings are valid until the next call on the run (or the trainer: trainrun_trainer_set_callback).
 */
typedef struct trainrun_event {
    int kind;
    int64_t step;
    int64_t epoch;
    double loss;
    double lr;
    int64_t samples;
    int64_t correct;
    double accuracy;
    double grad_norm;
    const char *split;
    double seconds;
    const char *reason;
    const char *path;
    int64_t bytes;
    int watchdog;
    int64_t allocated_bytes;
    int64_t baseline_bytes;
    int64_t limit_bytes;
    double growth_per_step;
    double steps_left;
    int64_t reserved_bytes;     /**< WATCHDOG: bytes the caching allocator holds (live + cached blocks)      */
    int64_t rss_bytes;          /**< WATCHDOG: the process's resident set size                               */
    const char *message;        /**< WARNING: one line, what happened and to which file                      */
} trainrun_event;

/** Receives events; see trainrun_run_set_callback and trainrun_trainer_set_callback. */
typedef void (*trainrun_event_fn)(void *ctx, const trainrun_event *event);

/**
 * Call fn(ctx, event) for every event, in order, on the thread that calls trainrun_run_step / trainrun_run_wait,
 * after the step that produced it (outside the library's lock, so fn may call trainrun functions, including
 * trainrun_run_stop on this run). NULL fn turns it off. Errors: TRAINRUN_E_INVALID (NULL run).
 */
int trainrun_run_set_callback(trainrun_run *run, trainrun_event_fn fn, void *ctx);

/** What a log line is (trainrun_log_fn). */
enum trainrun_log_kind {
    TRAINRUN_LOG_MESSAGE = 1,   /**< start-up, resume, evaluation, checkpoint and watchdog lines, warnings      */
    TRAINRUN_LOG_PROGRESS = 2   /**< a progress line: "YYYY-MM-DD HH:MM:SS  step S/T  epoch E  loss L ...",
                                     every 10 s and at the last step (none with log.progress: never)          */
};

/** Receives the run's log lines; see trainrun_run_set_log. `line` has no newline and is valid during the call. */
typedef void (*trainrun_log_fn)(void *ctx, int kind, const char *line);

/**
 * Route the run's log lines -- the lines the `trainrun` command prints on stderr -- to fn(ctx, kind, line)
 * (kind: a trainrun_log_kind) instead of the program's stderr; fn NULL silences them. Without this call a run
 * writes them to stderr as the command line does (a progress line that rewrites itself when stderr is a
 * terminal, unless log.progress: never). fn is called on the thread that steps the run while the library's
 * lock is held: copy the line and call no trainrun function from it. Records still go to metrics.jsonl.
 * Must come before the first trainrun_run_step. Errors: TRAINRUN_E_INVALID (NULL run, a call after the first
 * step).
 */
int trainrun_run_set_log(trainrun_run *run, trainrun_log_fn fn, void *ctx);

/**
 * A clock: seconds now on a monotonic scale (any origin; only differences are used), as a double. Called on the
 * thread that drives the run or trainer, with the library's lock held: return at once, call no trainrun function.
 */
typedef double (*trainrun_clock_fn)(void *ctx);

/**
 * Take every time the run reads from now(ctx) instead of the monotonic clock (CLOCK_MONOTONIC): the training
 * seconds that checkpoint.every_seconds counts and checkpoints carry, the records' time_s, samples/s and step and
 * evaluation seconds, the progress line's 10 s cadence. A regression test that steps a fake clock gets its interval
 * checkpoints at exact steps. A background save still times its writing on the monotonic clock. now NULL: the
 * monotonic clock again. Must come before the first trainrun_run_step. Errors: TRAINRUN_E_INVALID (NULL run, a
 * call after the first step).
 */
int trainrun_run_set_clock(trainrun_run *run, trainrun_clock_fn now, void *ctx);

/**
 * Take one optimizer step with everything due after it (log record, validation, watchdog sample, checkpoint).
 * The first call sets the run up: threads, seed, data, model, optimizer, run directory, and a resume from the
 * newest valid checkpoint when the config says so (run.name set, run.resume: auto). Returns:
 *   TRAINRUN_OK     a step was taken; its events can be read with trainrun_run_next_event;
 *   TRAINRUN_DONE   the run has ended -- all steps taken, a stop requested, or the watchdog stopped it -- and has
 *                   saved its last checkpoint, run the test evaluation and written summary.json; no step was taken.
 *                   Read trainrun_run_summary (its status says which end); the end's own events (the last
 *                   checkpoint, the test evaluation) can be read with trainrun_run_next_event. Later calls return
 *                   TRAINRUN_DONE again;
 *   an error        TRAINRUN_E_CONFIG (set-up: bad model spec, config contradicting the data),
 *                   TRAINRUN_E_LOCKED (set-up: another process writes the run directory; nothing was written),
 *                   TRAINRUN_E_RUNTIME (I/O, data, libtorch, a failing batch callback); the run has ended.
 * Errors also: TRAINRUN_E_INVALID (NULL run).
 */
int trainrun_run_step(trainrun_run *run);

/**
 * Read the next event of the last trainrun_run_step into *event: TRAINRUN_OK, or TRAINRUN_DONE when there is none
 * left. Events not read are dropped by the next step. With a callback set, events go to it instead.
 * Errors: TRAINRUN_E_INVALID (NULL).
 */
int trainrun_run_next_event(trainrun_run *run, trainrun_event *event);

/**
 * Step the run to its end (events go to the callback). Returns TRAINRUN_OK when it completed,
 * TRAINRUN_E_STOPPED or TRAINRUN_E_WATCHDOG when it ended early (checkpoint saved, summary filled), or an error
 * as trainrun_run_step.
 */
int trainrun_run_wait(trainrun_run *run);

/**
 * Ask the run to stop cleanly after its current step: it saves a checkpoint and ends with status
 * TRAINRUN_E_STOPPED; reopening the same config (run.name set) resumes it exactly. Only sets a flag: callable from
 * another thread, a signal handler or an event callback. Errors: TRAINRUN_E_INVALID (NULL).
 */
int trainrun_run_stop(trainrun_run *run);

/** The figures of one evaluation (trainrun_run_evaluate). Fractions in [0, 1]; losses are the mean per sample. */
typedef struct trainrun_eval_result {
    int64_t step;              /**< optimizer steps taken when it ran                                         */
    int64_t samples;           /**< samples evaluated                                                         */
    double loss;               /**< mean loss                                                                 */
    double accuracy;           /**< cross_entropy: accuracy; bce_with_logits: subset accuracy; else 0         */
    double top_k_accuracy;     /**< with eval.top_k; else 0                                                   */
    double micro_f1, macro_f1; /**< bce_with_logits; else 0                                                   */
    double mse, mae;           /**< mse / smooth_l1; else 0                                                   */
} trainrun_eval_result;

/** What a run reports at its end. Accuracies are fractions in [0, 1]; times in seconds; memory in bytes. */
typedef struct trainrun_summary {
    int status;                 /**< TRAINRUN_OK (completed), TRAINRUN_E_STOPPED, TRAINRUN_E_WATCHDOG          */
    int already_complete;       /**< 1: a resume found the run finished; nothing was trained or written        */
    char run_dir[1024];         /**< directory of config.yaml, metrics.jsonl, summary.json, checkpoints/       */
    int64_t params;             /**< parameter elements                                                        */
    int64_t steps;              /**< optimizer steps taken, over every process of the run                      */
    int64_t epochs;             /**< epochs started                                                            */
    double train_seconds;       /**< wall time in the training loop, evaluation included                       */
    double samples_per_s;       /**< training samples / seconds spent in train steps                           */
    double last_loss;           /**< mean training loss over the last log window                               */
    int has_val;                /**< val_loss and val_accuracy are set                                         */
    double val_loss, val_accuracy;
    int has_test;               /**< test_loss, test_accuracy and test_samples are set                         */
    double test_loss, test_accuracy;
    int64_t test_samples;
    int64_t baseline_bytes;     /**< watchdog baseline; 0 if never taken                                       */
    int64_t final_bytes;        /**< allocated bytes at the end of the loop (process-wide)                     */
    int64_t peak_bytes;         /**< peak allocated bytes (process-wide)                                       */
    double growth_per_step;     /**< the watchdog's last fitted growth, bytes per step                         */
    int64_t final_reserved_bytes; /**< reserved bytes at the end of the loop: the CPU caching allocator's live and
                                     cached blocks, or on a CUDA device torch.cuda.memory_reserved            */
    char device[32];            /**< where the run trained: "cpu" or "cuda:N" (config key `device`)            */
    int64_t peak_reserved_bytes; /**< peak reserved bytes of the CPU allocator (process-wide); -1 on CUDA       */
    int64_t final_rss_bytes;    /**< the process's resident set size at the end of the loop                    */
    int64_t peak_rss_bytes;     /**< the process's peak resident set size (getrusage ru_maxrss)                */
    double epochs_completed;    /**< steps / steps per epoch: epochs' worth of batches trained (0: no epochs)  */
    int64_t baseline_step;      /**< the optimizer step the watchdog baseline was taken at (with baseline_bytes) */
    int64_t warmup_steps;       /**< watchdog.warmup_steps: no baseline before this many steps                 */
    char eval_split[8];         /**< the split periodic evaluation ran on: "val", or "test" with eval.split    */
    int task;                   /**< a trainrun_task: which figures of a trainrun_eval_result mean something   */
    int top_k;                  /**< eval.top_k (0: off)                                                       */
    int has_val_live, has_val_ema, has_test_live, has_test_ema; /**< which of the four below ran in this process */
    trainrun_eval_result val_live; /**< the last periodic evaluation (on eval_split) with the live weights      */
    trainrun_eval_result val_ema;  /**< the same with the EMA weights (ema.enabled, eval.weights: ema or both)  */
    trainrun_eval_result test_live, test_ema; /**< the test set at the end (eval.test_at_end), per weights     */
    int world_size;             /**< processes of the run (1: one; WORLD_SIZE, trainrun --nproc)              */
    int rank;                   /**< this process's rank (0 in a one-process run; rank 0 writes the run dir)  */
    double allreduce_seconds;   /**< this process's seconds waiting for all-reduce collectives in the loop     */
    double allreduce_share;     /**< allreduce_seconds / this process's seconds in train steps, in [0, 1]      */
    int early_stopped;          /**< 1: early_stopping ended the run (status TRAINRUN_OK)                      */
    char stop_reason[320];      /**< why, in words ("" when it did not, or an earlier process stopped it)      */
    int64_t best_step;          /**< checkpoint.monitor: the best checkpoint's step; -1 without one            */
    double best_score;          /**< its score by best_monitor (NaN without one)                               */
    char best_monitor[40];      /**< the metric it is best by ("val_loss", "val_accuracy", ...)                */
} trainrun_summary;

/** What a run's loss makes of it, and so which evaluation figures mean something (trainrun_summary.task). */
enum trainrun_task {
    TRAINRUN_TASK_CLASSIFICATION = 0, /**< cross_entropy: accuracy, top_k_accuracy                               */
    TRAINRUN_TASK_MULTILABEL = 1,     /**< bce_with_logits: accuracy (subset), micro_f1, macro_f1                 */
    TRAINRUN_TASK_REGRESSION = 2      /**< mse, smooth_l1: mse, mae                                               */
};

/**
 * Evaluate now, outside the schedule -- a validation figure at the application's own moment: the run's scheduled
 * evaluation pass (model in eval mode under no_grad, train mode restored after; the weights eval.weights names;
 * an eval record in metrics.jsonl and a TRAINRUN_EVENT_EVAL event, as a scheduled evaluation gives) over `split`
 * (TRAINRUN_VAL or TRAINRUN_TEST), with its scalars into *out. The training is unchanged by it: the next steps,
 * model selection (checkpoint.monitor) and early stopping are what they would have been. Before the first
 * trainrun_run_step it sets the run up first (as that step would). Errors: TRAINRUN_E_INVALID (NULL run or out, a
 * split other than VAL / TEST, a run that has ended), TRAINRUN_E_CONFIG (no data for that split, or the set-up's
 * own errors), TRAINRUN_E_RUNTIME, TRAINRUN_E_NOMEM.
 */
int trainrun_run_evaluate(trainrun_run *run, int split, trainrun_eval_result *out);

/**
 * The summary of an ended run into *out. Errors: TRAINRUN_E_INVALID (NULL, or the run has not ended: step it to
 * TRAINRUN_DONE or call trainrun_run_wait first).
 */
int trainrun_run_summary(trainrun_run *run, trainrun_summary *out);

/**
 * One (phase, size) key of the memory that grew since a baseline: live tensor storages allocated in `phase` with
 * `block_bytes` bytes each, and how many more of them are alive now than at the baseline. The CPU counterpart of
 * diffing two torch.cuda.memory_snapshot()s.
 */
typedef struct trainrun_memory_growth {
    const char *phase;          /**< where they were allocated: "train forward", "backward", "optimizer step",
                                     "metrics", "eval", "EMA update", "checkpoint", "outside any step" (static) */
    int64_t block_bytes;        /**< bytes each block's storage requested                                      */
    int64_t blocks;             /**< live blocks now minus live blocks at the baseline (> 0)                   */
    int64_t bytes;              /**< live bytes now minus at the baseline (blocks * block_bytes)               */
    double bytes_per_step;      /**< bytes / optimizer steps since the baseline (0 when none has passed)       */
    double blocks_per_step;     /**< blocks / optimizer steps since the baseline                               */
} trainrun_memory_growth;

/**
 * What grew since the run's watchdog baseline (taken once warm-up is over: see watchdog.warmup_steps), largest
 * growth first: up to `cap` keys into out[], the number of keys that grew into *count (0 before the baseline and
 * in a clean run). Call it between steps, or from the event callback; not concurrently with trainrun_run_step on
 * the same run. Process-wide memory: with several runs in one process, their growth shows in each other's lists.
 * Errors: TRAINRUN_E_INVALID (run or count NULL, out NULL with cap > 0), TRAINRUN_E_NOMEM.
 */
int trainrun_run_memory_growth(trainrun_run *run, trainrun_memory_growth *out, size_t cap, size_t *count);

/** Message of the last failing call on `run` ("" if none; a static message for NULL). */
const char *trainrun_run_errmsg(const trainrun_run *run);

/**
 * Free the run. A run closed before its end writes summary.json with what it has, but saves no checkpoint (call
 * trainrun_run_stop and step to TRAINRUN_DONE for that). The data sources it was given are released (they can be
 * closed afterwards). NULL is a no-op; always returns TRAINRUN_OK.
 */
int trainrun_run_close(trainrun_run *run);

/* ------------------------------------------------------------------------------------------------ trainers */

/**
 * The model and optimizer of a config, for the caller's own loop -- and the run's guarantees, one call each. A
 * custom loop that keeps every guarantee of trainrun_run calls, per optimizer step and in this order:
 *
 *   trainrun_trainer_scheduled_lr + trainrun_trainer_set_lr   the config's schedule (or the caller's own lr)
 *   trainrun_trainer_train_step                               one step; only scalars come back
 *   trainrun_trainer_update_ema                               ema.enabled: the EMA, by ema.start_step/every_steps
 *   (when it evaluates: trainrun_trainer_evaluate on a whole split, live or EMA weights, no_grad -- a run's
 *    evaluation pass -- or trainrun_trainer_eval_step / _eval_step_ema on its own batches)
 *   (after an evaluation: trainrun_trainer_monitor per monitored figure -- top-k, plateau, early stopping)
 *   trainrun_trainer_watchdog                                 the memory watchdog; TRAINRUN_E_WATCHDOG: save, stop
 *   trainrun_trainer_checkpoint_due -> trainrun_trainer_save  the top-k's best, checkpoint.every_steps /
 *                                                             every_seconds, a stop request (TRAINRUN_E_STOPPED:
 *                                                             save, then stop); then stop if monitor said stop
 *                                                             (or _save_background: written on a saver thread,
 *                                                             its outcome from the next checkpoint_due or
 *                                                             _save_wait -- call _save_wait before exiting)
 *
 * and, at start, trainrun_trainer_set_callback for the events a run reports (steps, watchdog reports, saves,
 * warnings) and trainrun_trainer_open_dir on the loop's run directory: one writer, the newest valid checkpoint
 * resumed (trainrun_trainer_load on a checkpoint directory does only the resume); a signal handler calls
 * trainrun_trainer_request_stop; trainrun_trainer_open_log writes the run's metrics.jsonl and metrics.csv (or the
 * caller logs on its own). A checkpoint carries the weights, the optimizer state, the EMA, the generator state, the
 * step count, the data position, the training seconds and the model selection's state (top-k set, early stopping,
 * plateau schedule), so a loop killed at any point (SIGKILL included) and started again from its newest checkpoint
 * repeats the uninterrupted loop bit for bit, provided its batches are a function of the step
 * (examples/custom_loop.c) or of the data position it carries (trainrun_trainer_set_data_position). The batches and
 * the evaluation data are the caller's; trainrun_trainer_init_process_group makes the loop data-parallel.
 */
typedef struct trainrun_trainer trainrun_trainer;

/**
 * Open a trainer from the config file at `config_path` plus overrides (as trainrun_run_open): seeds libtorch's
 * generator with `seed`, builds the model of model.spec, the optimizer of optim.* (lr: the schedule's first,
 * optim.lr without warm-up), the step options (train.label_smoothing, optim.grad_clip_norm), the EMA
 * (ema.enabled) and the watchdog (watchdog.*). No data, run directory or log: the caller's loop does that (the
 * schedule and the checkpoint policy are calls). Errors: TRAINRUN_E_CONFIG (config, model spec),
 * TRAINRUN_E_INVALID, TRAINRUN_E_RUNTIME, TRAINRUN_E_NOMEM.
 */
int trainrun_trainer_open(const char *config_path, const char *const *overrides, int n_overrides,
                          trainrun_trainer **out);

/** trainrun_trainer_open for YAML text; relative paths in it resolve against the working directory. */
int trainrun_trainer_open_yaml(const char *yaml, const char *const *overrides, int n_overrides,
                               trainrun_trainer **out);

/**
 * Join the data-parallel group the environment names, as torch.distributed.init_process_group with torchrun's
 * variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; c10d over Gloo, within dist.timeout_seconds),
 * with a run's semantics (docs/data_parallel.md, after DistributedDataParallel):
 *   - rank 0's parameters and buffers are broadcast now, so every rank starts from the same model;
 *   - each train step averages the gradients over the ranks (in buckets of dist.bucket_cap_mb) and all-reduces
 *     its scalars: the result's loss is the mean over every rank's samples, its counts the sums -- the same on
 *     every rank. Each rank gives its own shard of the global batch (trainrun_trainer_rank says which);
 *   - the step also carries each rank's requests (trainrun_trainer_request_stop, the watchdog's limit, the
 *     checkpoint interval), so trainrun_trainer_checkpoint_due and trainrun_trainer_watchdog say the same on every
 *     rank at the same step (a rank's own request takes effect at the next step);
 *   - every rank calls every call in the same order (a save gathers every rank's generator into the checkpoint;
 *     open_dir is rank 0's choice, shared); rank 0 alone takes the directory's lock and writes checkpoints, the log
 *     and best.json. trainrun_trainer_evaluate and _monitor are each rank's own: give every rank the same data.
 * With WORLD_SIZE unset or 1 it joins nothing and the trainer trains alone, so one program runs either way. Call it
 * once, right after open (before open_dir and the first step). Errors: TRAINRUN_E_INVALID (NULL, a second call,
 * after open_dir or a step), TRAINRUN_E_CONFIG (a malformed or missing variable, named), TRAINRUN_E_PEER (the
 * rendezvous failed within dist.timeout_seconds, or broadcasting the parameters did). A collective that fails
 * later (a rank died or hung) makes the call that ran it return TRAINRUN_E_PEER.
 */
int trainrun_trainer_init_process_group(trainrun_trainer *trainer);

/** This process's rank and the group's size (0 and 1 for a trainer alone). Either pointer may be NULL. Errors:
 *  TRAINRUN_E_INVALID (NULL trainer). */
int trainrun_trainer_rank(trainrun_trainer *trainer, int *rank, int *world_size);

/**
 * One optimization step on the caller's batch: zero_grad, forward in train mode, the config's train.loss
 * (cross_entropy on INT64 class indices; bce_with_logits, mse or smooth_l1 on FLOAT32 targets -- see
 * trainrun_batch), backward, optional gradient clipping, optimizer step; the scalars into *res. With
 * train.accumulate_steps A > 1 the batch is split into A micro-batches of ceil(N / A) samples, each backward scaled
 * by its share of N, so the gradients are the whole batch's mean loss's (a run's step takes batch_size x A samples
 * and does the same: give the trainer those). Returns
 * TRAINRUN_OK; TRAINRUN_E_NONFINITE (loss NaN/inf: no step taken, *res filled); TRAINRUN_E_INVALID (NULL, ndim
 * not 2..4, a size < 1, an unknown dtype code or one that does not fit the loss, a per-sample shape other than the
 * model spec's `input`, a label out of range, outputs that cannot meet the targets); TRAINRUN_E_RUNTIME (libtorch
 * failed inside the step). On any error nothing was changed and the trainer stays usable: the message says what
 * was wrong (for a non-finite loss, also what to try: a lower optim.lr, gradient clipping). When it is the first
 * step after trainrun_trainer_open_dir resumed a checkpoint saved with this config, the message says so: if the
 * batch is the one that step took before, the checkpoint's state is what is wrong (it trained finitely before it
 * was saved), and trainrun_trainer_set_aside_resumed sets it aside. The trainer cannot tell a bad checkpoint from
 * a bad batch, so it renames nothing itself (a run, whose batches are the config's, does: docs/run_directory.md).
 */
int trainrun_trainer_train_step(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res);

/**
 * Evaluate one batch in eval mode under no_grad (train mode is restored after; gradients and optimizer state are
 * untouched). Errors as trainrun_trainer_train_step, without TRAINRUN_E_NONFINITE.
 */
int trainrun_trainer_eval_step(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res);

/**
 * Predict: run the model on batch->x alone -- inputs without labels, the usual case for predictions: batch->y
 * and y_dtype are not read and may be NULL / 0 -- in eval mode under no_grad -- dropout
 * off, BatchNorm on its running statistics, no gradient recorded, train mode restored after -- and copy its
 * outputs into the caller's buffer: out[0 .. N x P) float32, row-major, where P = trainrun_trainer_output_size
 * (C logits per sample for [N, C] outputs, T x C for [N, T, C]; regression values for mse / smooth_l1). Raw
 * outputs: no softmax or sigmoid is applied. Nothing is kept and nothing is to be freed: every tensor of the call
 * dies before it returns, so repeated calls leave allocated bytes where they were.
 * out_count: floats out has room for; must be >= N x P.
 * Errors: TRAINRUN_E_INVALID (NULL trainer, batch or out; a bad x shape or dtype; out_count too small -- the
 * message names the count needed; nothing is written then), TRAINRUN_E_RUNTIME (the forward failed inside
 * libtorch; the trainer stays usable), TRAINRUN_E_NOMEM.
 * `trainrun predict` is this call over a run's test data, labeled or not: test inputs without targets give rows of
 * predictions and no accuracy -- npy: data.test_inputs without data.test_targets; idx: data.test_images with
 * data.test_labels empty; csv: a data.test_csv without the target columns (the training table's columns less
 * data.target_columns) and no data.test_targets; image folders: --images DIR.
 */
int trainrun_trainer_predict(trainrun_trainer *trainer, const trainrun_batch *batch, float *out, size_t out_count);

/**
 * Generate: sample n_new token ids after prompt[0 .. n_prompt) into the caller's out[0 .. n_new) (int64; nothing is
 * kept, nothing to free), for a language model -- int64 token ids [N, T] in, logits [N, T, V] out (e.g.
 * models/gpt.pt). Each id is drawn from softmax(logits of the last position / temperature), restricted to the
 * top_k most likely ids when top_k > 0 (1 = greedy argmax), given the last T ids so far (nanoGPT's sample.py), in
 * eval mode under no_grad, from a generator of its own seeded with `seed`: the same trainer state, prompt and
 * arguments give the same ids, and the training's random stream is untouched. Decoding ids to text is the
 * vocabulary's business (a run's RUN_DIR/vocab.json; `trainrun sample` does both).
 * Errors: TRAINRUN_E_INVALID (NULL trainer, prompt or out; n_prompt < 1; n_new < 0; a prompt id outside [0, V);
 * temperature <= 0 or not finite; top_k < 0; a model that does not map int64 [N, T] ids to [N, T, V] logits),
 * TRAINRUN_E_RUNTIME (the forward failed inside libtorch; the trainer stays usable), TRAINRUN_E_NOMEM.
 */
int trainrun_trainer_generate(trainrun_trainer *trainer, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                              double temperature, int64_t top_k, uint64_t seed, int64_t *out);

/**
 * The model's per-sample output shape: *ndim gets its rank (1 for [C], 2 for [T, C]; at most 7) and shape[0 ..
 * *ndim) its sizes (shape must have room for 8). Either pointer may be NULL. Errors: TRAINRUN_E_INVALID (NULL
 * trainer, a trainer that failed to open).
 */
int trainrun_trainer_output_shape(trainrun_trainer *trainer, int64_t *shape, int *ndim);

/** Floats per sample that trainrun_trainer_predict writes (the product of the output shape) into *count. */
int trainrun_trainer_output_size(trainrun_trainer *trainer, int64_t *count);

/** Set the learning rate for the following steps (lr >= 0, finite). Errors: TRAINRUN_E_INVALID. */
int trainrun_trainer_set_lr(trainrun_trainer *trainer, double lr);

/** Optimizer steps taken by this trainer (restored by trainrun_trainer_load) into *steps. */
int trainrun_trainer_steps(trainrun_trainer *trainer, int64_t *steps);

/**
 * The config's learning-rate schedule for the step about to be taken (the trainer's step count + 1): schedule.name
 * constant, step, cosine, linear, ... with schedule.warmup_steps, from optim.lr, exactly as a run of `total_steps`
 * optimizer steps (`steps_per_epoch` for the epoch-based keys; 0 when the loop has no epochs) would use it. Pass it
 * to trainrun_trainer_set_lr. schedule.name plateau: the plateau schedule's current lr (optim.lr until
 * trainrun_trainer_monitor lowers it), scaled by warm-up. Errors: TRAINRUN_E_INVALID (NULL, total_steps < 1,
 * steps_per_epoch < 0).
 */
int trainrun_trainer_scheduled_lr(trainrun_trainer *trainer, int64_t total_steps, int64_t steps_per_epoch,
                                  double *lr);

/**
 * With ema.enabled in the config the trainer keeps an exponential moving average of the weights (ema.decay,
 * ema.warmup as TensorFlow's num_updates, ema.buffers), updated under no_grad. Call this after each train step: at
 * ema.start_step (> 0) the EMA becomes a fresh copy of the weights, after it an update every ema.every_steps steps,
 * otherwise nothing happens (nothing either without ema.enabled). trainrun_trainer_save / _load carry it.
 * Errors: TRAINRUN_E_INVALID (NULL), TRAINRUN_E_RUNTIME (libtorch failed in the update).
 */
int trainrun_trainer_update_ema(trainrun_trainer *trainer);

/**
 * trainrun_trainer_eval_step with the EMA's weights (the live weights are untouched). Errors as eval_step, and
 * TRAINRUN_E_INVALID when the config has no ema.enabled.
 */
int trainrun_trainer_eval_step_ema(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res);

/** The weights trainrun_trainer_evaluate uses. */
enum trainrun_weights {
    TRAINRUN_WEIGHTS_LIVE = 0, /**< the weights the optimizer trains                                             */
    TRAINRUN_WEIGHTS_EMA = 1   /**< the EMA's (ema.enabled)                                                      */
};

/**
 * Evaluate a whole data set: a run's evaluation pass, as trainrun_run_evaluate gives it. Every sample of `data` (an
 * arrays source, trainrun_data_arrays or _arrays_targets, or the config's data, trainrun_trainer_open_data) in order,
 * eval.batch_size samples a batch, in eval mode under no_grad (train mode restored after; gradients and optimizer state
 * untouched) with `weights` (TRAINRUN_WEIGHTS_LIVE or TRAINRUN_WEIGHTS_EMA); the caching allocators' cached blocks are
 * released before and after the pass (a phase change, never inside a loop of steps). The per-batch figures are summed
 * in C: loss = sum over batches of (mean batch loss x batch samples) / samples; accuracy = correct / targets counted;
 * top-k accuracy with eval.top_k; micro and macro F1 (bce_with_logits); MSE and MAE (mse, smooth_l1): the formulas of
 * trainrun_eval_result, the same sums in the same order as a run's, so a trainer holding a run's weights gets its
 * figures bit for bit. *out.step: the optimizer steps taken. `split` (TRAINRUN_VAL or TRAINRUN_TEST) names the pass in
 * the TRAINRUN_EVENT_EVAL event it reports to trainrun_trainer_set_callback's function ("val" / "test"); pass the
 * figure on to trainrun_trainer_monitor for model selection. The confusion matrix stays for trainrun_trainer_confusion;
 * with a run directory (trainrun_trainer_open_dir) it is also written there as a run writes it,
 * confusion_val.csv / confusion_test.csv (confusion_val_ema.csv ... for the EMA's weights; rank 0), and with a log
 * (trainrun_trainer_open_log) curves.png is redrawn from metrics.jsonl, as after a run's evaluation (a drawing that
 * fails is a console warning once; the loop goes on). Nothing is allocated after the first call.
 * Errors: TRAINRUN_E_INVALID (NULL trainer, data or out; a split or weights out of range; EMA weights without
 * ema.enabled; a batch-callback source; data without targets; data that do not fit the model or the loss -- the
 * message names the samples), TRAINRUN_E_CONFIG (eval.top_k above the model's outputs), TRAINRUN_E_RUNTIME (libtorch
 * failed, an image file that does not decode, the confusion CSV not written -- named; the trainer stays usable),
 * TRAINRUN_E_NOMEM.
 */
int trainrun_trainer_evaluate(trainrun_trainer *trainer, const trainrun_data *data, int split, int weights,
                              trainrun_eval_result *out);

/**
 * The confusion matrix of the last trainrun_trainer_evaluate (cross_entropy): K x K int64 counts into out[0 .. K x
 * K), row = true class, column = predicted (highest logit), row-major, K = the model's outputs into *classes (set
 * even when cap is too small). Errors: TRAINRUN_E_INVALID (NULL trainer or classes; out NULL with cap > 0; cap <
 * K x K; no evaluation yet; a loss other than cross_entropy).
 */
int trainrun_trainer_confusion(trainrun_trainer *trainer, int64_t *out, size_t cap, int64_t *classes);

/**
 * The config's data files as data sources, as a run reads them (docs/data.md): data.format idx, csv, npy,
 * image_folder, text or tokens, with data.root, data.mean / data.std, the subsets and the validation split carved by
 * data.val_size (the same samples a run holds out). *train, *val and *test (each may be NULL: not wanted) get a
 * source each, or NULL for a split the config does not hold (no test set unless eval.test_at_end or eval.split:
 * test reads one, for idx data; a test set without targets comes as a source that trains and evaluates nothing).
 * Batches of them have the model's per-sample input shape (the model spec's `input`, or model.input_shape): [N,
 * ...input] FLOAT32 features with INT64 labels or FLOAT32 targets; token data: INT64 ids [N, T] with next-token
 * targets [N, T] (T = data.block_size). Evaluate one with trainrun_trainer_evaluate, train on one with
 * trainrun_trainer_next_batch; free each with trainrun_data_close once no trainer holds it. Token data's ids mean
 * the training split's vocabulary: with a run directory (trainrun_trainer_open_dir, before or after this call) it is
 * checked against the one the weights were trained with (the resumed checkpoint's vocab.json, else init.from's run
 * directory's) and written as its vocab.json, which checkpoints copy, so `trainrun sample DIR` decodes as for a run.
 * Errors: TRAINRUN_E_INVALID (NULL trainer; all three NULL), TRAINRUN_E_CONFIG (a config key the data refuse, e.g.
 * data.root not a directory; samples that do not fit the model's input; a vocabulary other than the weights' --
 * the message names the key or the file),
 * TRAINRUN_E_RUNTIME (a data file that does not read or parse: the message names it, with the byte offset or
 * sample), TRAINRUN_E_NOMEM. On an error every pointer given is set to NULL.
 */
int trainrun_trainer_open_data(trainrun_trainer *trainer, trainrun_data **train, trainrun_data **val,
                               trainrun_data **test);

/**
 * The training batch of the trainer's next step, as a run takes it: the samples of `data` (an arrays source or the
 * config's files, trainrun_trainer_open_data) in each epoch's order -- a pure function of the config's seed and the
 * epoch (data.shuffle), this rank's shard of it after trainrun_trainer_init_process_group -- batch_size x
 * accumulate_steps samples a step (the last of an epoch fewer, or left out with train.drop_last), with
 * data.augment, gathered ahead on a thread with data.prefetch. It starts at the trainer's data position
 * (trainrun_trainer_data_position: (0, 0) when fresh; a checkpoint's after trainrun_trainer_load / open_dir, so a
 * resumed loop takes the batches it would have) and moves it past the batch, so a checkpoint saved after the step
 * carries where the next one starts. *batch: a view into the trainer's buffers, valid until the next call or
 * trainrun_trainer_close; pass it to trainrun_trainer_train_step. Over the same config and data, a loop of
 * next_batch, scheduled_lr / set_lr and train_step takes a run's steps, loss for loss (tests/test_trainer_data.c).
 * The trainer holds `data` from the first call until it batches another source or closes (trainrun_data_close
 * answers TRAINRUN_E_BUSY meanwhile).
 * Errors: TRAINRUN_E_INVALID (NULL arguments; a batch-callback source; data without targets),
 * TRAINRUN_E_CONFIG (batch_size x accumulate_steps above the samples of an epoch; data.augment on samples it does
 * not fit), TRAINRUN_E_RUNTIME (an image file that does not decode: the message names it; no thread),
 * TRAINRUN_E_NOMEM. The position is unchanged on an error.
 */
int trainrun_trainer_next_batch(trainrun_trainer *trainer, trainrun_data *data, trainrun_batch *batch);

/** One sample of the trainer's memory watchdog (trainrun_trainer_watchdog). Bytes; growth in bytes per step. */
typedef struct trainrun_watchdog_report {
    int kind;                   /**< 0: nothing to report; else a trainrun_watchdog_kind (baseline, warn, limit) */
    int64_t step;               /**< optimizer steps taken when it was sampled (0: not sampled this step)       */
    int64_t allocated_bytes;    /**< allocated bytes on the trainer's device                                    */
    int64_t baseline_bytes;     /**< the baseline (0 before it is taken)                                       */
    int64_t limit_bytes;        /**< the hard limit (0: none)                                                  */
    double growth_per_step;     /**< least-squares slope over the last watchdog.window samples                 */
} trainrun_watchdog_report;

/**
 * The memory watchdog of the config (watchdog.*), after a train step: every watchdog.every_steps steps it samples
 * allocated bytes; the first sample once warm-up is over (watchdog.warmup_steps, the first step, and the first save
 * when checkpoint.every_steps is set) becomes the baseline (trainrun_trainer_memory_growth then reports against
 * it); past watchdog.warn_ratio x baseline it warns, and at the hard limit (watchdog.limit_*) it reports the limit.
 * *out gets the sample (kind 0 when none was due; may be NULL). With a run directory (trainrun_trainer_open_dir) a
 * warning and the limit also write what grew since the baseline as a run writes it: memory_report.json (docs/
 * memory.md), the largest growing (phase, size) keys as log lines (with trainrun_trainer_open_log), and on a CUDA
 * device memory_snapshot.pickle; a closing trainer with a log writes the report once more ("end"). Returns
 * TRAINRUN_OK, or TRAINRUN_E_WATCHDOG at the limit with watchdog.action checkpoint_exit: the caller saves
 * (trainrun_trainer_save) and stops. Nothing happens without watchdog.enabled. Errors: TRAINRUN_E_INVALID (NULL),
 * TRAINRUN_E_RUNTIME (memory statistics failed; a report that cannot be written is a log line, not an error).
 */
int trainrun_trainer_watchdog(trainrun_trainer *trainer, trainrun_watchdog_report *out);

/**
 * Whether the config's checkpoint policy wants a save after the step just taken: every checkpoint.every_steps
 * steps, or once checkpoint.every_seconds of training time have passed since the last save (or load). Training
 * time is the trainer's clock (trainrun_trainer_set_clock; else the monotonic clock) from open, plus the seconds a
 * loaded checkpoint carries. *due gets 1 or 0;
 * never 1 twice for one step. It also takes the outcome of a trainrun_trainer_save_background that has finished
 * (its CHECKPOINT event comes from this call then). After trainrun_trainer_request_stop it returns
 * TRAINRUN_E_STOPPED at every call, with *due 1 until this step's checkpoint is taken: the caller saves (reason
 * "signal") and stops. Errors: TRAINRUN_E_INVALID (NULL),
 * TRAINRUN_E_RUNTIME (that background save failed: the message names the file; *due is 0).
 */
int trainrun_trainer_checkpoint_due(trainrun_trainer *trainer, int *due);

/**
 * Save a crash-safe checkpoint -- parameters and buffers, optimizer state, the EMA (ema.enabled), the trainer's
 * generator state, the step count, the training seconds, the model selection's state, the config -- as
 * `dir`/checkpoints/step-NNNNNNNNNN (the run's format: safetensors + JSON + a SHA-256 manifest, written under a
 * temporary name, fsync'd and renamed), then keep the newest checkpoint.keep_last and those of
 * checkpoint.save_top_k's set (trainrun_trainer_monitor; `dir`/best.json then names them, as a run directory's).
 * `dir` is created if missing; NULL: the run directory of trainrun_trainer_open_dir. The checkpoint's directory
 * goes to path_out[path_size] when path_out is not NULL.
 * The save is complete on return; a background save still in flight is finished first.
 * Errors: TRAINRUN_E_INVALID (NULL trainer; dir NULL without open_dir; a dir longer than a path may be),
 * TRAINRUN_E_RUNTIME (I/O, disk full, a
 * checkpoint of this step exists; the partial directory is removed and nothing saved before is touched; or the
 * background save before it failed -- then this one was not taken: call again).
 */
int trainrun_trainer_save(trainrun_trainer *trainer, const char *dir, char *path_out, size_t path_size);

/**
 * trainrun_trainer_save in the background, as a run saves with checkpoint.async: the state is copied out on the
 * caller's thread (the loop pauses only for the copy and the caches' release), then the same files are written,
 * fsync'd, renamed and pruned on a saver thread while the caller trains on -- the checkpoint is the one
 * trainrun_trainer_save would have written at this step, byte for byte. One save in flight: a save of either kind,
 * trainrun_trainer_load and trainrun_trainer_close first wait for it. Its outcome -- the CHECKPOINT event and a
 * failure's error -- comes from trainrun_trainer_save_wait, from the first trainrun_trainer_checkpoint_due after it
 * finished, or from the next save. A process killed while it writes keeps every checkpoint saved before (the
 * temporary directory is never renamed into place). Errors: as trainrun_trainer_save's for what happens on the
 * caller's thread (TRAINRUN_E_NOMEM for the copy); the write's own errors come later, as said.
 */
int trainrun_trainer_save_background(trainrun_trainer *trainer, const char *dir);

/**
 * Wait for the background save in flight and take its outcome (its CHECKPOINT event is reported from this call);
 * the checkpoint's directory into path_out[path_size] when one was in flight and was written ("" otherwise;
 * path_out may be NULL). Returns TRAINRUN_OK (none in flight, or written), TRAINRUN_E_RUNTIME (its write or prune
 * failed: the message names the file; the partial directory is removed and nothing saved before is touched),
 * TRAINRUN_E_INVALID (NULL trainer).
 */
int trainrun_trainer_save_wait(trainrun_trainer *trainer, char *path_out, size_t path_size);

/**
 * Load a checkpoint saved by trainrun_trainer_save (or by a run of the same model): `path` is a checkpoint
 * directory, or a directory given to trainrun_trainer_save, whose newest verified checkpoint is taken. Afterwards
 * training continues bit for bit as if uninterrupted. The checkpoint's files are verified (size, SHA-256) before
 * anything is read. Errors: TRAINRUN_E_INVALID (NULL), TRAINRUN_E_RUNTIME (no valid checkpoint, corrupt files),
 * TRAINRUN_E_CONFIG (its state_dict does not match the model: the message lists each key).
 */
int trainrun_trainer_load(trainrun_trainer *trainer, const char *path);

/**
 * Make `dir` the trainer's run directory, with the protocol a run keeps with its own (docs/run_directory.md):
 *   - `dir` is created (with its parents) if missing, and its one-writer lock taken: RUN_DIR/trainrun.lock, held
 *     until trainrun_trainer_close (a killed process's lock goes with it; the file stays);
 *   - the temporaries of saves a killed process left are removed (complete checkpoints are never touched);
 *   - the newest checkpoint in `dir`/checkpoints that verifies (sizes, SHA-256) and fits the model is loaded, as
 *     trainrun_trainer_load would, and *resumed gets 1 (0: a fresh start; resumed may be NULL;
 *     trainrun_trainer_steps then gives the step to continue from). A damaged
 *     checkpoint is skipped and kept; without any that verifies, those there are set aside (step-N.corrupt), so
 *     this loop's new checkpoints do not compete with them in pruning. Each of these is a WARNING event;
 *   - on a fresh start, the config's init.from weights are loaded as a run loads them (a checkpoint directory, a
 *     .safetensors file, or a run directory's best checkpoint by best.json, else its newest; init.strict); a
 *     run directory's choice is a WARNING event. A resume ignores init.from. A loop without a run directory
 *     loads weights with trainrun_trainer_load_weights;
 *   - saves given a NULL dir go to `dir`; a resumed checkpoint whose first step fails can be set aside
 *     (trainrun_trainer_set_aside_resumed).
 * A directory written by a run (`trainrun CONFIG`) of the same model is resumed the same way. Call it once, after
 * trainrun_trainer_set_callback and before the first step. Errors: TRAINRUN_E_INVALID (NULL, "", a path too long,
 * a second call, steps already taken or loaded); TRAINRUN_E_LOCKED (another process, run or trainer holds `dir`:
 * the message names its pid, host and start time; nothing in `dir` was touched); TRAINRUN_E_RUNTIME (the
 * directory cannot be created or locked; its newest checkpoint that verifies cannot be read); TRAINRUN_E_CONFIG
 * (a checkpoint saved with a config that does not fit this one: its state_dict or param_groups differ, named;
 * nothing is renamed; init.from's path missing, or its weights of other names or shapes, named "init.from: ...";
 * token data open_data read whose vocabulary is not the resumed checkpoint's: trainrun_trainer_open_data). On an
 * error the lock is released and the trainer is as before the call.
 */
int trainrun_trainer_open_dir(trainrun_trainer *trainer, const char *dir, int *resumed);

/**
 * Log the trainer's events into its run directory (trainrun_trainer_open_dir first) as a run logs into its own
 * (the records: docs/cli.md), so that `trainrun plot`, `trainrun compare` and TensorBoard read the loop's
 * directory as a run's:
 *   - metrics.jsonl: a train record every log.every_steps steps (mean loss and accuracy over the window, the lr,
 *     samples/s; the window also closes at step total_steps, and a window still open at close is logged marked
 *     partial), an eval record per trainrun_trainer_evaluate (live or EMA weights, the task's metrics), a
 *     checkpoint record per save, a watchdog record per report, and a resume record after open_dir resumed (its
 *     readers then drop what a killed predecessor logged after that step). The open window's sums go into the
 *     checkpoints, so a resumed loop's losses, accuracies and lrs equal an uninterrupted one's (time_s and
 *     samples_per_s are this process's, as a run's);
 *   - metrics.csv beside it, row for row; TensorBoard's events file with log.tensorboard; curves.png drawn from
 *     metrics.jsonl after each evaluation and at close, as a run draws it;
 *   - summary.json at trainrun_trainer_close, as a run writes it at its end (docs/cli.md): steps, epochs, the last
 *     window's loss, samples/s in train steps, memory, the last evaluation of each split and weights, early
 *     stopping, the best checkpoint. Its status: "watchdog" after trainrun_trainer_watchdog said stop,
 *     "interrupted" after a stop request or when closed before total_steps, "error" (with the message) when the
 *     call before close failed, else "completed";
 *   - on stderr, as a run's console: a plain progress line every 10 s and at step total_steps (a live one with
 *     log.progress always, or auto on a terminal), and a line per evaluation, save and resume.
 * total_steps: the steps the loop plans (its progress line's total and ETA; 0: unknown). Call it once, after
 * open_dir and before the first step. Errors: TRAINRUN_E_INVALID (NULL, no run directory, a second call,
 * total_steps < 0), TRAINRUN_E_RUNTIME (metrics.jsonl cannot be opened for appending). A TensorBoard file that
 * cannot be written is a warning on the console; the loop goes on.
 */
int trainrun_trainer_open_log(trainrun_trainer *trainer, int64_t total_steps);

/**
 * Set aside the checkpoint trainrun_trainer_open_dir resumed from: rename it to step-N.unresumable (kept for
 * inspection, no longer listed, resumed or pruned), so that the next open_dir resumes from the next older one. For
 * a first step after the resume that failed although its batch is the one that step took before (its message
 * says when this applies). The trainer's state stays what it loaded; close it and open a new one to go on (a
 * save of that step is refused: it would bring the checkpoint back). The new name into path_out[path_size] (may
 * be NULL). Errors: TRAINRUN_E_INVALID (NULL; open_dir resumed nothing, or
 * it is set aside already), TRAINRUN_E_RUNTIME (the rename failed; nothing changed).
 */
int trainrun_trainer_set_aside_resumed(trainrun_trainer *trainer, char *path_out, size_t path_size);

/**
 * Ask the trainer's loop to stop: the next trainrun_trainer_checkpoint_due -- after the step in progress, or
 * before the first step -- returns TRAINRUN_E_STOPPED with *due 1 (the caller saves, its CHECKPOINT event's
 * reason "signal", and stops). Only sets a flag: async-signal-safe, so a
 * SIGINT / SIGTERM handler may call it (as `trainrun CONFIG` stops a run). NULL is a no-op.
 */
void trainrun_trainer_request_stop(trainrun_trainer *trainer);

/**
 * Where the loop's data stand, for a resume: `epoch` (0-based) and `position` (how far into that epoch's order the
 * loop is, in the caller's unit: samples or batches), each in [0, 2^53]. The next save carries them (trainer.json
 * "epoch", "position"), a load or open_dir's resume restores them, and the step, eval and watchdog events and the
 * log's records carry the epoch. A loop whose batches are not a function of the step alone (epochs of a shuffled
 * order, a stream) sets them after each step and, after a resume, starts from trainrun_trainer_data_position.
 * Errors: TRAINRUN_E_INVALID (NULL trainer, a value out of range; nothing changed).
 */
int trainrun_trainer_set_data_position(trainrun_trainer *trainer, int64_t epoch, int64_t position);

/** The data position last set or restored into *epoch and *position (0, 0 for a fresh trainer). Errors:
 * TRAINRUN_E_INVALID (a NULL argument). */
int trainrun_trainer_data_position(trainrun_trainer *trainer, int64_t *epoch, int64_t *position);

/**
 * Load weights only -- parameters and buffers, by their state_dict names -- from `path`: a checkpoint directory (its
 * model.safetensors) or a .safetensors file, e.g. a checkpoint's ema.safetensors to use the EMA's weights. Entries
 * the file lacks keep their values (an EMA that averaged no buffers leaves the live ones); optimizer state, step
 * count and generator are untouched. Errors: TRAINRUN_E_INVALID (NULL), TRAINRUN_E_CONFIG (no such file; an
 * entry of another shape or dtype, named), TRAINRUN_E_RUNTIME (a corrupt file).
 */
int trainrun_trainer_load_weights(trainrun_trainer *trainer, const char *path);

/**
 * Memory statistics of the trainer's device, process-wide. The CPU (device: cpu): from the caching allocator under
 * libtorch's CPU tensors. allocated is torch.cuda.memory_allocated's CPU analogue: bytes requested by live tensor
 * storages (not BLAS or malloc scratch). reserved is torch.cuda.memory_reserved's: bytes held from the system by
 * live and cached (freed, kept for reuse) blocks, with their 64-byte headers and size rounding. reserved only
 * drops when the cache is given back (around an evaluation pass, before a checkpoint, past
 * memory.cache_limit_bytes); a leak shows in allocated. A CUDA device: the caching allocator's figures for that
 * device (torch.cuda.memory_allocated, max_memory_allocated, memory_reserved). The allocation counts are the CPU's.
 */
typedef struct trainrun_memory {
    int64_t allocated_bytes;    /**< live bytes in tensor storages on the device       */
    int64_t peak_bytes;         /**< highest allocated_bytes so far                    */
    int64_t live_allocations;   /**< live CPU tensor storage allocations               */
    int64_t total_allocations;  /**< CPU allocations ever made                         */
    int64_t reserved_bytes;     /**< bytes held: live + cached blocks (the CPU's or the CUDA device's) */
    int64_t peak_reserved_bytes; /**< highest reserved_bytes of the CPU allocator so far */
    int64_t rss_bytes;          /**< the process's resident set size                   */
    int64_t peak_rss_bytes;     /**< its peak (getrusage ru_maxrss)                    */
} trainrun_memory;

/** Memory statistics into *out. Errors: TRAINRUN_E_INVALID (NULL). */
int trainrun_trainer_memory(trainrun_trainer *trainer, trainrun_memory *out);

/**
 * Take the trainer's memory baseline now: a snapshot of the live blocks by (phase, size) and the step count, for
 * trainrun_trainer_memory_growth. Take it after warm-up (the first optimizer step, evaluation and checkpoint
 * allocate state lazily). A later call replaces it. Errors: TRAINRUN_E_INVALID (NULL), TRAINRUN_E_NOMEM.
 */
int trainrun_trainer_memory_baseline(trainrun_trainer *trainer);

/**
 * What grew since trainrun_trainer_memory_baseline, largest growth first; per-step rates over the optimizer steps
 * taken since. Up to `cap` keys into out[], the number that grew into *count (0 in a clean loop, and before a
 * baseline). Memory is process-wide: other trainers' growth shows too. Errors: TRAINRUN_E_INVALID (trainer or
 * count NULL, out NULL with cap > 0), TRAINRUN_E_NOMEM.
 */
int trainrun_trainer_memory_growth(trainrun_trainer *trainer, trainrun_memory_growth *out, size_t cap,
                                   size_t *count);

/** What one monitored figure did to the trainer's model selection (trainrun_trainer_monitor). */
typedef struct trainrun_selection {
    int best;                   /**< 1: it entered checkpoint.save_top_k's set: trainrun_trainer_checkpoint_due now
                                     says 1 (reason "best"), and that save records the set in DIR/best.json    */
    int64_t evicted_step;       /**< the step that left the set for it (its checkpoint is pruned as keep_last
                                     says); -1: none                                                           */
    int lr_reduced;             /**< 1: the plateau schedule lowered its lr (trainrun_trainer_scheduled_lr gives
                                     the new one from the next step on)                                        */
    double lr;                  /**< schedule.name plateau: its lr after this figure (before warm-up); else 0  */
    int stop;                   /**< 1: early stopping ends training after this step: save, then stop         */
    char reason[320];           /**< why it stopped, as a run's summary says it ("" when it did not)           */
} trainrun_selection;

/**
 * Model selection after the caller's own evaluation, as a run's after its periodic one: offer `value`, the figure
 * `metric` names ("<split>[_ema]_<metric>": val_loss, val_accuracy, val_ema_loss, test_mse, ...) measured after
 * the trainer's current step, to each monitor of the config that names it -- checkpoint.monitor (the
 * checkpoint.save_top_k set, PyTorch Lightning's ModelCheckpoint), schedule.monitor of schedule.name plateau
 * (torch's ReduceLROnPlateau) and early_stopping.monitor (Lightning's EarlyStopping), in that order; a metric no
 * monitor names changes nothing. Offer each monitored figure once per evaluation, then call
 * trainrun_trainer_checkpoint_due. *out gets what it did (may be NULL). The state (the set, the counters, the
 * plateau lr) is in every checkpoint and comes back with trainrun_trainer_load (a monitor or mode the checkpoint
 * did not keep starts afresh); trainrun_trainer_save keeps the set's checkpoints from pruning. A non-finite value
 * never enters the set and stops early stopping (Lightning's check_finite). Errors: TRAINRUN_E_INVALID (NULL
 * trainer or metric, a metric that is no monitor name -- the message says why; a monitor offered a second figure
 * after the same step, a loaded checkpoint's step included: nothing changes then).
 */
int trainrun_trainer_monitor(trainrun_trainer *trainer, const char *metric, double value, trainrun_selection *out);

/**
 * Call fn(ctx, event) for the trainer's events (trainrun_event), on the caller's thread, just before the call that
 * produced each returns and outside the library's lock (fn may call trainrun functions, but not on this trainer):
 *   STEP        after each trainrun_trainer_train_step that took a step: step, loss, lr (the one it used: the
 *               schedule's first lr -- optim.lr, over warmup_steps under warm-up -- until trainrun_trainer_set_lr;
 *               a trainer's checkpoint carries none), samples (N), correct, accuracy (correct over the labels
 *               counted, as trainrun_step_result's), grad_norm;
 *   EVAL        after each trainrun_trainer_evaluate that succeeded: split ("val" / "test"), step, loss,
 *               accuracy, correct, samples and seconds (the pass's wall time), as a run's evaluation reports;
 *   WATCHDOG    after each trainrun_trainer_watchdog that reports (its kind is not 0): as a run's, with
 *               reserved_bytes and rss_bytes at the sample;
 *   CHECKPOINT  after each save that was written (trainrun_trainer_save, or a _save_background whose outcome was
 *               taken): path, bytes, seconds (from the save's call to its outcome) and
 *               reason -- "watchdog" when trainrun_trainer_watchdog asked to save and stop after this step, else
 *               "best", "steps" or "interval" when trainrun_trainer_checkpoint_due said 1 for it, else "manual"
 *               (a load forgets the reasons).
 * epoch (STEP, EVAL, WATCHDOG) is the one trainrun_trainer_set_data_position set (0 without; a CHECKPOINT's is 0).
 * trainrun_trainer_eval_step on the caller's own batches raises no event. NULL fn turns events off. Errors:
 * TRAINRUN_E_INVALID (NULL trainer).
 */
int trainrun_trainer_set_callback(trainrun_trainer *trainer, trainrun_event_fn fn, void *ctx);

/**
 * Route the trainer's log lines -- trainrun_trainer_open_log's console lines: progress, evaluations, saves, the
 * resume, warnings -- to fn(ctx, kind, line) (as trainrun_run_set_log) instead of stderr; fn NULL silences them.
 * Records still go to metrics.jsonl. Must come before trainrun_trainer_open_log. Errors: TRAINRUN_E_INVALID (NULL
 * trainer, the log open already).
 */
int trainrun_trainer_set_log(trainrun_trainer *trainer, trainrun_log_fn fn, void *ctx);

/**
 * Take the trainer's time from now(ctx) (as trainrun_run_set_clock): the training seconds that
 * trainrun_trainer_checkpoint_due counts for checkpoint.every_seconds and a checkpoint carries, the seconds of
 * evaluations, saves and log records. The training seconds of the steps taken so far are kept and go on from the
 * new clock's now (set before the first step after open or load, the count starts from exactly the seconds a loaded
 * checkpoint carried, or 0). now NULL: the monotonic clock again. Errors: TRAINRUN_E_INVALID (NULL trainer, the log
 * open already -- call it before trainrun_trainer_open_log --, a background save in flight).
 */
int trainrun_trainer_set_clock(trainrun_trainer *trainer, trainrun_clock_fn now, void *ctx);

/** Message of the most recent call on `trainer`, as sqlite3_errmsg: "" after a call that succeeded, its reason after
 * one that failed (a trainer that failed to open keeps saying why until it is closed; a static message for NULL). */
const char *trainrun_trainer_errmsg(const trainrun_trainer *trainer);

/** Free the trainer, after a background save in flight is finished (its outcome is dropped then: call
 * trainrun_trainer_save_wait first to hear it). NULL is a no-op; always returns TRAINRUN_OK. */
int trainrun_trainer_close(trainrun_trainer *trainer);

#ifdef __cplusplus
}
#endif
#endif /* TRAINRUN_H */
