/*
 * trainrun_trainer_internal.h -- the trainer's state (struct trainrun_trainer) and the calls its files share:
 * trainrun_trainer.c (steps, evaluation, EMA, schedule, checkpoint policy, selection), trainrun_trainer_memory.c
 * (memory statistics, the watchdog), trainrun_trainer_dir.c (the run directory: lock, resume; stop requests),
 * trainrun_trainer_log.c (metrics.jsonl, metrics.csv, TensorBoard) and trainrun_trainer_dist.c (the data-parallel
 * group). Not public.
 */
#ifndef TR_TRAINRUN_TRAINER_INTERNAL_H
#define TR_TRAINRUN_TRAINER_INTERNAL_H

#include <signal.h>

#include "trainrun_internal.h"

#include "checkpoint.h"
#include "ckpt_policy.h"
#include "dist.h"
#include "event.h"
#include "history.h"
#include "loader.h"
#include "log.h"
#include "model_core.h"
#include "run_lock.h"
#include "selection.h"
#include "tensorboard.h"
#include "watchdog.h"

struct trainrun_trainer {
    tr_config cfg;
    tr_error err;
    tr_core core;               /* model, optimizer, EMA (ema.enabled), step options, device, the trainer's own
                                   generator state (model_core.h, as a run holds them)          */
    tr_ckpt_progress p;         /* p.step: optimizer steps taken; p.elapsed at a save; what a checkpoint carries */
    tr_memsnap mem_base;        /* the watchdog's or trainrun_trainer_memory_baseline's snapshot   */
    trs_memory_stats mem_base_stats; /* allocated / reserved / RSS when it was taken (memory_report.json) */
    tr_watchdog wd;             /* trainrun_trainer_watchdog's sampler (watchdog.*)               */
    tr_clock clock;             /* trainrun_trainer_set_clock's clock (zero: the monotonic clock, tr_now) */
    double clock0, elapsed0;    /* trainer_now() at open / load / set_clock, and the training seconds by then */
    int64_t clock_step;         /* p.step when clock0 was taken                                          */
    tr_api_log console;         /* trainrun_trainer_set_log's function for the log's console lines      */
    tr_ckpt_policy ckpt;        /* the checkpoint policy a run keeps (ckpt_policy.h), its writes on the saver's
                                   thread: trainrun_trainer_save waits for them, _save_background does not;
                                   ckpt.done: the saves the watchdog's warm-up waits for           */
    char saved_path[TR_PATH_MAX]; /* the last save's checkpoint directory                          */
    int64_t saved_bytes;        /* ... the bytes of its files                                      */
    trainrun_event_fn fn;       /* trainrun_trainer_set_callback's: the trainer's events, or NULL  */
    void *fn_ctx;
    const char *save_reason;    /* the next save's reason for its event: "best" / "steps" / "interval"
                                   (checkpoint_due said so), "watchdog" (the watchdog's limit said stop), else
                                   "manual" */
    unsigned monitors;          /* the config's monitors (TR_SEL_* bits); their state is p.sel               */
    tr_monitor mon[3];          /* ... parsed: checkpoint.monitor, early_stopping.monitor, schedule.monitor    */
    char save_dir[TR_PATH_MAX]; /* the directory of the save in flight (best.json goes there)               */
    struct {                    /* the save in flight, for its CHECKPOINT event once its outcome is taken    */
        const char *reason;     /* its reason (save_reason when it was taken, else "manual")                */
        double t0;              /* trainer_now() when the call that took it began                           */
        int announce;           /* its outcome came and it was written: the event is due                    */
        int64_t step;
    } saving;
    int64_t offered_at[3];      /* the step each monitor last had a figure after (-1: none); one per step keeps
                                   the counters within p.evals_done, the evaluations counted once per step     */
    struct {                    /* trainrun_trainer_open_dir's run directory (trainrun_trainer_dir.c)          */
        char path[TR_PATH_MAX]; /* the directory; "" when the trainer has none                                  */
        tr_run_lock lock;       /* its one-writer lock, held until close                                        */
        char resumed_from[TR_PATH_MAX]; /* the checkpoint it resumed from, "" for a fresh start             */
        int64_t resumed_at;     /* ... its step (-1: none), and whether the config that saved it is this one's: */
        int resumed_same_config; /* ... (a first step after it that fails says so: trainer_first_step_failed)  */
        int64_t set_aside_step; /* the step set_aside_resumed set aside (-1: none): no save of it again       */
        tr_vocab vocab;         /* token data: open_data's training vocabulary (size 0: none), the directory's
                                   vocab.json once both are open (tr_run_dir_vocab)                         */
    } dir;
    volatile sig_atomic_t stop; /* trainrun_trainer_request_stop: the next checkpoint_due says save and stop   */
    tr_dist dist;               /* init_process_group's group (trainrun_trainer_dist.c); zero: one process;
                                   dist.agreed: the requests every rank agreed on at the last train step     */
    int wd_pending;             /* this rank's watchdog reached its limit: the ranks learn at the next step   */
    struct {                    /* trainrun_trainer_open_log's sinks (trainrun_trainer_log.c); the open window's
                                   sums are p.win_* (a checkpoint carries them, as a run's)                    */
        int open;
        tr_log log;             /* metrics.jsonl and the console                                                */
        tr_csv_sink csv;        /* metrics.csv, fed each metrics.jsonl record                                   */
        tr_tb_sink tb;          /* log.tensorboard's events file                                                */
        double win_t0;          /* trainer_now() when the open log window started                               */
        int64_t total_steps;    /* what the loop plans (0: unknown): the last window closes there               */
        double labels_per_sample; /* labels a sample counts for accuracy (token data: its positions)           */
        int curves_failed;      /* drawing curves.png failed once: not tried again (tr_run_dir_draw_curves)     */
    } log;
    struct {                    /* the model's per-sample input: the spec's, or model.input_shape (TorchScript) */
        int64_t shape[3];
        int ndim;
    } input;
    struct {                    /* trainrun_trainer_next_batch's loader, evaluation's buffers (trainrun_trainer_data.c) */
        tr_loader loader;       /* over `data`, positioned at p.epoch / p.pos where it stands          */
        trainrun_data *data;    /* the source it batches (held: data->users), or NULL                   */
        int64_t epoch, pos;     /* the cursor after the last batch it handed out                         */
        tr_image_buf eval_buf;  /* image folders: an evaluation batch decoded                          */
        int64_t *ids, *y, *starts; /* token data: one evaluation batch of windows [cap, block]         */
        int64_t cap;
    } batches;
    tr_eval_figures figs[2][2]; /* the last trainrun_trainer_evaluate of [val, test][live, EMA] (summary.json) */
    char stop_reason[320];      /* early stopping's reason, as trainrun_trainer_monitor gave it ("": none)     */
    int wd_stopped;             /* trainrun_trainer_watchdog said save and stop (TRAINRUN_E_WATCHDOG)          */
    double step_seconds_here;   /* this process's seconds in train steps (p.step_seconds: every process's)    */
    tr_metrics metrics;         /* trainrun_trainer_evaluate's sums, allocated at its first call (k = 0 before);
                                   its confusion matrix stays for trainrun_trainer_confusion                      */
};


