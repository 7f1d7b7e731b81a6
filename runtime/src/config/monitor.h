/*
 * monitor.h -- what model selection watches and keeps: the monitored metric's name (a config value), and the
 * state a checkpoint carries -- the top-k set of checkpoint.save_top_k (PyTorch Lightning's ModelCheckpoint),
 * early stopping's (Lightning's EarlyStopping) and the plateau schedule's (ReduceLROnPlateau). The decisions that
 * change that state are core/selection.h (top-k, early stopping) and schedule.h (plateau); best.json is best.h.
 *
 * Pure C without libtorch: the state structs are saved in every checkpoint's trainer.json ("selection") and read
 * back by checkpoint_meta.c, so a resumed run keeps the same checkpoints and stops at the same step.
 */
#ifndef TR_MONITOR_H
#define TR_MONITOR_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define TR_TOPK_MAX 100      /**< most checkpoints save_top_k may keep                                     */
#define TR_MONITOR_NAME 40

/** The metrics a monitor can name (the part after "<split>[_ema]_"). */
typedef enum tr_monitor_metric {
    TR_MON_LOSS = 0, TR_MON_ACCURACY, TR_MON_TOP_K_ACCURACY, TR_MON_MICRO_F1, TR_MON_MACRO_F1, TR_MON_MSE, TR_MON_MAE
} tr_monitor_metric;

/** A parsed monitor name: "<split>[_ema]_<metric>", e.g. val_loss, val_accuracy, val_ema_micro_f1, test_mse. */
typedef struct tr_monitor {
    int test;                    /**< 1: the split is "test" (eval.split: test), 0: "val"                   */
    int ema;                     /**< 1: the EMA weights' figures                                            */
    tr_monitor_metric metric;
} tr_monitor;

/**
 * Parse a monitor name. Returns 0, or -1 with the reason in why[n] (for config errors: "expected
 * <split>[_ema]_<metric> ...").
 */
int tr_monitor_parse(const char *name, tr_monitor *out, char *why, size_t n);

/** The metric's name as it appears in monitor names and eval records: "loss", "accuracy", ... */
const char *tr_monitor_metric_name(tr_monitor_metric m);

/* ------------------------------------------------------------------------------------------------ top-k */

/** checkpoint.save_top_k's set: the best scores so far, best first; ties keep the earlier step first. */
typedef struct tr_topk {
    int n;
    int64_t step[TR_TOPK_MAX];
    double score[TR_TOPK_MAX];
} tr_topk;

/** Whether `step` is in the set. */
int tr_topk_has(const tr_topk *t, int64_t step);

/* ------------------------------------------------------------------------------------------------ early stopping */

/** Lightning's EarlyStopping state: best score, evaluations without improvement, whether it stopped. */
typedef struct tr_early_stop {
    double best;                 /**< +inf (min) / -inf (max) before the first evaluation                   */
    int64_t best_step;           /**< -1 before the first improvement                                       */
    int64_t wait;                /**< evaluations since the last improvement                                */
    int stopped;                 /**< 1 once it asked the run to stop                                       */
} tr_early_stop;

/* ------------------------------------------------------------------------------------------------ plateau */

/** ReduceLROnPlateau's state (torch.optim.lr_scheduler.ReduceLROnPlateau; schedule.h steps it). */
typedef struct tr_plateau {
    double lr;                   /**< the plateau schedule's current lr                                      */
    double best;                 /**< +inf (min) / -inf (max) before the first evaluation                   */
    int64_t bad;                 /**< num_bad_epochs (counted in evaluations)                               */
    int64_t cooldown;            /**< cooldown_counter                                                      */
    int64_t reductions;          /**< times the lr was reduced                                              */
} tr_plateau;

/* ------------------------------------------------------------------------------------------------ state */

/** All selection state a checkpoint carries (trainer.json "selection"); metric names say what it was kept for. */
typedef struct tr_select_state {
    char topk_metric[TR_MONITOR_NAME];   /**< checkpoint.monitor it was kept for ("" = none)                 */
    int topk_max;                        /**< its mode                                                       */
    tr_topk topk;
    char es_metric[TR_MONITOR_NAME];     /**< early_stopping.monitor ("" = none)                             */
    int es_max;
    tr_early_stop es;
    char plateau_metric[TR_MONITOR_NAME]; /**< schedule.monitor of a plateau schedule ("" = none)            */
    tr_plateau plateau;
} tr_select_state;

#endif
