/*
 * run_internal.h -- what the files of a run share (not a public header): the run's state and the calls between
 *   run.c         the loop: tr_run_step (one step and its concerns), tr_run_finish, tr_run_close
 *   run_eval.c    evaluation: live and EMA weights, when it is due, the phase change around it      (t->eval)
 *   run_select.c  model selection: the monitors, top-k, early stopping, the plateau schedule       (t->sel)
 *   run_ckpt.c    the checkpoint policy's hooks and due test (ckpt_policy.c: when, the save sequence) (t->ckpt)
 *   run_watchdog.c the memory watchdog: baseline, sampling, growth reports, its stop                (t->wd)
 *   run_setup.c   set-up: threads, data, model, optimizer (tr_run_open), and teardown
 *   run_restore.c a resume or init.from: where the run starts from
 *   run_dir.c     the run directory's files: the directory and its lock, config.yaml + the model copy, vocab.json,
 *                 the trace                                                                           (t->dir)
 *   run_loader.c  the training batches: the loader's (loader.h) or a callback's, as the step reads them (t->loader)
 *   run_events.c  the event path: each tr_event to every sink (event.h; tensorboard.c is one), curves.png (t->sinks)
 *   summary.c     tr_summary and summary.json (the summary sink)                                      (t->sum)
 */
#ifndef TR_RUN_INTERNAL_H
#define TR_RUN_INTERNAL_H

#include <signal.h>
#include <stdio.h>

#include "checkpoint.h"
#include "ckpt_policy.h"
#include "history.h"
#include "image_folder.h"
#include "loader.h"
#include "dist.h"
#include "event.h"
#include "memreport.h"
#include "metrics.h"
#include "selection.h"
#include "prefetch.h"
#include "run.h"
#include "run_lock.h"
#include "schedule.h"
#include "tensorboard.h"
#include "model_core.h"

/* A run's phases, in order: tr_run_step takes steps (STEPPING) until the loop is over (OVER: all steps taken, a
 * stop, the watchdog, an error); tr_run_finish ends it (FINISHED; also a run whose set-up failed or found it
 * complete); the summary is written once (REPORTED). */
typedef enum run_phase { RUN_STEPPING = 0, RUN_OVER, RUN_FINISHED, RUN_REPORTED } run_phase;

/* ---- the run's parts: each concern's state is one member of tr_run_state, owned by its file */

/** The shape of what a step reads, and of the run's plan (run_setup.c sets both from the model spec, the data and
 * train.*). */
typedef struct run_shape {
    int batch_ndim;             /* 2 for a [D]-input model, 3 for [T, D], 4 for [C, H, W]    */
    int64_t sample_shape[3];    /* the model spec's input: the batch view's shape[1..batch_ndim) */
    int64_t sample_elems;       /* floats per sample                                         */
    int64_t block;              /* token data (train.tokens): tokens per window, else 0       */
    int64_t step_batch;         /* samples per optimizer step: batch_size * accumulate_steps  */
    int64_t steps_per_epoch;    /* optimizer steps an epoch (train.drop_last rounds down)     */
    int64_t total_steps;        /* steps the run plans: train.max_steps, or epochs x steps_per_epoch */
} run_shape;

/** Evaluation (run_eval.c): its buffers and the latest figures. */
typedef struct run_eval {
    tr_metrics metrics;         /* evaluation sums, allocated once                            */
    tr_eval_figures fig[2][2];  /* latest evaluation: [val, test][live, ema]                  */
    int64_t *ids, *y;           /* token data: one evaluation batch of windows [eval bs, block]  */
    int64_t *starts;            /* ... their starts, [eval bs]                                 */
    tr_image_buf buf;           /* image folders: an evaluation batch decoded (the loop's thread) */
} run_eval;

/** Model selection (run_select.c): the monitors of checkpoint.save_top_k, early stopping and a plateau schedule.
 * Their state (the top-k set, patience, the plateau's lr) is in p.sel: a checkpoint carries it. */
typedef struct run_select {
    tr_monitor topk_mon, es_mon, plateau_mon; /* checkpoint.monitor, early_stopping.monitor, schedule.monitor */
    int has_topk, has_es, has_plateau;
    char stop_reason[320];      /* why early stopping ended the run ("" = it did not)             */
} run_select;

