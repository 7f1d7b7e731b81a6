/*
 * minimal.c -- the smallest trainrun program: it makes a toy data set in memory (4 Gaussian-ish blobs in 8
 * dimensions), hands the arrays to a run, and trains a small MLP on them. The run shuffles and batches the arrays
 * itself, validates every 25 steps, checkpoints at the end and writes metrics.jsonl like the command line does.
 *
 *   cc minimal.c $(pkg-config --cflags --libs trainrun) -o minimal && ./minimal [OUTPUT_DIR]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <trainrun/trainrun.h>

#define N 1024 /* samples  */
#define D 8    /* features */
#define K 4    /* classes  */

static void make_blobs(float *x, int64_t *y, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        y[i] = i % K;
        for (int j = 0; j < D; j++) {
            seed = seed * 1664525u + 1013904223u;
            const float noise = (float)(seed >> 8) / 16777216.0f - 0.5f;
            x[i * D + j] = (j % K == y[i] ? 1.0f : -0.3f) + 1.5f * noise;
        }
    }
}

static void on_event(void *ctx, const trainrun_event *ev)
{
    (void)ctx;
    if (ev->kind == TRAINRUN_EVENT_STEP && (ev->step == 1 || ev->step % 25 == 0))
        printf("step %lld loss %.6f\n", (long long)ev->step, ev->loss);
    else if (ev->kind == TRAINRUN_EVENT_EVAL)
        printf("%s accuracy %.4f\n", ev->split, ev->accuracy);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    char model[1024], config[2048];

    /* The model: a model spec file, as the command line uses (models/NAME.yaml). */
    snprintf(model, sizeof model, "%s/minimal-model.yaml", dir);
    FILE *f = fopen(model, "w");
    if (!f) {
        perror(model);
        return 1;
    }
    fprintf(f, "input: [%d]\nlayers:\n  - linear: {in: %d, out: 32}\n  - relu\n  - linear: {in: 32, out: %d}\n", D,
            D, K);
    fclose(f);
    snprintf(config, sizeof config,
             "seed: 1\n"
             "model: {spec: %s}\n"
             "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "train: {batch_size: 32, max_steps: 150}\n"
             "eval: {every_steps: 50, every_epoch: false}\n"
             "log: {progress: never}\n"
             "run: {dir: %s, name: minimal-run, resume: never}\n",
             model, dir);

    static float x[N * D], xv[256 * D];
    static int64_t y[N], yv[256];
    make_blobs(x, y, N, 1);
    make_blobs(xv, yv, 256, 2);
    const trainrun_batch train = {x, TRAINRUN_FLOAT32, 2, {N, D, 0, 0}, y, TRAINRUN_INT64};
    const trainrun_batch val = {xv, TRAINRUN_FLOAT32, 2, {256, D, 0, 0}, yv, TRAINRUN_INT64};

    trainrun_run *run = NULL;
    trainrun_data *train_data = NULL, *val_data = NULL;
    int rc = trainrun_run_open_yaml(config, NULL, 0, &run);
    if (rc == TRAINRUN_OK) rc = trainrun_data_arrays(&train, &train_data);
    if (rc == TRAINRUN_OK) rc = trainrun_data_arrays(&val, &val_data);
    if (rc == TRAINRUN_OK) rc = trainrun_run_set_data(run, TRAINRUN_TRAIN, train_data);
    if (rc == TRAINRUN_OK) rc = trainrun_run_set_data(run, TRAINRUN_VAL, val_data);
    if (rc == TRAINRUN_OK) rc = trainrun_run_set_data(run, TRAINRUN_TEST, val_data);
    if (rc == TRAINRUN_OK) rc = trainrun_run_set_callback(run, on_event, NULL);
    if (rc == TRAINRUN_OK) rc = trainrun_run_wait(run);

    trainrun_summary s;
    if (rc == TRAINRUN_OK && trainrun_run_summary(run, &s) == TRAINRUN_OK)
        printf("done: %lld steps, last loss %.6f, test accuracy %.4f, run directory %s\n", (long long)s.steps,
               s.last_loss, s.test_accuracy, s.run_dir);
    else
        fprintf(stderr, "minimal: %s: %s\n", trainrun_errstr(rc),
                train_data && trainrun_data_errmsg(train_data)[0] ? trainrun_data_errmsg(train_data)
                                                                   : trainrun_run_errmsg(run));
    trainrun_run_close(run);
    trainrun_data_close(train_data);
    trainrun_data_close(val_data);
    return rc == TRAINRUN_OK ? 0 : 1;
}
