/*
 * test_predict.c -- predictions into caller memory and targets beyond class indices, through the embedding API:
 * trainrun_trainer_predict agrees with the eval step's correct count; 10,000 predict calls leave allocated bytes
 * flat to the byte; per-position [N, T] labels with ignore_index -100 on [N, T, C] outputs give PyTorch's
 * cross_entropy (recomputed here in double from the predicted logits); float targets train regression (trainer)
 * and multi-label (run on arrays); `trainrun predict RUN_DIR -o preds.csv` writes one row per test sample whose
 * correct count is the run's own test evaluation's, and test inputs without labels (npy without test targets, IDX
 * images without a labels file, a CSV table without the label column) give the labeled run's predictions without
 * the target column. Small synthetic data: a few seconds in all.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npy.h"
#include "run.h"
#include "support.h"
#include "trainrun/trainrun.h"

TestSuite(predict, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 300);

#define D 8   /* features */
#define K 4   /* classes  */
#define N 512 /* samples  */

static float X[N * D];
static int64_t Y[N];

/* A config around a model YAML written into the temp dir; dropout, so a predict outside eval mode would differ. */
static const char *yaml_for(const char *model_text, const char *loss)
{
    const char *path = support_path("model.yaml");
    support_write_file(path, model_text);
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "seed: 3\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.1, momentum: 0.9}\n"
             "train: {batch_size: 32, max_steps: 50, loss: %s}\nlog: {every_steps: 10, progress: never}\n"
             "checkpoint: {every_seconds: 0, every_steps: 0}\nrun: {dir: %s, name: r}\n",
             path, loss, support_tmpdir);
    return buf;
}

static const char *k_mlp = "input: [8]\nlayers:\n  - linear: {in: 8, out: 32}\n  - relu\n  - dropout: {p: 0.3}\n"
                           "  - linear: {in: 32, out: 4}\n";

static trainrun_batch view(const void *x, int x_dtype, int ndim, const int64_t *shape, const void *y, int y_dtype)
{
    trainrun_batch b;
    memset(&b, 0, sizeof b);
    b.x = x;
    b.x_dtype = x_dtype;
    b.ndim = ndim;
    memcpy(b.shape, shape, (size_t)ndim * sizeof *shape);
    b.y = y;
    b.y_dtype = y_dtype;
    return b;
}

static trainrun_trainer *open_trainer(const char *yaml)
{
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    return t;
}

static void train_blobs(trainrun_trainer *t, int steps)
{
    trainrun_step_result r;
    for (int s = 0; s < steps; s++) {
        const int64_t shape[] = {32, D};
        const trainrun_batch b = view(X + (s % 16) * 32 * D, TRAINRUN_FLOAT32, 2, shape, Y + (s % 16) * 32,
                                      TRAINRUN_INT64);
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    }
}

Test(predict, argmax_of_predictions_gives_the_eval_steps_correct_count)
{
    support_make_blobs(N, D, K, 5, X, Y);
    trainrun_trainer *t = open_trainer(yaml_for(k_mlp, "cross_entropy"));
    train_blobs(t, 12); /* part-trained: some samples still wrong, so the count can disagree */
    int64_t per = 0;
    cr_assert_eq(trainrun_trainer_output_size(t, &per), TRAINRUN_OK);
    cr_assert_eq(per, K);

    trainrun_step_result ev;
    const int64_t all_shape[] = {N, D};
    const trainrun_batch all = view(X, TRAINRUN_FLOAT32, 2, all_shape, Y, TRAINRUN_INT64);
    cr_assert_eq(trainrun_trainer_eval_step(t, &all, &ev), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect_lt(ev.correct, N, "the model should still be wrong somewhere (correct %lld)", (long long)ev.correct);
    cr_expect_gt(ev.correct, N / K);

    /* Predict over the same samples in batches of 100 (the last one 12), then argmax here. */
    static float out[N * K];
    for (int64_t i = 0; i < N; i += 100) {
        const int64_t n = i + 100 <= N ? 100 : N - i;
        const int64_t shape[] = {n, D};
        const trainrun_batch b = view(X + i * D, TRAINRUN_FLOAT32, 2, shape, NULL, 0);
        cr_assert_eq(trainrun_trainer_predict(t, &b, out + i * K, (size_t)(n * K)), TRAINRUN_OK, "%s",
                     trainrun_trainer_errmsg(t));
    }
    int64_t correct = 0;
    for (int i = 0; i < N; i++) {
        int best = 0;
        for (int k = 1; k < K; k++)
            if (out[i * K + k] > out[i * K + best]) best = k;
        correct += best == Y[i];
    }
    cr_expect_eq(correct, ev.correct, "predict's argmax counts %lld correct, the eval step %lld", (long long)correct,
                 (long long)ev.correct);

    /* Eval mode: dropout is off, so two predictions are identical, and training mode came back after. */
    static float again[100 * K];
    const int64_t shape[] = {100, D};
    const trainrun_batch b = view(X, TRAINRUN_FLOAT32, 2, shape, NULL, 0);
    cr_assert_eq(trainrun_trainer_predict(t, &b, again, 100 * K), TRAINRUN_OK);
    cr_expect_eq(memcmp(again, out, sizeof again), 0);

    /* Errors: a buffer too small (names what is needed, writes nothing), NULL out, a wrong feature count. */
    float small[8] = {0};
    cr_expect_eq(trainrun_trainer_predict(t, &b, small, 8), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "out has room for 8 floats; the output [100, 4] needs 400"), "%s",
              trainrun_trainer_errmsg(t));
    cr_expect_eq(small[0], 0.0f);
    cr_expect_eq(trainrun_trainer_predict(t, &b, NULL, 400), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_predict(NULL, &b, again, 400), TRAINRUN_E_INVALID);
    const int64_t bad_shape[] = {100, 5};
    const trainrun_batch bad = view(X, TRAINRUN_FLOAT32, 2, bad_shape, NULL, 0);
    cr_expect_eq(trainrun_trainer_predict(t, &bad, again, 400), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "batch dim 1 is 5; the model takes 8"), "%s",
              trainrun_trainer_errmsg(t));
    /* ... and the trainer still trains */
    train_blobs(t, 1);
    trainrun_trainer_close(t);
}