/** The memory watchdog (run_watchdog.c over watchdog.c's sampler and memreport.c's snapshots). */
typedef struct run_watchdog {
    tr_watchdog sampler;        /* baseline, samples, growth fit, warn and limit               */
    int pending;                /* this rank's watchdog asked to stop; the others learn next step */
    int recording_history;      /* watchdog.snapshot: the CUDA allocator's history is being recorded (main rank) */
    tr_memsnap base;            /* live blocks by (phase, size) at the baseline                 */
    trs_memory_stats base_stats; /* allocated / reserved / RSS at the baseline                  */
} run_watchdog;

/** The run directory (run_dir.c) and where in it the run starts (run_restore.c). */
typedef struct run_dir {
    char path[TR_PATH_MAX];
    int created;                /* run_dir_claim made the directory (nothing earlier in it)       */
    int used;                   /* run_dir_setup began: the directory is the run's from here on    */
    tr_run_lock lock;           /* the directory's one-writer lock (the main process's)           */
    char resume_from[TR_PATH_MAX]; /* checkpoint to resume from, "" for a fresh run              */
    int64_t resumed_at;         /* the step this process resumed at, -1 for a fresh run           */
    int resumed_same_config;    /* ... with the config that saved that checkpoint (fingerprints)  */
    int fell_back;              /* the first step after the resume failed: the checkpoint was set
                                   aside, and a new start resumes from an older one (run.c)      */
} run_dir;

/** The event path's sinks (run_events.c) besides the summary. */
typedef struct run_sinks {
    tr_log log;                 /* metrics.jsonl and the console                                */
    int log_open;
    FILE *trace;                /* log.trace, or NULL                                        */
    tr_tb_sink tb;              /* log.tensorboard's events file (main process)               */
    int tb_tried;               /* tr_tb_open was called (once: a failure is not retried)     */
    tr_csv_sink csv;            /* metrics.csv, fed each metrics.jsonl record (history.h)     */
    int curves_failed;          /* drawing curves.png failed once: not tried again            */
    tr_run_event_fn on_event;   /* tr_run_set_event_hook                                     */
    void *event_ctx;
} run_sinks;

/** The run's clocks: every time is the run's clock's (tr_run_data.clock), in seconds. */
typedef struct run_clock {
    double start;               /* when this process's loop started                              */
    double elapsed0;            /* p.elapsed at that moment (carried over from a resume)          */
    double win_t0;              /* when the open log window started                               */
    double step_seconds_here;   /* seconds in train steps in this process (for the all-reduce share) */
    double allreduce0;          /* all-reduce seconds spent in set-up, before the first step      */
} run_clock;

/** Everything a run holds; allocated in tr_run_open, freed in tr_run_close. */
struct tr_run_state {
    const tr_config *cfg;
    tr_dataset train, val, test;
    tr_run_data data;           /* the caller's data sources (zero: the config's files)      */
    tr_core core;               /* model, optimizer, EMA (ema.enabled), step options, device, generator
                                   state: model_core.h, as the embedding API's trainer holds them */
    run_shape shape;
    tr_loader loader;           /* the training batches (loader.h; the run's side: run_loader.c) */
    tr_ckpt_progress p;         /* step, data cursor, time, log window, selection: all a checkpoint carries */
    run_clock clock;
    struct {                    /* the last step taken                                         */
        double lr;              /* its lr                                                     */
        double loss;            /* its loss (finite), for a divergence's message              */
    } last;
    run_eval eval;
    run_select sel;
    tr_ckpt_policy ckpt;        /* the checkpoint policy (ckpt_policy.h; the run's hooks: run_ckpt.c) */
    run_watchdog wd;
    run_dir dir;
    run_sinks sinks;
    struct {                    /* malloc_tuning (glibc's thresholds, tr_setup_threads)          */
        int applied;
        char warning[320];      /* why it was not (another allocator), for the run's log      */
    } malloc_tuning;
    tr_dist dist;               /* the process group of a multi-process run, and the TR_DIST_* requests every
                                   rank agreed on at the last step (dist.h)                  */
    volatile sig_atomic_t stop; /* tr_run_request_stop on this run                           */
    run_phase phase;            /* where the run stands: stepping, over, finished, reported   */
    int rc;                     /* the status the run ended with                             */
    tr_summary sum;
};


/* The run's clock (tr_run_data.clock): every time a run reads or writes comes from it. */
static inline double run_now(const tr_run_state *t) { return tr_clock_now(&t->data.clock); }

