/*
 * run_internal.h -- what the files of a run share (not a public header): the run's state and the calls between
 *   run.c        the loop: tr_run_step (one step and its concerns), tr_run_finish, tr_run_close
 *   run_setup.c  set-up: threads, data, model, optimizer (tr_run_open), and teardown
 *   run_restore.c the selection monitors, a resume or init.from: where the run starts from
 *   run_dir.c    the run directory's files: the directory and its lock, config.yaml + the model copy, vocab.json,
 *                the trace
 *   run_loader.c the training batches: the epoch's order, the prefetching loader, a callback's batches
 *   run_events.c the event path: each tr_event to every sink (event.h; tensorboard.c is one)
 *   summary.c    tr_summary and summary.json (the summary sink)
 */
#ifndef TR_RUN_INTERNAL_H
#define TR_RUN_INTERNAL_H

/* watchdog.snapshot: allocation/free events the CUDA allocator keeps (the newest; Python users pass ~100000) */
#define TR_SNAPSHOT_MAX_ENTRIES 100000

#include <signal.h>
#include <stdio.h>

#include "checkpoint.h"
#include "ckpt_saver.h"
#include "history.h"
#include "image_folder.h"
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
#include "trainer_core.h"

typedef struct batch_slot {
    float *x;                   /* [batch_size, ...] host batch, allocated once              */
    int64_t *y;                 /* [batch_size]                                              */
    float *t;                   /* [batch_size, K] float targets (multi-hot / regression), or NULL */
    int64_t *ids;               /* token data: [batch_size, block] int64 input ids (y: [batch_size, block]) */
    int64_t n, epoch, pos;      /* rows in it; the epoch it belongs to and the position after it */
} batch_slot;

/* A run's phases, in order: tr_run_step takes steps (STEPPING) until the loop is over (OVER: all steps taken, a
 * stop, the watchdog, an error); tr_run_finish ends it (FINISHED; also a run whose set-up failed or found it
 * complete); the summary is written once (REPORTED). */
typedef enum run_phase { RUN_STEPPING = 0, RUN_OVER, RUN_FINISHED, RUN_REPORTED } run_phase;