/* The trainer's clock now, in seconds (trainrun_trainer_set_clock's, else the monotonic clock). */
static inline double trainer_now(const trainrun_trainer *tr) { return tr_clock_now(&tr->clock); }

/* Training seconds: since open (or load), plus what a loaded checkpoint carried. */
static inline double trainer_elapsed(const trainrun_trainer *tr)
{
    return tr->elapsed0 + (trainer_now(tr) - tr->clock0);
}

/* The start every trainer call shares, in its order: a NULL handle is TRAINRUN_E_INVALID (no handle holds a
 * message), the last call's message is cleared, a NULL required pointer `arg` is TRAINRUN_E_INVALID with `null_msg`
 * (no check where null_msg is NULL), and with `ready` the trainer must have opened. */
int trainer_begin(trainrun_trainer *tr, const void *arg, const char *null_msg, int ready);

/* The watchdog's report into the run directory (tr_memreport_report; rank 0, nothing without a directory):
 * memory_report.json, the log's lines (not at "end"), on CUDA the allocator's snapshot. `reason`: "warn", "limit",
 * "end". */
void trainer_memory_report(trainrun_trainer *tr, const char *reason);

/* Hand an event to the caller's callback as trainrun.h reports it; called with the libtorch lock released. */
void trainer_emit(trainrun_trainer *tr, const tr_event *e);

