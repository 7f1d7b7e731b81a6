/*
 * log.h -- what a run tells people and files: metrics as JSON Lines in the run directory, one live progress line
 * on a terminal (plain periodic lines otherwise), and messages that don't tear the progress line.
 *
 * metrics.jsonl records (one JSON object per line; floats printed with %.17g so they round-trip):
 *   {"type":"train","step":S,"epoch":E,"loss":L,"accuracy":A,"lr":LR,"samples_per_s":R,"time_s":T}
 *       loss / accuracy: mean over the steps since the previous train record; step: optimizer steps done;
 *       samples_per_s: over the same window; time_s: training seconds since the run started. A window closed
 *       early by a stop adds "partial":true.
 *   {"type":"eval","split":"val"|"test","step":S,"epoch":E,"loss":L,"accuracy":A,"correct":C,"samples":N,
 *    "seconds":T}     (the eval event adds "weights":"live"|"ema" and the task's metrics: "top_k_accuracy";
 *    "micro_f1", "macro_f1", "tp", "fp", "fn"; "mse", "mae", "elements")
 *   {"type":"watchdog","event":"baseline"|"warn"|"limit","step":S,"baseline":B,"allocated":A,"limit":L,
 *    "growth_per_step":G,"steps_left":K}   (steps_left -1: not growing or no limit)
 *   {"type":"checkpoint","step":S,"reason":R,"path":P,"bytes":B,"seconds":T,"elapsed_s":E}
 *   {"type":"resume","step":S,"epoch":E,"position":K,"checkpoint":P}
 * Every record also carries "allocated" and "peak": live and peak CPU tensor bytes (trs_memory_stats_get) at the
 * moment it was written. The file is append-only: a resumed run logs again what its killed predecessor logged
 * after the checkpoint; readers drop those records by the rule in history.h (a resume record at step R supersedes
 * earlier records with step > R and earlier partial train records). Each record is also handed, as written, to
 * tr_log.on_record (metrics.csv hangs there).
 */
#ifndef TR_LOG_H
#define TR_LOG_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "checkpoint.h" /* tr_ckpt_progress: the open log window a checkpoint carries */
#include "config.h"
#include "device.h"
#include "error.h"
#include "event.h"
#include "sys.h" /* tr_now */
#include "watchdog.h"

/** What a console line is (tr_log_sink_fn). */
typedef enum tr_log_kind { TR_LOG_MESSAGE = 1, TR_LOG_PROGRESS = 2 } tr_log_kind;

/** Receives each console line instead of the console (no trailing newline); see tr_log.sink. */
typedef void (*tr_log_sink_fn)(void *ctx, tr_log_kind kind, const char *line);

/**
 * The clock a run and its log take their time from: training seconds (checkpoint.every_seconds, the elapsed_s
 * checkpoints carry), the plain progress line's 10 s cadence and the live line's refresh, samples/s, step and
 * evaluation seconds, a checkpoint's stall. now(ctx) returns seconds on a monotonic scale (any origin; only
 * differences are used), called on the run's thread only (a background save times its writing with tr_now()).
 * Zero: tr_now(). Tests drive a fake one so that time-keyed behaviour happens at exact steps.
 */
typedef struct tr_clock {
    double (*now)(void *ctx);
    void *ctx;
} tr_clock;

/** Where console lines go instead of stderr (the embedding API): fn, or nowhere when set with fn NULL. */
typedef struct tr_log_sink {
    int set;               /**< 1: lines go to fn (NULL fn: dropped), never to the console */
    tr_log_sink_fn fn;
    void *ctx;
} tr_log_sink;

