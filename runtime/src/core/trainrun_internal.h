/*
 * trainrun_internal.h -- what the embedding API's files (trainrun.c, trainrun_data.c, trainrun_run.c,
 * trainrun_trainer.c) share: a data source's handle, the checks of a caller's batch view, config loading and the
 * growth records. Not part of the public header.
 */
#ifndef TR_TRAINRUN_INTERNAL_H
#define TR_TRAINRUN_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "trainrun/trainrun.h"

#include "config.h"
#include "data.h"
#include "error.h"
#include "log.h"
#include "memreport.h"
#include "metrics.h"
#include "trainrun_shim.h"

/* A data source (trainrun_data.c); runs read it (trainrun_run.c). */
struct trainrun_data {
    tr_error err;
    tr_dataset ds;              /* arrays: the copy                                      */
    trainrun_batch_fn fn;       /* callback                                              */
    void *ctx;
    int64_t c, h, w;            /* callback: per-sample shape                            */
    int ndim;                   /* arrays: the batch view's ndim (2..4), which ds's c, h, w flatten */
    int64_t sample[3];          /* ... and its shape[1..ndim): the caller's, or the model's input for files */
    int from_files;             /* trainrun_trainer_open_data: the config's files (data.mean / data.std apply) */
    atomic_int users;           /* splits of open runs holding it (trainrun_run_set_data), and trainers
                                   batching it (trainrun_trainer_next_batch) */
};

/** The message of a call given a NULL handle. */
extern const char tr_api_null_handle[];

/** Set *err to TRAINRUN_E_INVALID with `msg`; returns TRAINRUN_E_INVALID. */
int tr_api_invalid(tr_error *err, const char *msg);

/** Check a caller's batch view and turn it into the shim's (trainrun.c). TRAINRUN_OK or TRAINRUN_E_INVALID. */
int tr_api_batch_view_in(const trainrun_batch *v, trs_batch *b, int need_y, tr_error *err);
/** The view of a data source or a callback batch: FLOAT32 inputs and class-index targets. */
int tr_api_batch_from_view(const trainrun_batch *v, trs_batch *b, tr_error *err);

/** The config of a run or a trainer: a file (path) or YAML text, then the overrides; validated. */
int tr_api_load_config(tr_config *cfg, const char *path, const char *yaml, const char *const *overrides, int n,
                       tr_error *err);

/** An evaluation's figures as trainrun.h reports them (trainrun_eval_result). */
trainrun_eval_result tr_api_eval_result(const tr_eval_figures *f);

/** Growth records into the caller's plain structs (at most cap of the n). */
void tr_api_copy_growth(const tr_mem_growth *g, size_t n, trainrun_memory_growth *out, size_t cap);

/** Where a run's or a trainer's console lines go (trainrun_run_set_log, trainrun_trainer_set_log). */
typedef struct tr_api_log {
    int set;                    /* set_log was called: lines go to fn (NULL: nowhere), never to stderr */
    trainrun_log_fn fn;
    void *ctx;
} tr_api_log;

/** The log's sink (log.h) that hands its lines to `l`'s function as trainrun.h names their kinds; zero (lines to
 * stderr) when set_log was not called. `l` must outlive the log. */
tr_log_sink tr_api_log_sink(const tr_api_log *l);

/** An event of the event path (event.h) as trainrun.h reports it: *out gets the fields its kind names (trainrun.h,
 * trainrun_event) and 0 / NULL for the others; its strings point at e's. Returns the trainrun_event_kind: STEP,
 * EVAL (only an evaluation of the weights eval.weights reports), CHECKPOINT, WATCHDOG; 0 for an event the API does
 * not report (*out untouched then). */
struct tr_event;
int tr_api_event_of(const struct tr_event *e, trainrun_event *out);

#endif