/* Training seconds, summed over every process of this run. */
static inline double run_elapsed(const tr_run_state *t) { return t->clock.elapsed0 + (run_now(t) - t->clock.start); }

/* The set periodic evaluation runs on: the validation split, or the test set with eval.split: test. */
static inline const tr_dataset *run_eval_set(const tr_run_state *t)
{
    return t->cfg->eval.split == TR_EVAL_TEST ? &t->test : &t->val;
}

/* The lr of the step about to be taken: the schedule's, from the plateau's current lr for schedule.name plateau. */
static inline double run_scheduled_lr(const tr_run_state *t)
{
    const double base = t->sel.has_plateau ? t->p.sel.plateau.lr : t->cfg->optim.lr;
    return tr_schedule_lr_from(t->cfg, base, t->p.step, t->shape.total_steps, t->shape.steps_per_epoch);
}

/* The run is over by its own rule: every planned step taken, or early stopping ended it. */
static inline int run_complete(const tr_run_state *t)
{
    return t->p.step >= t->shape.total_steps || t->p.sel.es.stopped;
}

/* ---- run.c: the loop */

/* Whether a stop was asked for: tr_run_request_stop, or the caller's flag tr_run_data.stop (a signal handler);
 * ctx: the run. */
int run_stop_requested(void *ctx);

/* What the concerns act on (TR_DIST_* bits: a stop, the watchdog's stop, an interval checkpoint): with several
 * processes what the ranks agreed on at this step, else this process's own requests. */
int run_requests(const tr_run_state *t);

/* ---- run_setup.c: set-up and teardown */

/* A checkpoint reader's warning into the run's log (ctx: the tr_log). */
void run_warn_to_log(void *ctx, const char *msg);

/* What a checkpoint's cursor must fit: this rank's epoch of the data set (none for the caller's batches). */
tr_ckpt_expect run_ckpt_expect(const tr_run_state *t);

/* Free everything tr_run_open allocated (the background save and the loader thread joined first). */
void run_teardown(tr_run_state *t);

/* ---- run_eval.c: evaluation (t->eval) */

/* A periodic evaluation is due after this step: eval.every_steps, or an epoch's end with eval.every_epoch. */
int run_eval_due(const tr_run_state *t);

/* The periodic evaluation: the pass (run_evaluate), then model selection and curves.png; its time is left out of
 * the open log window's samples/s. */
int run_validate(tr_run_state *t, tr_error *err);

/* Evaluate `ds` ("val" or "test") with the weights eval.weights names (live, EMA or both), each an eval event;
 * *loss_out / *acc_out (may be NULL) get the live figures (the EMA's when only those are evaluated), every figure
 * goes into t->eval.fig. A phase change before and after. */
int run_evaluate(tr_run_state *t, const tr_dataset *ds, const char *split, double *loss_out, double *acc_out,
                 tr_error *err);

/* ---- run_select.c: model selection (t->sel; its checkpointed state p.sel) */

/* checkpoint.monitor, early_stopping.monitor and a plateau schedule's monitor, checked against the task and the
 * evaluation (TR_E_CONFIG naming the key); their state starts empty (a resume replaces it with the checkpoint's). */
int run_setup_selection(tr_run_state *t, tr_error *err);

/* After a resume: keep the checkpoint's selection state where it was kept for the same metric and mode; a part
 * whose monitor or mode changed (or that the checkpoint lacks) starts afresh, with a warning. */
void run_select_reconcile(tr_run_state *t);

/* After each periodic evaluation: the top-k (a checkpoint is then due: t->ckpt.best_due), the plateau schedule,
 * early stopping (p.sel.es.stopped, t->sel.stop_reason). */
void run_select_after_eval(tr_run_state *t);

/* ---- run_ckpt.c: the run's side of the checkpoint policy (t->ckpt, ckpt_policy.h) */

/* Start the policy from cfg->checkpoint with the run's hooks: its clock, the generators of every rank, the record,
 * event and best.json of each save. The background save in flight: tr_ckpt_policy_busy / _settle. */
void run_ckpt_init(tr_run_state *t);

/* checkpoint.every_seconds of training time have passed since the last checkpoint (this process's view). */
int run_ckpt_interval_due(const tr_run_state *t);

/* Why a checkpoint is due after this step ("best", "steps", "interval" as the ranks agreed), or NULL. */
const char *run_ckpt_due(const tr_run_state *t);

