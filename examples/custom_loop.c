/*
 * custom_loop.c -- your own training loop with the trainer API: a model and optimizer built from a config, a train
 * step on batches you assemble, your own lr schedule, evaluation, and checkpoints that resume bit for bit.
 *
 *   cc custom_loop.c $(pkg-config --cflags --libs trainrun) -o custom_loop
 *   ./custom_loop DIR [--stop-at STEP]   trains to step 60; with --stop-at it saves and exits at STEP;
 *                                        started again on DIR, it loads the newest checkpoint and continues.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <trainrun/trainrun.h>

#define N 512
#define D 8
#define K 4
#define BATCH 32
#define STEPS 60

static float x[N * D];
static int64_t y[N];

static void make_blobs(uint32_t seed)
{
    for (int i = 0; i < N; i++) {
        y[i] = i % K;
        for (int j = 0; j < D; j++) {
            seed = seed * 1664525u + 1013904223u;
            x[i * D + j] = (j % K == y[i] ? 1.0f : -0.3f) + 1.5f * ((float)(seed >> 8) / 16777216.0f - 0.5f);
        }
    }
}

static int fail(trainrun_trainer *t, int rc)
{
    fprintf(stderr, "custom_loop: %s: %s\n", trainrun_errstr(rc), trainrun_trainer_errmsg(t));
    trainrun_trainer_close(t);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: custom_loop DIR [--stop-at STEP]\n");
        return 2;
    }
    const char *dir = argv[1];
    const long stop_at = argc > 3 && strcmp(argv[2], "--stop-at") == 0 ? atol(argv[3]) : 0;
    mkdir(dir, 0777);
    char model[1024], ckpts[1024], config[2048];
    snprintf(model, sizeof model, "%s/model.yaml", dir);
    snprintf(ckpts, sizeof ckpts, "%s/ckpt", dir);
    FILE *f = fopen(model, "w");
    if (!f) {
        perror(model);
        return 1;
    }
    /* dropout draws from the generator every step: the checkpoint carries its state, so a resume still matches */
    fprintf(f, "input: [%d]\nlayers:\n  - linear: {in: %d, out: 32}\n  - relu\n  - dropout: {p: 0.1}\n"
               "  - linear: {in: 32, out: %d}\n", D, D, K);
    fclose(f);
    snprintf(config, sizeof config, "seed: 3\nmodel: {spec: %s}\noptim: {name: adamw, lr: 0.01}\n", model);

    trainrun_trainer *t = NULL;
    int rc = trainrun_trainer_open_yaml(config, NULL, 0, &t);
    if (rc != TRAINRUN_OK) return fail(t, rc);
    int64_t step = 0;
    struct stat st;
    if (stat(ckpts, &st) == 0) {
        if ((rc = trainrun_trainer_load(t, ckpts)) != TRAINRUN_OK) return fail(t, rc);
        trainrun_trainer_steps(t, &step);
        printf("resumed at step %lld\n", (long long)step);
    }
    make_blobs(7);
    while (step < STEPS) {
        /* the batch of a step is a function of the step, so a resumed loop picks up the same data */
        const int64_t start = (step * BATCH) % N;
        const trainrun_batch b = {x + start * D, TRAINRUN_FLOAT32, 2, {BATCH, D, 0, 0}, y + start, TRAINRUN_INT64};
        const double lr = 0.01 * (step < 40 ? 1.0 : 0.1); /* the caller's own schedule */
        trainrun_step_result r;
        if ((rc = trainrun_trainer_set_lr(t, lr)) != TRAINRUN_OK) return fail(t, rc);
        if ((rc = trainrun_trainer_train_step(t, &b, &r)) != TRAINRUN_OK) return fail(t, rc);
        step++;
        printf("step %lld loss %.9g\n", (long long)step, r.loss);
        if (step == stop_at) {
            char path[1200];
            if ((rc = trainrun_trainer_save(t, ckpts, path, sizeof path)) != TRAINRUN_OK) return fail(t, rc);
            printf("saved %s\n", path);
            trainrun_trainer_close(t);
            return 0;
        }
    }
    const trainrun_batch all = {x, TRAINRUN_FLOAT32, 2, {N, D, 0, 0}, y, TRAINRUN_INT64};
    trainrun_step_result e;
    trainrun_memory m;
    if ((rc = trainrun_trainer_eval_step(t, &all, &e)) != TRAINRUN_OK) return fail(t, rc);
    if ((rc = trainrun_trainer_memory(t, &m)) != TRAINRUN_OK) return fail(t, rc);
    printf("eval loss %.6f accuracy %.4f; %lld bytes in tensors (peak %lld)\n", e.loss, e.accuracy,
           (long long)m.allocated_bytes, (long long)m.peak_bytes);
    trainrun_trainer_close(t);
    return 0;
}