Test(predict, ten_thousand_predict_calls_leave_allocated_bytes_flat)
{
    support_make_blobs(64, D, K, 9, X, Y);
    trainrun_trainer *t = open_trainer(yaml_for(k_mlp, "cross_entropy"));
    train_blobs(t, 2);
    const int64_t shape[] = {4, D};
    const trainrun_batch b = view(X, TRAINRUN_FLOAT32, 2, shape, NULL, 0);
    float first[4 * K], out[4 * K];
    cr_assert_eq(trainrun_trainer_predict(t, &b, first, 4 * K), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    trainrun_memory m0, m1;
    cr_assert_eq(trainrun_trainer_memory(t, &m0), TRAINRUN_OK);
    for (int i = 0; i < 10000; i++) {
        if (trainrun_trainer_predict(t, &b, out, 4 * K) != TRAINRUN_OK)
            cr_assert_fail("call %d: %s", i, trainrun_trainer_errmsg(t));
    }
    cr_assert_eq(trainrun_trainer_memory(t, &m1), TRAINRUN_OK);
    cr_expect_eq(m1.allocated_bytes, m0.allocated_bytes, "allocated %lld bytes before, %lld after 10,000 calls",
                 (long long)m0.allocated_bytes, (long long)m1.allocated_bytes);
    cr_expect_eq(m1.live_allocations, m0.live_allocations);
    cr_expect_gt(m1.total_allocations, m0.total_allocations + 10000, "each call allocates (and frees) its tensors");
    cr_expect_eq(memcmp(first, out, sizeof out), 0);
    trainrun_trainer_close(t);
}

/* [N, T, C] outputs: a linear layer over the last dim of [N, T, D] inputs; per-position labels with -100. */
Test(predict, per_position_labels_with_ignore_index_give_pytorchs_cross_entropy)
{
    enum { NB = 6, T = 5, DD = 3, C = 4 };
    const char *model = "input: [5, 3]\nlayers:\n  - linear: {in: 3, out: 16}\n  - gelu\n  - linear: {in: 16, out: 4}\n";
    trainrun_trainer *t = open_trainer(yaml_for(model, "cross_entropy"));
    int64_t oshape[8];
    int ondim = 0;
    cr_assert_eq(trainrun_trainer_output_shape(t, oshape, &ondim), TRAINRUN_OK);
    cr_assert_eq(ondim, 2);
    cr_expect(oshape[0] == T && oshape[1] == C);

    float x[NB * T * DD];
    int64_t y[NB * T];
    uint64_t s = 12345;
    for (int i = 0; i < NB * T * DD; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < NB * T; i++) y[i] = (i * 7 + 3) % 9 < 3 ? TRAINRUN_IGNORE_INDEX : (i * 5 + 1) % C;
    const int64_t shape[] = {NB, T, DD};
    const trainrun_batch b = view(x, TRAINRUN_FLOAT32, 3, shape, y, TRAINRUN_INT64);
    trainrun_step_result r;
    for (int step = 0; step < 3; step++)
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));

    cr_assert_eq(trainrun_trainer_eval_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    float logits[NB * T * C];
    cr_assert_eq(trainrun_trainer_predict(t, &b, logits, NB * T * C), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    /* F.cross_entropy(logits.reshape(-1, C), y.reshape(-1), ignore_index=-100): mean over kept positions of
     * logsumexp(row) - row[y]; correct = kept positions whose argmax is y. */
    double sum = 0;
    int64_t kept = 0, correct = 0;
    for (int i = 0; i < NB * T; i++) {
        if (y[i] == TRAINRUN_IGNORE_INDEX) continue;
        const float *row = logits + i * C;
        double mx = row[0];
        int best = 0;
        for (int c = 1; c < C; c++) {
            if (row[c] > mx) mx = row[c];
            if (row[c] > row[best]) best = c;
        }
        double z = 0;
        for (int c = 0; c < C; c++) z += exp((double)row[c] - mx);
        sum += mx + log(z) - row[y[i]];
        kept++;
        correct += best == y[i];
    }
    cr_assert_gt(kept, 0);
    cr_assert_lt(kept, NB * T, "some positions must be ignored");
    const double want = sum / (double)kept;
    cr_expect(fabs(r.loss - want) <= 1e-6 * fabs(want), "loss %.9g, recomputed %.9g", r.loss, want);
    cr_expect_eq(r.correct, correct);
    cr_expect_eq(r.samples, NB);
    cr_expect(fabs(r.accuracy - (double)correct / (double)kept) < 1e-15, "accuracy %g over %lld kept positions",
              r.accuracy, (long long)kept);

    /* A label outside [0, C) that is not -100 is refused, naming the sample and the position. */
    y[1 * T + 2] = 7;
    cr_expect_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "label 7 at batch index 1, position 2 is outside [0, 4)"), "%s",
              trainrun_trainer_errmsg(t));
    trainrun_trainer_close(t);
}