/* Save a checkpoint of this step for `reason` ("best", "steps", "interval", "end", "signal", "watchdog"), unless
 * one of this step exists; with `wait` complete (or failed) on return. Every rank calls it; rank 0 writes. */
int run_ckpt_save(tr_run_state *t, const char *reason, int wait, tr_error *err);

/* ---- run_watchdog.c: the memory watchdog (t->wd) */

/* watchdog.snapshot: start recording the CUDA allocator's history (main rank). TR_OK or TR_E_RUNTIME. */
int run_watchdog_record(tr_run_state *t, tr_error *err);

/* The sampler from cfg->watchdog and the cache limit it implies. TR_OK or TR_E_RUNTIME (no memory). */
int run_watchdog_open(tr_run_state *t, tr_error *err);

/* memory.cache_limit_bytes and memory.cache_limit_fraction x the watchdog's hard limit, whichever is smaller. */
void run_apply_cache_limit(const tr_run_state *t);

/* The watchdog samples after this step (watchdog.every_steps). */
int run_watchdog_due(const tr_run_state *t);

/* Sample allocated bytes: the baseline once warmed up, then warn / limit reports; at the limit with
 * watchdog.action checkpoint_exit this rank asks to stop (t->wd.pending). */
void run_watchdog_sample(tr_run_state *t);

/* The watchdog stops the run at this step (the ranks agreed): the loop ends, tr_run_finish saves. */
int run_watchdog_stop_due(const tr_run_state *t);
int run_watchdog_stop(tr_run_state *t);

/* What grew since the baseline, by (phase, size), for `reason` ("warn", "limit", "end"): log lines (log_lines),
 * memory_report.json, on CUDA memory_snapshot.pickle. Failures are logged, not fatal. Main rank only. */
void run_watchdog_report(tr_run_state *t, const char *reason, int log_lines);

/* Stop the CUDA history recording (the run is over); free the sampler and the baseline's snapshot. */
void run_watchdog_stop_recording(tr_run_state *t);
void run_watchdog_free(tr_run_state *t);

/* ---- run_restore.c */

/* Resume from t->dir.resume_from, or start from init.from weights, or from the seed's initialisation. */
int run_restore(tr_run_state *t, tr_error *err);

/* ---- run_dir.c */

/* The run directory (created, or found with an earlier run of the name) and its lock (run_lock.h), taken before
 * anything in it is touched: TR_E_LOCKED when another process holds it. */
int run_dir_claim(tr_run_state *t, tr_error *err);

/* What to resume from in the claimed run directory (or a fresh start in it). */
int run_dir_setup(tr_run_state *t, tr_error *err);

/* Release the run directory's lock; a directory run_dir_claim made and nothing used (set-up failed before
 * run_dir_setup: a config the data or model refuses) is removed with its lock file, so a refused start leaves
 * nothing behind. */
void run_dir_release(tr_run_state *t);

/* config.yaml and the model's copy in the run directory; `resumed`: rewritten after a resume. */
int run_dir_write_files(tr_run_state *t, int resumed, tr_error *err);

/* Open log.trace: a fresh run writes its header and config, a resumed one a resume record. */
int run_open_trace(tr_run_state *t, tr_error *err);

/* ---- run_loader.c */

/* A batch of n samples over slot `s`'s buffers (NULL: none, for the caller to point), shaped for the model. */
trs_batch run_batch_view(const tr_run_state *t, const tr_loader_slot *s, int64_t n);

/* The run's cursor stands at the end of an epoch (never for a callback's batches). */
int run_epoch_done(const tr_run_state *t);

/* Position the loader at the run's cursor and start its thread when data.prefetch. */
int run_start_loader(tr_run_state *t, tr_error *err);

/* The next training batch into *b, the run's cursor moved past it. */
int run_next_batch(tr_run_state *t, trs_batch *b, tr_error *err);

/* ---- run_events.c */

/* Hand `ev` to every sink of the run: metrics.jsonl and console, trace, the caller's hook, the summary. */
void run_emit(tr_run_state *t, const tr_event *ev);

/* RUN_DIR/curves.png redrawn from metrics.jsonl (main process, log open); a failure is logged once, not retried. */
void run_draw_curves(tr_run_state *t);

/* ---- summary.c */

/* The summary sink: a watchdog baseline's figures; at TR_EV_END, t->sum filled and summary.json written (by the
 * main process of a run whose log is open). */
void run_summary_event(tr_run_state *t, const tr_event *ev);

#endif
