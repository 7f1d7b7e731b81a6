/*
 * embed_trainer.c -- the bench/ workloads through trainrun's embedding API (trainrun.h, trainer level): a C
 * program that owns its data and loop, as bench/raw_libtorch.cpp does, and hands each batch to
 * trainrun_trainer_train_step. It measures what an embedding application pays on top of the raw libtorch loop.
 *
 *   embed_trainer WORKLOAD [--steps N] [--warmup W] [--data DIR]
 *
 * WORKLOAD: mlp_256, convnet or data_bound; the model and optimizer come from bench/configs/WORKLOAD.yaml (run from
 * the repository root). The training images are read with zlib and normalised once (mean 0.2860, std 0.3530);
 * each epoch a Fisher-Yates shuffle (splitmix64), batches gathered into one reused buffer, drop_last. Prints
 *   RESULT form=embed workload=W threads=1 batch=B warmup=W steps=N seconds=S steps_per_s=X samples_per_s=Y
 *          data_share=D
 * Build (bench/run.sh does this): against an installed trainrun,
 *   cc -O2 bench/embed_trainer.c $(pkg-config --cflags --libs trainrun) -lz -o embed_trainer
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include <trainrun/trainrun.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned char *read_gz(const char *path, size_t *size)
{
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    int r = 0;
    while (buf && (r = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)r;
        if (n == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    gzclose(f);
    if (r < 0) {
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: embed_trainer mlp_256|convnet|data_bound [--steps N] [--warmup W] [--data DIR]\n");
        return 2;
    }
    const char *w = argv[1], *root = "/usr/share/datasets/fashion-mnist";
    long steps = strcmp(w, "convnet") == 0 ? 120 : 2000, warmup = strcmp(w, "convnet") == 0 ? 10 : 50;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--data")) root = argv[i + 1];
    }
    const int64_t batch = !strcmp(w, "mlp_256") ? 64 : !strcmp(w, "convnet") ? 128 : 1024;

    char path[1024];
    size_t isz = 0, lsz = 0;
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", root);
    unsigned char *img = read_gz(path, &isz);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", root);
    unsigned char *lbl = read_gz(path, &lsz);
    if (!img || !lbl || isz < 16 || lsz < 8 || be32(img) != 0x803 || be32(lbl) != 0x801) {
        fprintf(stderr, "embed_trainer: cannot read Fashion-MNIST under %s\n", root);
        return 1;
    }
    const int64_t n = be32(img + 4), d = (int64_t)be32(img + 8) * be32(img + 12);
    float *x = malloc((size_t)(n * d) * sizeof *x), *xb = malloc((size_t)(batch * d) * sizeof *xb);
    int64_t *y = malloc((size_t)n * sizeof *y), *yb = malloc((size_t)batch * sizeof *yb), *perm = malloc((size_t)n * sizeof *perm);
    if (!x || !xb || !y || !yb || !perm) return 1;
    for (int64_t i = 0; i < n * d; i++) x[i] = ((float)img[16 + i] / 255.0f - 0.2860f) / 0.3530f;
    for (int64_t i = 0; i < n; i++) y[i] = lbl[8 + i];
    free(img);
    free(lbl);

    snprintf(path, sizeof path, "bench/configs/%s.yaml", w);
    trainrun_trainer *tr = NULL;
    int rc = trainrun_trainer_open(path, NULL, 0, &tr);
    if (rc != TRAINRUN_OK) {
        fprintf(stderr, "embed_trainer: %s: %s\n", path, tr ? trainrun_trainer_errmsg(tr) : trainrun_errstr(rc));
        return 1;
    }
    trainrun_batch b = {.x = xb, .x_dtype = TRAINRUN_FLOAT32, .y = yb, .y_dtype = TRAINRUN_INT64};
    /* every bench model spec takes [1, 28, 28] images (bench/models/, models/convnet.yaml) */
    b.ndim = 4;
    b.shape[0] = batch, b.shape[1] = 1, b.shape[2] = 28, b.shape[3] = 28;
    uint64_t seed = 0;
    int64_t pos = n;
    double t0 = now(), data_s = 0, loss_sum = 0;
    for (long s = 0; s < warmup + steps; s++) {
        if (s == warmup) t0 = now(), data_s = 0;
        const double d0 = now();
        if (pos + batch > n) {
            for (int64_t i = 0; i < n; i++) perm[i] = i;
            for (int64_t i = n - 1; i > 0; i--) {
                const int64_t j = (int64_t)(splitmix64(&seed) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j], perm[j] = t;
            }
            pos = 0;
        }
        for (int64_t i = 0; i < batch; i++) {
            memcpy(xb + i * d, x + perm[pos + i] * d, (size_t)d * sizeof *xb);
            yb[i] = y[perm[pos + i]];
        }
        pos += batch;
        data_s += now() - d0;
        trainrun_step_result r;
        if ((rc = trainrun_trainer_train_step(tr, &b, &r)) != TRAINRUN_OK) {
            fprintf(stderr, "embed_trainer: step %ld: %s\n", s + 1, trainrun_trainer_errmsg(tr));
            return 1;
        }
        loss_sum += r.loss;
    }
    const double secs = now() - t0;
    trainrun_trainer_close(tr);
    if (loss_sum != loss_sum) return 1;
    printf("RESULT form=embed workload=%s threads=1 batch=%lld warmup=%ld steps=%ld seconds=%.4f steps_per_s=%.2f "
           "samples_per_s=%.1f data_share=%.4f\n", w, (long long)batch, warmup, steps, secs, (double)steps / secs,
           (double)(steps * batch) / secs, data_s / secs);
    free(x), free(xb), free(y), free(yb), free(perm);
    return 0;
}