/* Regression through the trainer: FLOAT32 targets [N, 2]; the eval loss is the MSE of the predictions. */
Test(predict, trainer_trains_regression_on_float_targets)
{
    enum { NR = 256, KO = 2 };
    static float x[NR * D], y[NR * KO];
    uint64_t s = 99;
    for (int i = 0; i < NR; i++) {
        for (int j = 0; j < D; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * D + j] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
        }
        y[i * KO] = x[i * D] + 0.5f * x[i * D + 1];
        y[i * KO + 1] = x[i * D + 2] - x[i * D + 3];
    }
    trainrun_trainer *t = open_trainer(yaml_for("input: [8]\nlayers:\n  - linear: {in: 8, out: 2}\n", "mse"));
    const int64_t shape[] = {NR, D};
    const trainrun_batch all = view(x, TRAINRUN_FLOAT32, 2, shape, y, TRAINRUN_FLOAT32);
    trainrun_step_result r0, r;
    cr_assert_eq(trainrun_trainer_eval_step(t, &all, &r0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    for (int step = 0; step < 60; step++) {
        const int64_t bs[] = {32, D};
        const trainrun_batch b = view(x + (step % 8) * 32 * D, TRAINRUN_FLOAT32, 2, bs, y + (step % 8) * 32 * KO,
                                      TRAINRUN_FLOAT32);
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    }
    cr_assert_eq(trainrun_trainer_eval_step(t, &all, &r), TRAINRUN_OK);
    cr_expect_lt(r.loss, 0.05 * r0.loss, "mse %g after 60 steps, %g before", r.loss, r0.loss);
    static float pred[NR * KO];
    cr_assert_eq(trainrun_trainer_predict(t, &all, pred, NR * KO), TRAINRUN_OK);
    double se = 0;
    for (int i = 0; i < NR * KO; i++) se += ((double)pred[i] - y[i]) * ((double)pred[i] - y[i]);
    cr_expect(fabs(r.loss - se / (NR * KO)) <= 1e-5 * r.loss, "eval mse %.9g, from predictions %.9g", r.loss,
              se / (NR * KO));
    /* class indices for a regression loss are refused with the reason */
    int64_t labels[NR] = {0};
    const trainrun_batch wrong = view(x, TRAINRUN_FLOAT32, 2, shape, labels, TRAINRUN_INT64);
    cr_expect_eq(trainrun_trainer_train_step(t, &wrong, &r), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "needs batch->target"), "%s", trainrun_trainer_errmsg(t));
    trainrun_trainer_close(t);
}

/* Multi-label through a run on arrays: FLOAT32 multi-hot targets [N, K] with bce_with_logits. */
Test(predict, run_on_arrays_trains_multi_label_targets)
{
    support_make_blobs(N, D, K, 2, X, Y);
    static float hot[N * K];
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) hot[i * K + k] = (k == Y[i] || k == (Y[i] + 1) % K) ? 1.0f : 0.0f;
    const int64_t shape[] = {N, D};
    trainrun_data *bad = NULL, *data = NULL;
    const trainrun_batch all = view(X, TRAINRUN_FLOAT32, 2, shape, hot, TRAINRUN_FLOAT32);
    cr_expect_eq(trainrun_data_arrays(&all, &bad), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_data_errmsg(bad), "use trainrun_data_arrays_targets"), "%s", trainrun_data_errmsg(bad));
    trainrun_data_close(bad);
    cr_expect_eq(trainrun_data_arrays_targets(&all, 0, &bad), TRAINRUN_E_INVALID);
    trainrun_data_close(bad);
    cr_assert_eq(trainrun_data_arrays_targets(&all, K, &data), TRAINRUN_OK, "%s", trainrun_data_errmsg(data));

    trainrun_run *run = NULL;
    const char *overrides[] = {"train.max_steps=80", "eval.every_steps=0", "eval.every_epoch=false"};
    cr_assert_eq(trainrun_run_open_yaml(yaml_for(k_mlp, "bce_with_logits"), overrides, 3, &run), TRAINRUN_OK, "%s",
                 trainrun_run_errmsg(run));
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, data), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TEST, data), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_wait(run), TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
    trainrun_summary sum;
    cr_assert_eq(trainrun_run_summary(run, &sum), TRAINRUN_OK);
    cr_expect(sum.has_test);
    cr_expect_gt(sum.test_accuracy, 0.8, "exact-match accuracy %g", sum.test_accuracy);
    trainrun_run_close(run);

    /* the same float targets for a cross_entropy config: refused at set-up, naming the key */
    cr_assert_eq(trainrun_run_open_yaml(yaml_for(k_mlp, "cross_entropy"), NULL, 0, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, data), TRAINRUN_OK);
    cr_expect_eq(trainrun_run_step(run), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_run_errmsg(run), "train.loss: cross_entropy needs class-index targets; the training "
                                                "data has float targets"), "%s", trainrun_run_errmsg(run));
    trainrun_run_close(run);
    trainrun_data_close(data);
}

/* tests/python_check.py with `args` under Debian's /usr/bin/python3: 0 when Python's PyTorch gives trainrun
 * predict's probabilities (its line, with the largest difference, goes to stderr), 77 when it has no torch. */
