/*
 * metrics.h -- evaluation metrics accumulated in C from the counts the shim returns per batch.
 *
 * The shim returns, per batch, only scalars and integer counts (trs_step_result, trs_class_counts); a tr_metrics
 * adds them up over a data set and derives:
 *  - classification (cross_entropy): accuracy = correct / targets, top-k accuracy = topk_correct / targets
 *    (targets = the labels counted: samples for [N] labels, non-ignored positions for [N, T] labels), and a
 *    K x K confusion matrix (row = true class, column = prediction);
 *  - multi-label (bce_with_logits): per-class TP / FP / FN (prediction: logit > 0), micro F1 =
 *    2 sum TP / (2 sum TP + sum FP + sum FN), macro F1 = mean over classes of 2 TP / (2 TP + FP + FN) (a class
 *    with TP = FP = FN = 0 scores 0, as sklearn.metrics.f1_score with zero_division=0), and subset (exact-match)
 *    accuracy;
 *  - regression (mse, smooth_l1): MSE = sum of squared errors / elements, MAE = sum of absolute errors / elements
 *    (elements = samples * K).
 * Every array is allocated once by tr_metrics_init, so evaluating allocates nothing.
 */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "trainrun_shim.h"

typedef enum tr_task { TR_TASK_CLASSIFY = 0, TR_TASK_MULTI_LABEL, TR_TASK_REGRESSION } tr_task;

typedef struct tr_metrics {
    tr_task task;
    int64_t k;                    /**< classes / outputs                                              */
    double loss_sum;              /**< sum over batches of mean loss x batch samples                  */
    int64_t samples, correct, topk_correct;
    int64_t *confusion;           /**< [k, k] (classification)                                        */
    int64_t *tp, *fp, *fn;        /**< [k] each (multi-label)                                         */
    double sse, sae;              /**< regression sums                                                */
    int64_t elements;
    int64_t targets;              /**< class targets counted (trs_step_result.targets): the accuracy's denominator */
    trs_class_counts batch;       /**< the arrays the shim fills for one batch (scratch, [k, k] / [k]) */
    const char *bits_name;        /**< language modelling (tr_metrics_set_lm): "bpc", "bpb" or "bits_per_token",
                                       the name of loss / ln 2 in records; NULL otherwise                   */
} tr_metrics;

/** The task a loss implies. */
tr_task tr_task_of_loss(trs_loss_kind loss);

/** Allocate the arrays for `k` classes / outputs and zero everything. TR_OK or TR_E_RUNTIME (out of memory). */
int tr_metrics_init(tr_metrics *m, tr_task task, int64_t k, tr_error *err);

/**
 * Language modelling: records and summaries also carry the loss in bits (loss / ln 2, named `bits_name`: "bpc"
 * bits per character, "bpb" bits per byte, "bits_per_token") and the perplexity exp(loss) (the loss is the mean
 * cross-entropy per token in nats). The K x K confusion matrix is dropped (a vocabulary is too many classes).
 */
void tr_metrics_set_lm(tr_metrics *m, const char *bits_name);

/** loss / ln 2 and exp(loss): bits and perplexity of a mean per-token cross-entropy in nats. */
double tr_nats_to_bits(double nats);
double tr_perplexity(double nats);

/** Zero the sums and counts (arrays kept). */
void tr_metrics_reset(tr_metrics *m);

/** Add one batch: res's scalars and the per-class arrays in m->batch (filled by trs_eval_batch). */
void tr_metrics_add(tr_metrics *m, const trs_step_result *res);

/** Free the arrays (safe on a zeroed struct). */
void tr_metrics_free(tr_metrics *m);

/** Derived figures; 0 when nothing was counted. */
double tr_metrics_loss(const tr_metrics *m);
double tr_metrics_accuracy(const tr_metrics *m);
double tr_metrics_topk_accuracy(const tr_metrics *m);
double tr_metrics_micro_f1(const tr_metrics *m);
double tr_metrics_macro_f1(const tr_metrics *m);
double tr_metrics_mse(const tr_metrics *m);
double tr_metrics_mae(const tr_metrics *m);

/** The figures of one evaluation (tr_metrics_figures): which of them mean something depends on the loss. */
typedef struct tr_eval_figures {
    int has;                    /**< 1 when this evaluation ran (in this process)                        */
    double loss, accuracy, top_k_accuracy, micro_f1, macro_f1, mse, mae;
    int64_t samples;
    int64_t step;               /**< optimizer steps done when it ran                                     */
} tr_eval_figures;

/** The figures of what m counted (has = 1), taken after `step` optimizer steps. */
tr_eval_figures tr_metrics_figures(const tr_metrics *m, int64_t step);

/**
 * Write the task's figures as JSON members (leading comma, no braces) to f: classification "top_k_accuracy"
 * (top_k > 0); multi-label "micro_f1", "macro_f1" and per-class "tp", "fp", "fn" arrays; regression "mse",
 * "mae", "elements".
 */
void tr_metrics_write_json(const tr_metrics *m, int top_k, FILE *f);

/**
 * Write the confusion matrix as CSV to `path` (a header "true\\pred,0,1,...", then one row per true class) under a
 * temporary name renamed into place. TR_OK, or TR_E_RUNTIME naming the file.
 */
int tr_metrics_write_confusion(const tr_metrics *m, const char *path, tr_error *err);

#endif
