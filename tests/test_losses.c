/*
 * test_losses.c -- the loss kinds against values PyTorch computed (tests/reference/losses.py), and the metric
 * counts the shim returns for hand-made batches, accumulated in C (metrics.c): accuracy, top-k, confusion matrix,
 * multi-label TP/FP/FN with micro/macro F1, regression squared/absolute error sums.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "metrics.h"
#include "support.h"
#include "trainrun_shim.h"

/* torch 1.13.0a0: tests/reference/losses.py */
#define REF_CE 0x1.96c9d40000000p-1        /* 0.794508576 */
#define REF_CE_LS01 0x1.c530380000000p-1   /* 0.885133505 */
#define REF_BCE 0x1.982b680000000p-2       /* 0.398603082 */
#define REF_MSE 0x1.4855560000000p+0       /* 1.28255212 */
#define REF_SMOOTH_L1 0x1.1455560000000p-1 /* 0.539713562 */

static const float logits[4 * 3] = {1.5f, -0.25f, 0.75f, -1.0f, 2.0f, 0.5f, 0.125f, 0.0f, -2.5f, 3.0f, 1.0f, -1.0f};
static const int64_t labels[4] = {0, 2, 1, 0};
static const float multi_hot[4 * 3] = {1, 0, 1, 0, 1, 0, 0, 0, 0, 1, 1, 0};
static const float values[4 * 3] = {1.0f, 0.5f, -0.5f, 0.0f, 0.75f, 3.0f, 0.5f, -1.0f, -2.0f, 2.0f, 1.5f, 0.25f};

/* Linear(3, 3) with weight = I and bias = 0: the output is the input, so `logits` reach the loss unchanged. */
static trs_model *identity_model(void)
{
    cr_assert_eq(trs_set_threads(1, 0, 1), TRS_OK);
    const trs_layer l = {.kind = TRS_LAYER_LINEAR, .in = 3, .out = 3, .bias = 1};
    const int64_t in[1] = {3};
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(&l, 1, in, 1, &m), TRS_OK, "%s", trs_last_error());
    const float eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, zero[3] = {0, 0, 0};
    cr_assert_eq(trs_model_state_write(m, 0, eye, sizeof eye, TRS_DTYPE_FLOAT32), TRS_OK);
    cr_assert_eq(trs_model_state_write(m, 1, zero, sizeof zero, TRS_DTYPE_FLOAT32), TRS_OK);
    return m;
}

static trs_step_result eval(trs_model *m, trs_loss_kind kind, double ls, int top_k, trs_class_counts *counts)
{
    const trs_batch b = {.x = logits, .shape = {4, 3}, .ndim = 2, .y = labels,
                         .target = kind == TRS_LOSS_BCE_WITH_LOGITS ? multi_hot : values};
    const trs_step_options o = {.loss = kind, .label_smoothing = ls, .top_k = top_k};
    trs_step_result r;
    cr_assert_eq(trs_eval_batch(m, NULL, &b, &o, &r, counts), TRS_OK, "%s", trs_model_errmsg(m));
    return r;
}

#define EXPECT_F32(got, want) cr_expect(fabs((got) - (want)) <= 2e-7 * fabs(want), "%a vs PyTorch %a", (got), (want))

TestSuite(losses);

Test(losses, every_kind_equals_pytorch)
{
    trs_model *m = identity_model();
    EXPECT_F32(eval(m, TRS_LOSS_CROSS_ENTROPY, 0.0, 0, NULL).loss, REF_CE);
    EXPECT_F32(eval(m, TRS_LOSS_CROSS_ENTROPY, 0.1, 0, NULL).loss, REF_CE_LS01);
    EXPECT_F32(eval(m, TRS_LOSS_BCE_WITH_LOGITS, 0.0, 0, NULL).loss, REF_BCE);
    EXPECT_F32(eval(m, TRS_LOSS_MSE, 0.0, 0, NULL).loss, REF_MSE);
    EXPECT_F32(eval(m, TRS_LOSS_SMOOTH_L1, 0.0, 0, NULL).loss, REF_SMOOTH_L1);
    trs_model_free(m);
}

Test(losses, missing_targets_and_bad_top_k_are_refused)
{
    trs_model *m = identity_model();
    trs_batch b = {.x = logits, .shape = {4, 3}, .ndim = 2, .y = labels};
    trs_step_options o = {.loss = TRS_LOSS_MSE};
    trs_step_result r;
    cr_expect_eq(trs_eval_batch(m, NULL, &b, &o, &r, NULL), TRS_E_INVALID);
    cr_expect(strstr(trs_model_errmsg(m), "batch->target") != NULL, "%s", trs_model_errmsg(m));
    o = (trs_step_options){.loss = TRS_LOSS_CROSS_ENTROPY, .top_k = 4};
    cr_expect_eq(trs_eval_batch(m, NULL, &b, &o, &r, NULL), TRS_E_INVALID);
    cr_expect(strstr(trs_model_errmsg(m), "top_k 4") != NULL, "%s", trs_model_errmsg(m));
    trs_model_free(m);
}