static int python_check(const char *args)
{
    char cmd[3000], line[512] = "";
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/python_check.py' %s 2>&1", TR_SOURCE_DIR, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    while (fgets(line, sizeof line, p)) fprintf(stderr, "%s", line);
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Count the CSV rows (after the header) whose column 1 (target) equals column 2 (predicted); *rows gets the rows. */
static int64_t csv_correct(const char *path, int64_t *rows, char *header, size_t hn)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char line[4096];
    cr_assert_not_null(fgets(line, sizeof line, f));
    snprintf(header, hn, "%s", line);
    int64_t good = 0;
    *rows = 0;
    while (fgets(line, sizeof line, f)) {
        long long idx, target, pred;
        cr_assert_eq(sscanf(line, "%lld,%lld,%lld", &idx, &target, &pred), 3, "%s", line);
        cr_assert_eq(idx, *rows);
        good += target == pred;
        ++*rows;
    }
    fclose(f);
    return good;
}

/* The unlabeled predictions (header `header`, rows "i,predicted,p_..") are the labeled ones ("i,target,predicted,
 * p_..") without the target column, row for row, `n` rows. */
static void expect_same_predictions(const char *labeled, const char *unlabeled, const char *header, int64_t n)
{
    FILE *a = fopen(labeled, "r"), *u = fopen(unlabeled, "r");
    cr_assert(a && u, "%s, %s", labeled, unlabeled);
    static char la[4096], lu[4096];
    cr_assert_not_null(fgets(lu, sizeof lu, u));
    cr_expect_str_eq(lu, header);
    cr_assert_not_null(fgets(la, sizeof la, a));
    int64_t n_rows = 0;
    while (fgets(la, sizeof la, a)) {
        cr_assert_not_null(fgets(lu, sizeof lu, u), "row %lld missing", (long long)n_rows);
        /* labeled "i,target,rest" against unlabeled "i,rest" */
        const char *rest = strchr(strchr(la, ',') + 1, ',') + 1;
        cr_expect_str_eq(strchr(lu, ',') + 1, rest, "row %lld", (long long)n_rows);
        n_rows++;
    }
    cr_expect_eq(n_rows, n);
    cr_expect_null(fgets(lu, sizeof lu, u), "no extra rows");
    fclose(a);
    fclose(u);
}