/* The log's side of a train step just taken (tr->p.step counted, r its scalars, lr its lr): the open window's
 * sums, and its train record every log.every_steps steps (and at the planned last step). No-op without a log. */
void trainer_log_step(trainrun_trainer *tr, const trs_step_result *r, double lr);

/* An event into the open log's sinks (metrics.jsonl, TensorBoard); no-op without a log. */
void trainer_log_event(trainrun_trainer *tr, const tr_event *e);

/* Close the log: a window still open is logged, marked partial; the files closed. */
void trainer_log_close(trainrun_trainer *tr);

/* This process's requests as they stand (TR_DIST_* bits): a stop request, the watchdog's limit (wd_pending), the
 * checkpoint interval at `elapsed` training seconds. */
int trainer_requests(const trainrun_trainer *tr, double elapsed);

/* Whether `request` (a TR_DIST_* bit) holds: in a group, as every rank agreed at the last train step (the OR over
 * ranks, so that all act at the same step); alone, this process's own request now. */
int trainer_agreed(const trainrun_trainer *tr, int request, double elapsed);

/* The newest checkpoint under dir/checkpoints that verifies and fits the trainer's model into ckpt[TR_PATH_MAX]
 * ("" when none; tr_checkpoint_find_resumable: a damaged one is reported through warn and skipped). */
int trainer_find_resumable(trainrun_trainer *tr, const char *dir, char *ckpt, tr_ckpt_warn_fn warn, void *ctx);

/* Load checkpoint directory `ckpt` (verified first) into the trainer: its state, step, clock, selection. A save in
 * flight is finished first. TRAINRUN_OK or the checkpoint's error (nothing changed then). */
int trainer_load_checkpoint(trainrun_trainer *tr, const char *ckpt);

/* After a failed train step (status st, the error in tr->err with code rc): on the first step after open_dir
 * resumed a checkpoint with this config, the message adds that the checkpoint may be at fault and what sets it
 * aside (trainrun_trainer_set_aside_resumed). Returns rc. */
int trainer_first_step_failed(trainrun_trainer *tr, int rc, trs_status st);

/* A caller's batch view checked and turned into the shim's, its targets shaped by the model's output. */
int trainer_batch_in(trainrun_trainer *tr, const trainrun_batch *batch, trs_batch *b);

/* ---- trainrun_trainer_data.c */

/* `data` can be evaluated whole (an arrays source or the config's files, with targets): TRAINRUN_OK, else
 * TRAINRUN_E_INVALID with the reason. */
int trainer_data_evaluable(trainrun_trainer *tr, const trainrun_data *data);

/* Samples i .. i + n - 1 of `ctx` (a trainer_eval_source) as a batch: the tr_core_evaluate callback. */
typedef struct trainer_eval_source {
    trainrun_trainer *tr;
    const trainrun_data *data;
} trainer_eval_source;
int trainer_eval_batch(void *ctx, int64_t i, int64_t n, trs_batch *b, tr_error *err);

/* Free the loader and the evaluation buffers; the source is let go (trainrun_data_close may free it). */
void trainer_data_close(trainrun_trainer *tr);

#endif