/** Everything a run holds; allocated in tr_run_open, freed in tr_run_close. */
struct tr_run_state {
    const tr_config *cfg;
    tr_dataset train, val, test;
    tr_run_data data;           /* the caller's data sources (zero: the config's files)      */
    tr_core core;               /* model, optimizer, EMA (ema.enabled), step options, device, generator
                                   state: trainer_core.h, as the embedding API's trainer holds them */
    tr_metrics metrics;         /* evaluation sums, allocated once                            */
    int batch_ndim;             /* 2 for a [D]-input model, 3 for [T, D], 4 for [C, H, W]    */
    int64_t sample_shape[3];    /* the model spec's input: the batch view's shape[1..batch_ndim) */
    int64_t sample_elems;       /* floats per sample                                         */
    float *xbuf;                /* the batch the step reads: slots[k].x of the slot taken last */
    int64_t *ybuf;              /* ... and its labels, slots[k].y                            */
    float *tbuf;                /* ... and its float targets [n, K], slots[k].t (or NULL)    */
    int64_t *idsbuf;            /* ... token data: its input ids [n, block], slots[k].ids       */
    int64_t block;              /* token data (train.tokens): tokens per window, else 0       */
    int64_t *starts;            /* token data: window starts, [step_batch] (loader) + [eval batch] */
    int64_t *eval_ids, *eval_y; /* token data: one evaluation batch of windows [eval bs, block]  */
    int64_t step_batch;         /* samples per optimizer step: batch_size * accumulate_steps  */
    batch_slot slots[2];        /* batches prepared by the loader (double buffer)            */
    int64_t *perm;              /* the loader's epoch's order (this rank's shard; loader thread only once
                                   started), then scratch for sharding it                   */
    int64_t order_n;            /* samples in an epoch's order: train.n, or the rank's shard  */
    int64_t loader_epoch;       /* the loader's cursor: one batch ahead of p.epoch / p.pos    */
    int64_t loader_pos;
    tr_augment augment;         /* data.augment, for the loader's training batches            */
    tr_prefetch pf;             /* the loader's worker thread when data.prefetch              */
    tr_image_buf loader_buf;    /* image folders: the loader's decoding memory (its thread's)  */
    tr_error loader_err;        /* why the loader failed (a file that does not decode)         */
    tr_image_buf eval_buf;      /* image folders: an evaluation batch decoded (the loop's thread) */
    int malloc_tuned;           /* trs_set_malloc_thresholds applied (malloc_tuning, glibc)   */
    char malloc_warning[320];   /* why it was not (another allocator), for the run's log      */
    int64_t steps_per_epoch, total_steps;
    tr_ckpt_progress p;         /* step, data cursor, time, log window: all a checkpoint carries */
    double t_start;             /* monotonic time when this process's loop started               */
    double elapsed0;            /* p.elapsed at that moment (carried over from a resume)          */
    double last_ckpt_elapsed;   /* training seconds at the last checkpoint                        */
    int64_t last_ckpt_step;     /* its step, -1 before the first                                  */
    int64_t checkpoints_done;
    tr_ckpt_saver saver;        /* the checkpoint being written in the background (checkpoint.async) */
    struct {                    /* ... and what its record needs besides the saver's outcome      */
        double stall, elapsed; /* seconds the loop paused for its snapshot; training seconds then */
        int64_t epoch;
        tr_topk best;          /* checkpoint.save_top_k's set when it was taken                */
    } saving;
    char run_dir[TR_PATH_MAX];
    int run_dir_created;        /* run_dir_claim made the directory (nothing earlier in it)       */
    int run_dir_used;           /* run_dir_setup began: the directory is the run's from here on    */
    tr_run_lock lock;           /* the run directory's one-writer lock (the main process's)       */
    char resume_from[TR_PATH_MAX]; /* checkpoint to resume from, "" for a fresh run              */
    int64_t resumed_at;         /* the step this process resumed at, -1 for a fresh run           */
    double last_step_loss;      /* the loss of this process's last step taken (finite), for a divergence's message */
    int resumed_same_config;    /* ... with the config that saved that checkpoint (fingerprints)  */
    int fell_back;              /* the first step after the resume failed: the checkpoint was set
                                   aside, and a new start resumes from an older one (run.c)      */
    tr_log log;
    tr_watchdog wd;
    int log_open;
    FILE *trace;                /* log.trace, or NULL                                        */
    tr_tb_sink tb;              /* log.tensorboard's events file (main process)               */
    int tb_tried;               /* tr_tb_open was called (once: a failure is not retried)     */
    double lr;                  /* lr of the last step taken                                 */
    double win_t0;              /* monotonic time the open log window started                */
    run_phase phase;            /* where the run stands: stepping, over, finished, reported   */
    int rc;                     /* the status the run ended with                             */
    volatile sig_atomic_t stop; /* tr_run_request_stop on this run                           */
    tr_eval_figures fig[2][2];  /* latest evaluation: [val, test][live, ema]                  */
    tr_summary sum;
    tr_run_event_fn on_event;   /* tr_run_set_event_hook                                     */
    void *event_ctx;
    tr_dist dist;               /* the process group of a multi-process run (dist.h)         */
    int flags;                  /* TR_DIST_* requests every rank agreed on at the last step  */
    int wd_pending;             /* this rank's watchdog asked to stop; the others learn next step */
    int recording_history;      /* watchdog.snapshot: the CUDA allocator's history is being recorded (main rank) */
    double step_seconds_here;   /* seconds in train steps in this process (for the all-reduce share) */
    double allreduce0;          /* all-reduce seconds spent in set-up, before the first step      */
    tr_memsnap mem_base;        /* live blocks by (phase, size) at the watchdog's baseline        */
    trs_memory_stats mem_base_stats; /* allocated / reserved / RSS at the baseline                  */
    tr_csv_sink csv;            /* metrics.csv, fed each metrics.jsonl record (history.h)         */
    tr_monitor topk_mon, es_mon, plateau_mon; /* checkpoint.monitor, early_stopping.monitor, schedule.monitor */
    int has_topk, has_es, has_plateau;
    int best_due;               /* the last evaluation entered the top-k: save a checkpoint now   */
    int curves_failed;          /* drawing curves.png failed once: not tried again                */
    char stop_reason[320];      /* why early stopping ended the run ("" = it did not)             */
};

typedef struct tr_run_state trainer;

/* The run's clock (tr_run_data.clock): every time a run reads or writes comes from it. */
static inline double run_now(const trainer *t) { return tr_clock_now(&t->data.clock); }