Test(predict, cli_predict_writes_the_test_sets_predictions_as_csv)
{
    /* blobs as .npy: 384 to train, 128 to test; a part-trained model so the count could be wrong */
    support_make_blobs(N, D, K, 11, X, Y);
    tr_error err = {0};
    const int64_t xs[] = {384, D}, ys[] = {384}, xt[] = {128, D}, yt[] = {128};
    cr_assert_eq(tr_npy_save(support_path("x.npy"), TR_NPY_FLOAT32, xs, 2, X, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("y.npy"), TR_NPY_INT64, ys, 1, Y, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("tx.npy"), TR_NPY_FLOAT32, xt, 2, X + 384 * D, &err), TR_OK);
    cr_assert_eq(tr_npy_save(support_path("ty.npy"), TR_NPY_INT64, yt, 1, Y + 384, &err), TR_OK);
    support_write_file(support_path("model.yaml"), k_mlp);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "seed: 4\ndata: {format: npy, root: %s, train_inputs: x.npy, train_targets: y.npy, test_inputs: tx.npy,"
             " test_targets: ty.npy, val_size: 0}\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.05}\n"
             "train: {batch_size: 32, max_steps: 6}\neval: {every_epoch: false, batch_size: 50}\n"
             "log: {progress: never}\nrun: {dir: %s, name: p}\n",
             support_tmpdir, support_path("model.yaml"), support_tmpdir);
    support_write_file(support_path("c.yaml"), cfg);
    static char out[16384];
    char args[3000];
    snprintf(args, sizeof args, "%s", support_path("c.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char run_dir[600]; /* support_path's buffers rotate: a copy that stays */
    snprintf(run_dir, sizeof run_dir, "%s", support_path("p"));
    double correct[4], samples[4];
    cr_assert_eq(support_read_field(run_dir, "eval", "correct", correct, NULL, 4), 1);
    cr_assert_eq(support_read_field(run_dir, "eval", "samples", samples, NULL, 4), 1);
    cr_assert_eq(samples[0], 128);
    cr_expect_lt(correct[0], 128, "part-trained: some test samples still wrong");

    snprintf(args, sizeof args, "predict %s -o %s", run_dir, support_path("preds.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char header[4096];
    int64_t rows;
    const int64_t good = csv_correct(support_path("preds.csv"), &rows, header, sizeof header);
    cr_expect_str_eq(header, "index,target,predicted,p_0,p_1,p_2,p_3\n");
    cr_expect_eq(rows, 128);
    cr_expect_eq((double)good, correct[0], "predict: %lld correct; the run's test evaluation: %g", (long long)good,
                 correct[0]);
    char want[128];
    snprintf(want, sizeof want, "accuracy %.4f (%lld of 128)", (double)good / 128.0, (long long)good);
    cr_expect(strstr(out, want), "%s", out);

    /* from a checkpoint directory, with an override pointing the test keys at the training arrays */
    snprintf(args, sizeof args, "predict %s/checkpoints/step-0000000006 data.test_inputs=x.npy "
             "data.test_targets=y.npy -o %s", run_dir, support_path("train_preds.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    csv_correct(support_path("train_preds.csv"), &rows, header, sizeof header);
    cr_expect_eq(rows, 384);

    /* unlabeled inputs: the test inputs alone (no data.test_targets) give index,predicted,p_* rows, the same
     * predictions as with labels, and no accuracy line */
    snprintf(args, sizeof args, "predict %s data.test_targets= -o %s", run_dir, support_path("unlabeled.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "128 unlabeled test inputs -> ") != NULL, "%s", out);
    cr_expect(strstr(out, "accuracy") == NULL, "%s", out);
    expect_same_predictions(support_path("preds.csv"), support_path("unlabeled.csv"),
                            "index,predicted,p_0,p_1,p_2,p_3\n", 128);
    /* training on a config whose test set has no targets: trains, says there is no test evaluation */
    snprintf(args, sizeof args, "%s data.test_targets= train.max_steps=2 run.name=u", support_path("c.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "data.test_inputs: no data.test_targets, so no test evaluation") != NULL, "%s", out);
    /* targets without inputs, and eval.split: test without targets, are refused naming the key */
    snprintf(args, sizeof args, "predict %s data.test_inputs= -o %s", run_dir, support_path("n.csv"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.test_targets: the npy format needs data.test_inputs with it") != NULL, "%s", out);
    snprintf(args, sizeof args, "%s data.test_targets= eval.split=test run.name=u2", support_path("c.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.test_targets: eval.split: test evaluates on the test set") != NULL, "%s", out);

    /* the docs' plain-PyTorch loader of a model YAML run (docs/torchscript.md, "Back to PyTorch") gives the same
     * probabilities */
    snprintf(args, sizeof args, "loader '%s/docs/torchscript.md' '%s' '%s/checkpoints/step-0000000006' '%s' '%s'",
             TR_SOURCE_DIR, run_dir, run_dir, support_path("tx.npy"), support_path("preds.csv"));
    const int py = python_check(args);
    if (py == 77) cr_log_warn("/usr/bin/python3 has no torch (Debian: python3-torch): the loader was not run");
    else cr_expect_eq(py, 0, "the docs' loader in PyTorch disagrees with trainrun predict");

    /* export of a model YAML run: there is no TorchScript to write; says where the state_dict is */
    snprintf(args, sizeof args, "export %s", run_dir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "a model YAML run has no TorchScript code to write") && strstr(out, "model.safetensors"),
              "%s", out);

    /* usage and config errors: exit 2 with the reason */
    snprintf(args, sizeof args, "predict %s", run_dir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2);
    cr_expect(strstr(out, "no output file given (-o PREDS.csv)"), "%s", out);
    snprintf(args, sizeof args, "predict %s -o %s", support_path("nothing"), support_path("n.csv"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2);
    cr_expect(strstr(out, "nothing: not a run directory or checkpoint"), "%s", out);
    snprintf(args, sizeof args, "predict %s data.test_inputs=nope.npy -o %s", run_dir, support_path("n.csv"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "a data file that is not there is the user's input: %s", out);
    cr_expect(strstr(out, "data.test_inputs: ") && strstr(out, "nope.npy: cannot open: No such file or directory"),
              "%s", out);
    cr_expect_neq(access(support_path("n.csv"), F_OK), 0, "no output file after a failure");
}

/* An IDX file of ubyte: the magic number, the dims (big-endian uint32), the bytes. */
static void write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims, const unsigned char *data,
                      size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    const uint32_t words[4] = {magic, dims[0], ndims > 1 ? dims[1] : 0, ndims > 2 ? dims[2] : 0};
    for (int i = 0; i < 1 + ndims; i++) {
        const unsigned char b[4] = {(unsigned char)(words[i] >> 24), (unsigned char)(words[i] >> 16),
                                    (unsigned char)(words[i] >> 8), (unsigned char)words[i]};
        fwrite(b, 1, 4, f);
    }
    fwrite(data, 1, n, f);
    cr_assert_eq(fclose(f), 0);
}

/* Train a few steps on the config `cfg_path`, then `trainrun predict` its test set with labels (preds.csv) and
 * with the test set's overrides `unlabeled` (unlabeled.csv): the same predictions, row for row, without the target
 * column, "N unlabeled test inputs", no accuracy line. */
static void predict_both_ways(const char *cfg_path, const char *run, const char *unlabeled, int64_t n_test)
{
    static char out[16384];
    char args[3000];
    snprintf(args, sizeof args, "%s", cfg_path);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char run_dir[600];
    snprintf(run_dir, sizeof run_dir, "%s", support_path(run));
    double correct[4], samples[4];
    cr_assert_eq(support_read_field(run_dir, "eval", "correct", correct, NULL, 4), 1);
    cr_assert_eq(support_read_field(run_dir, "eval", "samples", samples, NULL, 4), 1);
    cr_assert_eq(samples[0], (double)n_test);
    cr_expect_lt(correct[0], (double)n_test, "part-trained: some test samples still wrong");

    snprintf(args, sizeof args, "predict %s -o %s", run_dir, support_path("preds.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char header[4096];
    int64_t rows;
    const int64_t good = csv_correct(support_path("preds.csv"), &rows, header, sizeof header);
    cr_expect_str_eq(header, "index,target,predicted,p_0,p_1,p_2,p_3\n");
    cr_expect_eq(rows, n_test);
    cr_expect_eq((double)good, correct[0], "predict: %lld correct; the run's test evaluation: %g", (long long)good,
                 correct[0]);

    snprintf(args, sizeof args, "predict %s %s -o %s", run_dir, unlabeled, support_path("unlabeled.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char want[128];
    snprintf(want, sizeof want, "%lld unlabeled test inputs -> ", (long long)n_test);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    cr_expect(strstr(out, "accuracy") == NULL, "%s", out);
    expect_same_predictions(support_path("preds.csv"), support_path("unlabeled.csv"),
                            "index,predicted,p_0,p_1,p_2,p_3\n", n_test);
}

Test(predict, cli_predict_reads_idx_images_without_a_labels_file)
{
    /* 4 x 4 images of 4 classes: class k is bright in quadrant k, plus noise (seeded); 256 to train, 64 to test */
    enum { n_train = 256, n_test = 64, px = 16 };
    static unsigned char img[(n_train + n_test) * px], lab[n_train + n_test];
    uint64_t s = 12345;
    for (int i = 0; i < n_train + n_test; i++) {
        lab[i] = (unsigned char)(i % K);
        for (int p = 0; p < px; p++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const int quad = ((p / 4) / 2) * 2 + (p % 4) / 2;
            img[i * px + p] = (unsigned char)((quad == lab[i] ? 90 : 0) + (int)((s >> 33) % 160));
        }
    }
    const uint32_t di[] = {n_train, 4, 4}, dt[] = {n_test, 4, 4}, dl[] = {n_train}, dlt[] = {n_test};
    write_idx(support_path("tr-img"), 0x803, di, 3, img, sizeof img - n_test * px);
    write_idx(support_path("tr-lab"), 0x801, dl, 1, lab, n_train);
    write_idx(support_path("te-img"), 0x803, dt, 3, img + n_train * px, n_test * px);
    write_idx(support_path("te-lab"), 0x801, dlt, 1, lab + n_train, n_test);
    support_write_file(support_path("m4.yaml"), "input: [1, 4, 4]\nlayers:\n  - flatten\n  - linear: {in: 16, "
                                                "out: 16}\n  - relu\n  - linear: {in: 16, out: 4}\n");
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "seed: 5\ndata: {format: idx, root: %s, train_images: tr-img, train_labels: tr-lab, test_images: te-img,"
             " test_labels: te-lab, val_size: 0, mean: [0.3], std: [0.3]}\nmodel: {spec: %s}\n"
             "optim: {name: sgd, lr: 0.05}\ntrain: {batch_size: 32, max_steps: 3}\n"
             "eval: {every_epoch: false, batch_size: 24}\nlog: {progress: never}\nrun: {dir: %s, name: i}\n",
             support_tmpdir, support_path("m4.yaml"), support_tmpdir);
    support_write_file(support_path("i.yaml"), cfg);
    predict_both_ways(support_path("i.yaml"), "i", "data.test_labels=", n_test);

    /* training on it trains and says there is no test evaluation; eval.split: test without labels is refused */
    static char out[16384];
    char args[3000];
    snprintf(args, sizeof args, "%s data.test_labels= train.max_steps=2 run.name=u", support_path("i.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "data.test_images: no data.test_labels, so no test evaluation") != NULL, "%s", out);
    snprintf(args, sizeof args, "%s data.test_labels= eval.split=test run.name=u2", support_path("i.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.test_labels: eval.split: test evaluates on the test set") != NULL, "%s", out);
}

/* Blob rows from..to-1 as a CSV: a comment line (data.header_lines: 1), the features, and when labeled the class
 * in column 1 (data.target_columns: "1"), between the first feature and the rest. */
static void write_csv(const char *name, int from, int to, int labeled)
{
    FILE *f = fopen(support_path(name), "w");
    cr_assert_not_null(f);
    fprintf(f, "# header\n");
    for (int i = from; i < to; i++) {
        for (int j = 0; j < D; j++) {
            fprintf(f, "%s%.9g", j ? "," : "", X[i * D + j]);
            if (j == 0 && labeled) fprintf(f, ",%lld", (long long)Y[i]);
        }
        fputc('\n', f);
    }
    cr_assert_eq(fclose(f), 0);
}

Test(predict, cli_predict_reads_a_csv_without_the_label_column)
{
    /* blobs; the label in column 1, between the features (so the table without it shifts the columns after it) */
    support_make_blobs(N, D, K, 13, X, Y);
    write_csv("train.csv", 0, 384, 1);
    write_csv("test.csv", 384, N, 1);
    write_csv("inputs.csv", 384, N, 0);
    support_write_file(support_path("model.yaml"), k_mlp);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "seed: 4\ndata: {format: csv, root: %s, train_csv: train.csv, test_csv: test.csv, header_lines: 1, "
             "target_columns: \"1\", val_size: 0, standardize: true}\nmodel: {spec: %s}\n"
             "optim: {name: sgd, lr: 0.05}\ntrain: {batch_size: 32, max_steps: 4}\n"
             "eval: {every_epoch: false, batch_size: 50}\nlog: {progress: never}\nrun: {dir: %s, name: c}\n",
             support_tmpdir, support_path("model.yaml"), support_tmpdir);
    support_write_file(support_path("c.yaml"), cfg);
    predict_both_ways(support_path("c.yaml"), "c", "data.test_csv=inputs.csv", 128);

    /* explicit feature columns name the training table's columns; the table without the label follows them */
    static char out[16384];
    char args[3000];
    snprintf(args, sizeof args, "predict %s data.feature_columns=0,2-8 data.test_csv=inputs.csv -o %s",
             support_path("c"), support_path("u2.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    {
        char a[1 << 15], b[1 << 15];
        support_read_file(support_path("unlabeled.csv"), a, sizeof a);
        support_read_file(support_path("u2.csv"), b, sizeof b);
        cr_expect_str_eq(a, b);
    }
    /* a table that is neither (one column short of the inputs) names the key and the file, exit 2 */
    support_write_file(support_path("short.csv"), "# h\n1,2,3\n");
    snprintf(args, sizeof args, "predict %s data.test_csv=short.csv -o %s", support_path("c"), support_path("n.csv"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.test_csv: ") && strstr(out, "short.csv"), "%s", out);
    /* data.test_size with a data.test_csv: those rows are held out of training all the same (so a predict that
     * points data.test_csv at new inputs keeps the run's training split), and the test set is the table */
    snprintf(args, sizeof args, "%s data.test_size=64 train.max_steps=1 run.name=ts", support_path("c.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, " 320 train / 0 val / 128 test samples") != NULL, "%s", out);
    /* training on it: no test evaluation, said; eval.split: test refused */
    snprintf(args, sizeof args, "%s data.test_csv=inputs.csv train.max_steps=2 run.name=u", support_path("c.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "data.test_csv: no target columns, so no test evaluation") != NULL, "%s", out);
    snprintf(args, sizeof args, "%s data.test_csv=inputs.csv eval.split=test run.name=u3", support_path("c.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.test_csv: no target columns, but eval.split: test") != NULL, "%s", out);
}

Test(predict, cli_predict_on_a_torchscript_run_takes_the_input_shape_from_the_data)
{
    /* the repo's TorchScript config as it is (no model.input_shape): training takes the per-sample shape [1, 28, 28]
     * from the data, and so must predict */
    support_require_fmnist();
    static char out[16384];
    char args[3000];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp_torchscript.yaml data.train_subset=1000 data.val_size=0 "
             "data.test_subset=300 train.max_steps=20 train.batch_size=32 eval.every_epoch=false log.progress=never "
             "run.dir='%s' run.name=ts",
             support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char run_dir[600];
    snprintf(run_dir, sizeof run_dir, "%s", support_path("ts"));
    double correct[4], samples[4];
    cr_assert_eq(support_read_field(run_dir, "eval", "correct", correct, NULL, 4), 1);
    cr_assert_eq(support_read_field(run_dir, "eval", "samples", samples, NULL, 4), 1);
    cr_assert_eq(samples[0], 300);

    snprintf(args, sizeof args, "predict '%s' -o '%s'", run_dir, support_path("ts.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char header[4096];
    int64_t rows;
    const int64_t good = csv_correct(support_path("ts.csv"), &rows, header, sizeof header);
    cr_expect_str_eq(header, "index,target,predicted,p_0,p_1,p_2,p_3,p_4,p_5,p_6,p_7,p_8,p_9\n");
    cr_expect_eq(rows, 300);
    cr_expect_eq((double)good, correct[0], "predict: %lld correct; the run's test evaluation: %g", (long long)good,
                 correct[0]);

    /* trainrun export: the scripted module with the trained weights; loaded by libtorch's torch::jit::load (a
     * trainer on the archive alone, no checkpoint), it gives the probabilities predict wrote, to the printed digit */
    snprintf(args, sizeof args, "export '%s' -o '%s'", run_dir, support_path("exported.pt"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "live weights of ") != NULL, "%s", out);
    {
        tr_config rc_cfg;
        tr_error err = {0};
        char cfg_path[1600];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", run_dir);
        cr_assert_eq(tr_config_load_cli(&rc_cfg, cfg_path, NULL, 0, &err), TR_OK, "%s", err.msg);
        tr_dataset tr_set = {0}, va = {0}, te = {0};
        cr_assert_eq(tr_load_data(&rc_cfg, &tr_set, &va, &te, &err), TR_OK, "%s", err.msg);
        cr_assert_eq(te.n, 300);
        static char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "model: {torchscript: %s, input_shape: [1, 28, 28]}\n"
                 "run: {dir: %s, name: x}\n",
                 support_path("exported.pt"), support_tmpdir);
        trainrun_trainer *t = open_trainer(yaml);
        static float logits[300 * 10];
        const int64_t shape[] = {300, 1, 28, 28};
        const trainrun_batch b = view(te.x, TRAINRUN_FLOAT32, 4, shape, NULL, 0);
        cr_assert_eq(trainrun_trainer_predict(t, &b, logits, 3000), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        trainrun_trainer_close(t);
        FILE *f = fopen(support_path("ts.csv"), "r");
        cr_assert_not_null(f);
        static char line[4096];
        cr_assert_not_null(fgets(line, sizeof line, f));
        double max_diff = 0;
        int same_text = 0;
        for (int i = 0; i < 300 && fgets(line, sizeof line, f); i++) {
            char *p = line;
            for (int c = 0; c < 3; c++) p = strchr(p, ',') + 1; /* index,target,predicted, */
            const float *o = logits + i * 10;
            double mx = o[0], z = 0;
            for (int k = 1; k < 10; k++) mx = o[k] > mx ? o[k] : mx;
            for (int k = 0; k < 10; k++) z += exp((double)o[k] - mx);
            for (int k = 0; k < 10; k++) {
                char *end;
                const double want = strtod(p, &end), got = exp((double)o[k] - mx) / z;
                char txt[32];
                snprintf(txt, sizeof txt, "%.9g", got);
                same_text += strncmp(txt, p, (size_t)(end - p)) == 0 && (size_t)(end - p) == strlen(txt);
                if (fabs(got - want) > max_diff) max_diff = fabs(got - want);
                p = end + 1;
            }
        }
        fclose(f);
        fprintf(stderr,
                "export: the exported archive's probabilities vs trainrun predict's: max abs difference %.3g, "
                "%d of 3000 printed the same\n",
                max_diff, same_text);
        cr_expect_eq(same_text, 3000, "max abs difference %.3g", max_diff);
        /* and in Python: torch.jit.load of the same archive (Debian's python3-torch) */
        const int64_t xs[] = {300, 1, 28, 28};
        cr_assert_eq(tr_npy_save(support_path("te.npy"), TR_NPY_FLOAT32, xs, 4, te.x, &err), TR_OK, "%s", err.msg);
        snprintf(cfg_path, sizeof cfg_path, "jit '%s' '%s' '%s'", support_path("exported.pt"), support_path("te.npy"),
                 support_path("ts.csv"));
        const int py = python_check(cfg_path);
        if (py == 77) cr_log_warn("/usr/bin/python3 has no torch (Debian: python3-torch): torch.jit.load not checked");
        else cr_expect_eq(py, 0, "torch.jit.load in Python disagrees with trainrun predict");
        tr_dataset_free(&tr_set);
        tr_dataset_free(&va);
        tr_dataset_free(&te);
    }
    /* --weights ema: the EMA's weights go out. A run that evaluates only its EMA (eval.weights: ema) on the test
     * set: the exported archive's argmax gets exactly that evaluation's correct count */
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp_torchscript.yaml data.train_subset=1000 data.val_size=0 "
             "data.test_subset=300 train.max_steps=20 train.batch_size=32 eval.every_epoch=false log.progress=never "
             "ema.enabled=true ema.decay=0.8 eval.weights=ema run.dir='%s' run.name=tsema", support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    char ema_dir[600];
    snprintf(ema_dir, sizeof ema_dir, "%s", support_path("tsema"));
    double ema_correct[4];
    cr_assert_eq(support_read_field(ema_dir, "eval", "correct", ema_correct, NULL, 4), 1);
    snprintf(args, sizeof args, "export '%s' --weights ema -o '%s'", ema_dir, support_path("ema.pt"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "ema weights of ") != NULL, "%s", out);
    {
        tr_config ecfg;
        tr_error err = {0};
        char cfg_path[700];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", ema_dir);
        cr_assert_eq(tr_config_load_cli(&ecfg, cfg_path, NULL, 0, &err), TR_OK, "%s", err.msg);
        tr_dataset tr_set = {0}, va = {0}, te = {0};
        cr_assert_eq(tr_load_data(&ecfg, &tr_set, &va, &te, &err), TR_OK, "%s", err.msg);
        static char yaml[1024];
        snprintf(yaml, sizeof yaml, "model: {torchscript: %s, input_shape: [1, 28, 28]}\nrun: {dir: %s, name: y}\n",
                 support_path("ema.pt"), support_tmpdir);
        trainrun_trainer *t = open_trainer(yaml);
        static float logits[300 * 10];
        const int64_t shape[] = {300, 1, 28, 28};
        const trainrun_batch b = view(te.x, TRAINRUN_FLOAT32, 4, shape, NULL, 0);
        cr_assert_eq(trainrun_trainer_predict(t, &b, logits, 3000), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        trainrun_trainer_close(t);
        int64_t ema_good = 0;
        for (int i = 0; i < 300; i++) {
            int best = 0;
            for (int k = 1; k < 10; k++) best = logits[i * 10 + k] > logits[i * 10 + best] ? k : best;
            ema_good += best == te.y[i];
        }
        cr_expect_eq((double)ema_good, ema_correct[0], "the EMA archive gets %lld right, the run's EMA evaluation %g",
                     (long long)ema_good, ema_correct[0]);
        tr_dataset_free(&tr_set);
        tr_dataset_free(&va);
        tr_dataset_free(&te);
    }

    /* --weights ema on a run without an EMA: said so, exit 2 */
    snprintf(args, sizeof args, "export '%s' --weights ema -o '%s'", run_dir, support_path("ema.pt"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "has no EMA weights") != NULL, "%s", out);

    /* a shape the config gives that is not the data's is still refused, naming the key */
    snprintf(args, sizeof args, "predict '%s' model.input_shape=[784] -o '%s'", run_dir, support_path("bad.csv"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "model.input_shape") != NULL, "%s", out);
}

/* errmsg describes the most recent call, as sqlite3_errmsg: a failed call's reason, then "" after one that succeeds. */
Test(predict, errmsg_describes_the_most_recent_call)
{
    support_make_blobs(N, D, K, 2, X, Y);
    trainrun_trainer *t = open_trainer(yaml_for(k_mlp, "cross_entropy"));
    float outbuf[32 * K];
    const int64_t shape[] = {32, D};
    const trainrun_batch b = view(X, TRAINRUN_FLOAT32, 2, shape, NULL, 0);
    cr_assert_eq(trainrun_trainer_predict(t, &b, NULL, 0), TRAINRUN_E_INVALID);
    cr_expect_str_eq(trainrun_trainer_errmsg(t), "predict: out is NULL");
    cr_assert_eq(trainrun_trainer_predict(t, &b, outbuf, sizeof outbuf / sizeof *outbuf), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_expect_str_eq(trainrun_trainer_errmsg(t), "", "a successful call leaves no stale message");
    cr_assert_eq(trainrun_trainer_set_lr(t, -1.0), TRAINRUN_E_INVALID);
    cr_expect_neq(trainrun_trainer_errmsg(t)[0], '\0');
    cr_assert_eq(trainrun_trainer_set_lr(t, 0.01), TRAINRUN_OK);
    cr_expect_str_eq(trainrun_trainer_errmsg(t), "");
    trainrun_trainer_close(t);
}
