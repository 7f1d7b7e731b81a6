/*
 * torchscript_predict.c -- bring your own model: train a TorchScript module saved in PyTorch
 * (torch.jit.save(torch.jit.script(m), "model.pt")) on arrays made here, then print its predictions.
 *
 * The arrays are toy 28 x 28 "images" of 10 classes: class k is a bright horizontal band at rows 2k+4 .. 2k+6 plus
 * noise. The trainer (trainrun_trainer_*) takes them a batch at a time, and trainrun_trainer_predict copies the
 * model's logits for new images into a buffer of ours -- nothing to free, no tensor in sight.
 *
 *   cc torchscript_predict.c $(pkg-config --cflags --libs trainrun) -o torchscript_predict
 *   ./torchscript_predict models/mlp.pt.gz     # the MLP of configs/fashion_mnist_mlp.yaml, as TorchScript
 *
 * Any scripted module that maps [N, 1, 28, 28] float32 to [N, 10] logits will do (a gzip'd archive loads too).
 * Output: "step S loss L" at steps 1, 25, 50, 75, 100, the first five test predictions, "test accuracy A".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <trainrun/trainrun.h>

#define N 640         /* training images    */
#define NT 200        /* test images        */
#define K 10          /* classes            */
#define PIX (28 * 28) /* pixels per image   */
#define BATCH 64

static void make_images(float *x, int64_t *y, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        y[i] = (i * 7 + 3) % K;
        for (int p = 0; p < PIX; p++) {
            seed = seed * 1664525u + 1013904223u;
            const int row = p / 28;
            const float band = row >= 2 * y[i] + 4 && row <= 2 * y[i] + 6 ? 1.5f : 0.0f;
            x[(size_t)i * PIX + p] = band + (float)(seed >> 8) / 16777216.0f - 0.5f;
        }
    }
}

static trainrun_batch images(const float *x, const int64_t *y, int64_t n)
{
    trainrun_batch b = {0};
    b.x = x;
    b.x_dtype = TRAINRUN_FLOAT32;
    b.ndim = 4; /* [N, 1, 28, 28] */
    b.shape[0] = n;
    b.shape[1] = 1;
    b.shape[2] = b.shape[3] = 28;
    b.y = y;
    b.y_dtype = TRAINRUN_INT64;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.pt\n", argv[0]);
        return 2;
    }
    static float x[N * PIX], xt[NT * PIX], logits[NT * K];
    static int64_t y[N], yt[NT];
    make_images(x, y, N, 1);
    make_images(xt, yt, NT, 2);

    /* The config, as YAML text: the per-sample input shape (there is no data set to take it from) and the
     * optimizer; the archive's path comes as an override, so no quoting of the path in YAML is needed. */
    const char *yaml = "seed: 0\n"
                       "model: {input_shape: [1, 28, 28]}\n"
                       "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n";
    char model[1100];
    snprintf(model, sizeof model, "model.torchscript=%s", argv[1]);
    const char *const overrides[] = {model};
    trainrun_trainer *t = NULL;
    int rc = trainrun_trainer_open_yaml(yaml, overrides, 1, &t);
    if (rc != TRAINRUN_OK) {
        fprintf(stderr, "open: %s: %s\n", trainrun_errstr(rc), t ? trainrun_trainer_errmsg(t) : "");
        if (t) trainrun_trainer_close(t);
        return 1;
    }
    int64_t per_sample = 0;
    rc = trainrun_trainer_output_size(t, &per_sample);
    if (rc != TRAINRUN_OK || per_sample != K) {
        fprintf(stderr, "%s gives %lld outputs per sample; this example has %d classes\n", argv[1],
                (long long)per_sample, K);
        trainrun_trainer_close(t);
        return 1;
    }

    trainrun_step_result r;
    for (int step = 0; step < 100 && rc == TRAINRUN_OK; step++) {
        const int64_t at = (int64_t)(step % (N / BATCH)) * BATCH;
        const trainrun_batch b = images(x + at * PIX, y + at, BATCH);
        rc = trainrun_trainer_train_step(t, &b, &r);
        if (rc == TRAINRUN_OK && (step == 0 || (step + 1) % 25 == 0))
            printf("step %d loss %.6f\n", step + 1, r.loss);
    }
    if (rc != TRAINRUN_OK) {
        fprintf(stderr, "train: %s\n", trainrun_trainer_errmsg(t));
        trainrun_trainer_close(t);
        return 1;
    }

    /* Predictions for the test images, into our own buffer: [NT, K] logits, row-major. */
    const trainrun_batch test = images(xt, NULL, NT);
    rc = trainrun_trainer_predict(t, &test, logits, NT * K);
    if (rc != TRAINRUN_OK) {
        fprintf(stderr, "predict: %s\n", trainrun_trainer_errmsg(t));
        trainrun_trainer_close(t);
        return 1;
    }
    int correct = 0;
    for (int i = 0; i < NT; i++) {
        int best = 0;
        for (int k = 1; k < K; k++)
            if (logits[i * K + k] > logits[i * K + best]) best = k;
        correct += best == yt[i];
        if (i < 5) printf("image %d: predicted %d (true %lld)\n", i, best, (long long)yt[i]);
    }
    printf("test accuracy %.4f\n", (double)correct / NT);
    trainrun_trainer_close(t);
    return 0;
}
