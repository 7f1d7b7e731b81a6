/*
 * tensorboard.h -- the TensorBoard sink of the event path (event.h; log.tensorboard: true): each train record and
 * each evaluation as scalars in RUN_DIR/tensorboard/events.out.tfevents.* (tfevents.h), the run's config as
 * hyperparameters once, and a resumed run continuing the same curves (docs/tensorboard.md).
 *
 * Scalars, at the record's step and the wall-clock time it was handled:
 *   train record   train/loss, train/accuracy, train/lr, train/samples_per_s, memory/allocated_bytes,
 *                  memory/reserved_bytes (the run device's, as metrics.jsonl's "allocated" / "reserved")
 *   eval record    SPLIT/loss, SPLIT/accuracy (classification), SPLIT/top_k_accuracy (eval.top_k),
 *                  SPLIT/micro_f1, SPLIT/macro_f1 (multi-label), SPLIT/mse, SPLIT/mae (regression), with SPLIT
 *                  "val", "test", "val_ema", "test_ema"
 * Every process of a run writes its own file (TensorBoard's rule: one file per writer), named to sort after the
 * earlier ones. It starts with a SessionLog START at the step the process starts from + 1: TensorBoard then drops
 * what an earlier process logged after the checkpoint this one resumed from, so no step appears twice. The
 * hyperparameters (every config key, as config.yaml has it) are written by the run's first process only.
 */
#ifndef TR_TENSORBOARD_H
#define TR_TENSORBOARD_H

#include "config.h"
#include "device.h"
#include "event.h"
#include "tfevents.h"

/** Wall-clock seconds since the epoch; NULL fn: CLOCK_REALTIME. Tests drive a fixed one. */
typedef struct tr_wall_clock {
    double (*now)(void *ctx);
    void *ctx;
} tr_wall_clock;

typedef struct tr_tb_sink {
    tr_tfevents file;
    tr_device device; /**< whose allocated / reserved the train scalars carry */
    tr_wall_clock wall;
    int open, failed;
    char warning[2200]; /**< why writing stopped ("" while fine): the caller logs it once */
} tr_tb_sink;

/**
 * Open the sink: create RUN_DIR/tensorboard/ and a new events file in it, write SessionLog START at
 * `start_step` + 1 and, when `first_process` (a fresh run), the hyperparameters of `cfg`. Errors: TR_E_RUNTIME
 * naming the folder or file.
 */
int tr_tb_open(tr_tb_sink *s, const char *run_dir, const tr_config *cfg, int64_t start_step, int first_process,
               const tr_device *device, const tr_wall_clock *wall, tr_error *err);

/**
 * The sink: TR_EV_TRAIN and TR_EV_EVAL become scalars (list above), TR_EV_END closes the file; other kinds write
 * nothing. A failed write stops the sink for the rest of the run and fills s->warning (returns 1 that once).
 */
int tr_tb_event(tr_tb_sink *s, const tr_event *ev);

/** Close (safe twice, and on a zeroed sink). */
void tr_tb_close(tr_tb_sink *s);

#endif
