/*
 * selection.h -- model selection on a monitored metric (the names and state structs: monitor.h): which
 * evaluations enter checkpoint.save_top_k's set (PyTorch Lightning's ModelCheckpoint) and when early stopping ends
 * the run (Lightning's EarlyStopping). The plateau schedule's rule (ReduceLROnPlateau) is schedule.h.
 */
#ifndef TR_SELECTION_H
#define TR_SELECTION_H

#include <stddef.h>
#include <stdint.h>

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

#endif
