/*
 * history.h -- a run's metrics as they stand: metrics.jsonl read back as untrusted input, with the records a
 * resume superseded dropped, and the views made from it (metrics.csv here, curves.png in plot.h).
 *
 * metrics.jsonl is append-only: a run that is killed and resumed has logged records the resumed run logs again.
 * The rule a reader applies (and this one does): a {"type":"resume","step":R} record supersedes every record
 * before it whose "step" is greater than R, and every train record before it marked "partial":true (a window a
 * stop closed early; the resumed run logs it again in full). What is left is the history of one uninterrupted run.
 *
 * metrics.csv is PyTorch Lightning's CSVLogger shape: a header row, then one row per train or eval record, "step"
 * and "epoch" first, then a column per metric in the order they first appear, an empty cell where a record has no
 * such metric. Columns: train records give train_loss, train_accuracy, lr, samples_per_s, time_s; eval records
 * give <split>[_ema]_<metric> (val_loss, val_accuracy, val_top_k_accuracy, val_micro_f1, val_macro_f1, val_mse,
 * val_mae, test_..., val_ema_...); both give allocated, peak, reserved and rss (bytes). Numbers are printed as
 * the shortest of %.15g, %.16g and %.17g that reads back as the same double, so each cell reads back as the
 * double the JSONL record holds; a JSON null (a non-finite value) is an empty cell.
 */
#ifndef TR_HISTORY_H
#define TR_HISTORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

#define TR_HIST_MAX_FIELDS 24
#define TR_HIST_NAME 40

typedef enum tr_hist_type { TR_HIST_OTHER = 0, TR_HIST_TRAIN, TR_HIST_EVAL, TR_HIST_RESUME } tr_hist_type;

/** One record: its kind, step, epoch and numeric fields under their CSV column names. */
typedef struct tr_hist_record {
    tr_hist_type type;
    int64_t step, epoch;
    int partial;                 /**< a train record with "partial":true                           */
    int n;                       /**< fields below                                                  */
    struct {
        char name[TR_HIST_NAME]; /**< column name: train_loss, lr, val_accuracy, allocated, ...     */
        double value;            /**< NAN for a JSON null                                           */
    } f[TR_HIST_MAX_FIELDS];
} tr_hist_record;

/** A run's records in order, superseded ones dropped. */
typedef struct tr_history {
    tr_hist_record *r;
    size_t n, cap;
    size_t skipped;              /**< lines that were not a JSON object with a numeric "step" (reported, not fatal) */
} tr_history;

/**
 * Parse one metrics.jsonl line into *out. Returns 1 for a record (of any type), 0 for a line that is not a JSON
 * object with a non-negative integer "step" (then *out is undefined).
 */
int tr_history_parse_line(const char *line, tr_hist_record *out);

/** Add a record, applying the resume rule above when it is a resume record. TR_OK or TR_E_RUNTIME (memory). */
int tr_history_add(tr_history *h, const tr_hist_record *rec, tr_error *err);

/**
 * Read `path` (metrics.jsonl) into *h (zero it first). Lines longer than 64 KiB or not parseable are counted in
 * h->skipped. A missing file is an empty history. TR_OK; TR_E_RUNTIME (unreadable, out of memory) naming the file.
 */
int tr_history_load(tr_history *h, const char *path, tr_error *err);

void tr_history_free(tr_history *h);

/** Value of column `name` in `rec` into *v; 1 when present (possibly NAN), else 0. */
int tr_hist_get(const tr_hist_record *rec, const char *name, double *v);

/** metrics.csv's text for the train and eval records of `h` (the shape above) to `f`. TR_OK or TR_E_RUNTIME. */
int tr_history_write_csv(const tr_history *h, FILE *f);

/*
 * The metrics.csv sink. tr_csv_sink_record() takes each metrics.jsonl line just after it was appended: a train or
 * eval record whose columns the file already has becomes one appended row; a new column, or a resume record,
 * rewrites metrics.csv from metrics.jsonl (atomically: io.h), so the file never holds a superseded row and its
 * header always names every column. A failure is reported once through `warn` and the sink stops (the run goes
 * on: metrics.jsonl remains the record).
 */
typedef struct tr_csv_sink {
    char jsonl[1100], csv[1100];   /**< RUN_DIR/metrics.jsonl and RUN_DIR/metrics.csv                        */
    char **cols;                   /**< the header's columns; NULL until the first rewrite                   */
    size_t n_cols;
    FILE *f;                       /**< metrics.csv open for appending after a rewrite                       */
    int failed;
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
} tr_csv_sink;

/** Point the sink at run_dir (nothing is written until the first record). */
void tr_csv_sink_open(tr_csv_sink *s, const char *run_dir, void (*warn)(void *ctx, const char *msg), void *ctx);

/** One metrics.jsonl line (the record just appended). */
void tr_csv_sink_record(tr_csv_sink *s, const char *line);

void tr_csv_sink_close(tr_csv_sink *s);

#endif