/* Training seconds, summed over every process of this run. */
static inline double run_elapsed(const trainer *t) { return t->elapsed0 + (run_now(t) - t->t_start); }

/* The set periodic evaluation runs on: the validation split, or the test set with eval.split: test. */
static inline const tr_dataset *run_eval_set(const trainer *t)
{
    return t->cfg->eval.split == TR_EVAL_TEST ? &t->test : &t->val;
}

/* The lr of the step about to be taken: the schedule's, from the plateau's current lr for schedule.name plateau. */
static inline double run_scheduled_lr(const trainer *t)
{
    const double base = t->has_plateau ? t->p.sel.plateau.lr : t->cfg->optim.lr;
    return tr_schedule_lr_from(t->cfg, base, t->p.step, t->total_steps, t->steps_per_epoch);
}

/* The run is over by its own rule: every planned step taken, or early stopping ended it. */
static inline int run_complete(const trainer *t) { return t->p.step >= t->total_steps || t->p.sel.es.stopped; }

/* ---- run.c */

/* Whether a stop was asked for: a signal (tr_request_stop) or the caller (tr_run_request_stop); ctx: the trainer. */
int run_stop_requested(void *ctx);

/* ---- run_setup.c */

/* A checkpoint reader's warning into the run's log (ctx: the tr_log). */
void run_warn_to_log(void *ctx, const char *msg);

/* What a checkpoint's cursor must fit: this rank's epoch of the data set (none for the caller's batches). */
tr_ckpt_expect run_ckpt_expect(const trainer *t);

/* memory.cache_limit_bytes and memory.cache_limit_fraction x the watchdog's hard limit, whichever is smaller. */
void run_apply_cache_limit(const trainer *t);

/* Free everything tr_run_open allocated (the background save and the loader thread joined first). */
void run_teardown(trainer *t);

/* ---- run_restore.c */

/* checkpoint.monitor, early_stopping.monitor and a plateau schedule's monitor, checked against the task and the
 * evaluation (TR_E_CONFIG naming the key); their state starts empty (a resume replaces it with the checkpoint's). */
int run_setup_selection(trainer *t, tr_error *err);

/* Resume from t->resume_from, or start from init.from weights, or from the seed's initialisation. */
int run_restore(trainer *t, tr_error *err);

/* ---- run_dir.c */

/* The run directory (created, or found with an earlier run of the name) and its lock (run_lock.h), taken before
 * anything in it is touched: TR_E_LOCKED when another process holds it. */
int run_dir_claim(trainer *t, tr_error *err);

/* What to resume from in the claimed run directory (or a fresh start in it). */
int run_dir_setup(trainer *t, tr_error *err);

/* Release the run directory's lock; a directory run_dir_claim made and nothing used (set-up failed before
 * run_dir_setup: a config the data or model refuses) is removed with its lock file, so a refused start leaves
 * nothing behind. */
void run_dir_release(trainer *t);

/* config.yaml and the model's copy in the run directory; `resumed`: rewritten after a resume. */
int run_dir_write_files(trainer *t, int resumed, tr_error *err);

/* Token data: check the vocabulary against the weights' and write RUN_DIR/vocab.json. */
int run_dir_write_vocab(trainer *t, tr_error *err);

/* Open log.trace: a fresh run writes its header and config, a resumed one a resume record. */
int run_open_trace(trainer *t, tr_error *err);

/* ---- run_loader.c */

/* A batch of n samples over the buffers the step reads (t->xbuf, ...), shaped for the model. */
trs_batch run_batch_view(const trainer *t, int64_t n);

/* The run's cursor stands at the end of an epoch (never for a callback's batches). */
int run_epoch_done(const trainer *t);

/* Position the loader at the run's cursor and start its thread when data.prefetch. */
int run_start_loader(trainer *t, tr_error *err);

/* The next training batch into *b, the run's cursor moved past it. */
int run_next_batch(trainer *t, trs_batch *b, tr_error *err);

/* ---- run_events.c */

/* Hand `ev` to every sink of the run: metrics.jsonl and console, trace, the caller's hook, the summary. */
void run_emit(trainer *t, const tr_event *ev);

/* ---- summary.c */

/* The summary sink: a watchdog baseline's figures; at TR_EV_END, t->sum filled and summary.json written (by the
 * main process of a run whose log is open). */
void run_summary_event(trainer *t, const tr_event *ev);

#endif