Test(losses, classification_counts_and_confusion_matrix)
{
    /* argmax per row: 0, 1, 0, 0; labels 0, 2, 1, 0 -> rows 0 and 3 right. Top-2 sets: {0,2}, {1,2}, {0,1}, {0,1}:
     * labels 0, 2, 1, 0 are all inside. */
    trs_model *m = identity_model();
    tr_metrics mt;
    tr_error err = {0};
    cr_assert_eq(tr_metrics_init(&mt, TR_TASK_CLASSIFY, 3, &err), TR_OK);
    for (int rep = 0; rep < 2; rep++) { /* two batches: the C side adds them up */
        const trs_step_result r = eval(m, TRS_LOSS_CROSS_ENTROPY, 0.0, 2, &mt.batch);
        cr_expect_eq(r.samples, 4);
        cr_expect_eq(r.correct, 2);
        cr_expect_eq(r.topk_correct, 4);
        tr_metrics_add(&mt, &r);
    }
    static const int64_t want[9] = {4, 0, 0, /* true 0: predicted 0 twice per batch */
                                    2, 0, 0, /* true 1: predicted 0 */
                                    0, 2, 0}; /* true 2: predicted 1 */
    for (int i = 0; i < 9; i++) cr_expect_eq(mt.confusion[i], want[i], "cell %d: %lld", i, (long long)mt.confusion[i]);
    cr_expect_eq(tr_metrics_accuracy(&mt), 0.5);
    cr_expect_eq(tr_metrics_topk_accuracy(&mt), 1.0);
    EXPECT_F32(tr_metrics_loss(&mt), REF_CE);

    support_tmp_init();
    cr_assert_eq(tr_metrics_write_confusion(&mt, support_path("c.csv"), &err), TR_OK, "%s", err.msg);
    char text[256];
    support_read_file(support_path("c.csv"), text, sizeof text);
    cr_expect_str_eq(text, "true\\pred,0,1,2\n0,4,0,0\n1,2,0,0\n2,0,2,0\n");
    support_tmp_fini();
    tr_metrics_free(&mt);
    trs_model_free(m);
}

Test(losses, multi_label_counts_and_f1)
{
    /* predicted positive (logit > 0):   targets:
     *   1 0 1                           1 0 1   -> row exact
     *   0 1 1                           0 1 0   -> FP class 2
     *   1 0 0                           0 0 0   -> FP class 0
     *   1 1 0                           1 1 0   -> row exact
     * TP = [2, 2, 1], FP = [1, 0, 1], FN = [0, 0, 0]. */
    trs_model *m = identity_model();
    tr_metrics mt;
    tr_error err = {0};
    cr_assert_eq(tr_metrics_init(&mt, TR_TASK_MULTI_LABEL, 3, &err), TR_OK);
    const trs_step_result r = eval(m, TRS_LOSS_BCE_WITH_LOGITS, 0.0, 0, &mt.batch);
    cr_expect_eq(r.correct, 2);
    tr_metrics_add(&mt, &r);
    const int64_t tp[3] = {2, 2, 1}, fp[3] = {1, 0, 1}, fn[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(mt.tp[i], tp[i], "tp[%d]", i);
        cr_expect_eq(mt.fp[i], fp[i], "fp[%d]", i);
        cr_expect_eq(mt.fn[i], fn[i], "fn[%d]", i);
    }
    /* micro: 2*5 / (2*5 + 2 + 0) = 10/12; macro: mean(4/5, 4/4, 2/3) */
    cr_expect_float_eq(tr_metrics_micro_f1(&mt), 10.0 / 12.0, 1e-15);
    cr_expect_float_eq(tr_metrics_macro_f1(&mt), (0.8 + 1.0 + 2.0 / 3.0) / 3.0, 1e-15);
    cr_expect_eq(tr_metrics_accuracy(&mt), 0.5);
    tr_metrics_free(&mt);
    trs_model_free(m);
}

Test(losses, regression_error_sums)
{
    trs_model *m = identity_model();
    double sse = 0, sae = 0;
    for (int i = 0; i < 12; i++) {
        const double d = (double)logits[i] - (double)values[i];
        sse += d * d;
        sae += fabs(d);
    }
    tr_metrics mt;
    tr_error err = {0};
    cr_assert_eq(tr_metrics_init(&mt, TR_TASK_REGRESSION, 3, &err), TR_OK);
    const trs_step_result r = eval(m, TRS_LOSS_MSE, 0.0, 0, &mt.batch);
    tr_metrics_add(&mt, &r);
    cr_expect_eq(r.elements, 12);
    cr_expect_eq(r.sse, sse, "%a vs %a", r.sse, sse); /* the inputs are dyadic: exact in double */
    cr_expect_eq(r.sae, sae);
    cr_expect_eq(tr_metrics_mse(&mt), sse / 12);
    cr_expect_eq(tr_metrics_mae(&mt), sae / 12);
    EXPECT_F32(tr_metrics_mse(&mt), REF_MSE);
    tr_metrics_free(&mt);
    trs_model_free(m);
}
