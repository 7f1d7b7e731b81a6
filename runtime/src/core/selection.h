/*
 * selection.h -- model selection on a monitored metric (the names and state structs: monitor.h): which
 * evaluations enter checkpoint.save_top_k's set (PyTorch Lightning's ModelCheckpoint) and when early stopping ends
 * the run (Lightning's EarlyStopping). The plateau schedule's rule (ReduceLROnPlateau) is schedule.h.
 */
#ifndef TR_SELECTION_H
#define TR_SELECTION_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "monitor.h"

/** Whether `a` is better than `b` for mode max (else min), strictly; NaN is never better. */
int tr_monitor_better(double a, double b, int mode_max);

/* ------------------------------------------------------------------------------------------------ top-k */

/**
 * Offer the evaluation after `step` scoring `score` to a set of at most k (1..TR_TOPK_MAX). It enters when the
 * set has fewer than k entries or it is strictly better than the worst one (which then leaves: *evicted gets its
 * step, else -1); a non-finite score never enters. Returns 1 when it entered. Lightning's ModelCheckpoint rule.
 */
int tr_topk_offer(tr_topk *t, int k, int mode_max, int64_t step, double score, int64_t *evicted);

/* ------------------------------------------------------------------------------------------------ early stopping */

/** A fresh state for mode max (else min): best -inf (max) / +inf (min), best_step -1, wait 0, not stopped. */
void tr_early_stop_init(tr_early_stop *e, int mode_max);

/**
 * One evaluation's value of the monitored metric. Improvement (Lightning's rule): value < best - min_delta
 * (mode min) or value > best + min_delta (mode max); it resets wait to 0, otherwise wait += 1. Returns 1 when
 * the run must stop: wait reached `patience`, or the value is not finite (Lightning's check_finite); the reason
 * then goes into why[n].
 */
int tr_early_stop_update(tr_early_stop *e, int mode_max, double min_delta, int64_t patience, int64_t step,
                         double value, const char *metric, char *why, size_t n);

/* ------------------------------------------------------------------------------------------------ the three together */

/** Which monitors of a config an evaluation is offered to (bits). */
enum { TR_SEL_TOPK = 1, TR_SEL_EARLY_STOP = 2, TR_SEL_PLATEAU = 4 };

/** The monitors cfg sets: TR_SEL_TOPK (checkpoint.monitor), TR_SEL_EARLY_STOP (early_stopping.monitor),
 *  TR_SEL_PLATEAU (schedule.name plateau). */
unsigned tr_select_monitors(const tr_config *cfg);

/** The selection state of a run or trainer that has evaluated nothing yet: each monitor cfg sets, with its metric
 *  name and mode; early stopping and the plateau at their fresh states. */
void tr_select_init(const tr_config *cfg, tr_select_state *s);

/** What one evaluation did to the selection (tr_select_offer). */
typedef struct tr_select_outcome {
    int best;                  /* it entered checkpoint.save_top_k's set: a checkpoint of this step is due        */
    int64_t evicted;           /* the step that left the set for it, -1: none                                     */
    int lr_reduced;            /* the plateau schedule reduced its lr, from lr_before to s->plateau.lr            */
    double lr_before;
    int stop;                  /* early stopping ends training now (why: the reason)                              */
    char why[256];
} tr_select_outcome;

/**
 * Offer the evaluation after optimizer step `step` to the monitors in `which` (TR_SEL_* bits, only those cfg sets
 * count), value[i] being the figure of monitor i (0 top-k, 1 early stopping, 2 plateau), in Lightning's order:
 * the top-k first (ModelCheckpoint saves before EarlyStopping stops), then the plateau schedule, then early
 * stopping (nothing once it stopped).
 */
void tr_select_offer(const tr_config *cfg, tr_select_state *s, unsigned which, int64_t step, const double value[3],
                     tr_select_outcome *o);

/**
 * After a resume: keep the checkpoint's selection state where it was kept for the metric and mode cfg names; a
 * part whose monitor or mode changed (or that the checkpoint lacks) starts afresh, and a plateau lr above
 * optim.lr comes down to it. Returns the parts that changed (TR_SEL_* bits; TR_SEL_PLATEAU also for the lr cap).
 * The top-k set is kept when checkpoint.monitor was turned off (its checkpoints stay protected).
 */
unsigned tr_select_reconcile(const tr_config *cfg, tr_select_state *s);

#endif