typedef struct tr_log {
    FILE *jsonl;           /**< metrics.jsonl (append)                                   */
    FILE *console;         /**< where progress goes (stderr)                             */
    int live;              /**< 1: rewrite one line with \r; 0: plain periodic lines     */
    int line_open;         /**< a live line is on screen and must be cleared first       */
    int progress;          /**< progress lines wanted (not log.progress: never with a sink) */
    int console_dead;      /**< a console write failed (closed pipe or terminal): stop writing there */
    int64_t total_steps;
    int64_t step0;         /**< step the run stood at when this process started (resume) */
    double elapsed0;       /**< training seconds of earlier processes of the run          */
    double t_start;        /**< monotonic seconds at tr_log_open                         */
    double t_last_print;
    double last_val_acc;   /**< shown on the progress line; < 0 until the first eval     */
    tr_device memory_device; /**< whose memory figures records carry (zeroed: the CPU's; device.h)  */
    tr_log_sink sink;      /**< kept across tr_log_open                                   */
    tr_clock clock;        /**< where t_start, progress cadence and time_s come from; kept across tr_log_open */
    /** Called with each metrics.jsonl record (one line, "\n"-terminated) right after it was appended: the
     *  sinks derived from the JSONL hang here (metrics.csv). Kept across tr_log_open; NULL: none. */
    void (*on_record)(void *ctx, const char *line);
    void *record_ctx;
} tr_log;

/** The figures of one progress line. */
typedef struct tr_progress {
    int64_t step, total, epoch;
    double loss, accuracy;
    double val_accuracy;   /**< < 0: no validation yet                                   */
    double lr, samples_per_s;
    double elapsed_s;      /**< training seconds so far, earlier processes included      */
    double eta_s;          /**< < 0: unknown                                             */
} tr_progress;

/**
 * The live progress line for a terminal `width` columns wide, into out[n]: at most width - 1 characters (the
 * last column would wrap on some terminals), never a newline. Fields in order: step/total, a bar with the percent
 * done, epoch, loss, acc, val_acc, lr, samples/s, elapsed, ETA. When they don't all fit, fields are dropped
 * lowest priority first: the bar, samples/s, epoch, acc, lr, val_acc, elapsed; step, loss and ETA stay (cut at
 * the width on a terminal too narrow even for them). Returns the length written.
 */
size_t tr_progress_format(const tr_progress *p, int width, char *out, size_t n);

/**
 * A plain progress line (stderr not a terminal): every field, no bar, prefixed with the local wall-clock time
 * `wall` as "YYYY-MM-DD HH:MM:SS". Returns the length written.
 */
size_t tr_progress_format_plain(const tr_progress *p, time_t wall, char *out, size_t n);

/** Columns of the terminal on `fd` (TIOCGWINSZ), else $COLUMNS, else 80. */
int tr_terminal_width(int fd);

/** Seconds from `c` (c->now(c->ctx)), or tr_now() when c is NULL or has no now. */
double tr_clock_now(const tr_clock *c);

/** Zero `log` but for what its owner set before opening it: sink, clock, on_record and record_ctx (tr_log_open
 *  and the other ranks' tr_dist_log_open start from here). */
void tr_log_reset(tr_log *log);

/** Open run_dir/metrics.jsonl for appending and decide live vs plain output. TR_OK or TR_E_RUNTIME. */
int tr_log_open(tr_log *log, const tr_config *cfg, const char *run_dir, int64_t total_steps, tr_error *err);

/**
 * The metrics.jsonl and console sink of the run's events (event.h): a TR_EV_TRAIN window becomes a train record
 * and refreshes the progress line (live: at most ~5 times a second; plain: every 10 s of the log's clock and the
 * last step; partial windows get "partial":true); TR_EV_EVAL an eval record with the task's metrics
 * (tr_metrics_write_json) and a line; TR_EV_CHECKPOINT, TR_EV_WATCHDOG and TR_EV_RESUME a record and a line.
 * Other kinds write nothing.
 */
void tr_log_event(tr_log *log, const tr_event *ev);

/** Print a message line on the console without tearing the progress line. */
void tr_log_message(tr_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Flush and close (safe to call twice). */
void tr_log_close(tr_log *log);

/** Add one step's scalars (r: its loss, correct and sample counts) to the open log window p->win_*. */
void tr_log_window_add(tr_ckpt_progress *p, const trs_step_result *r);

/**
 * Close the open log window into its train record's event (TR_EV_TRAIN at p->step): loss the mean of its step
 * losses, accuracy its correct count over win_samples x labels_per_sample (1, or a token window's positions),
 * samples_per_s over `seconds` (at least 1e-9), `lr` and `partial` as given; the window is emptied. The run and
 * the trainer's log close their windows with it.
 */
tr_event tr_log_window_close(tr_ckpt_progress *p, double lr, double seconds, double labels_per_sample, int partial);

#endif
