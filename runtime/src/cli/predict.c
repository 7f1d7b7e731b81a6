/*
 * predict.c -- `trainrun predict` (see predict.h): the configured test data through trainrun_trainer_predict, the
 * embedding API's own call, into a CSV.
 */
#include "predict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "best.h"
#include "config.h"
#include "data.h"
#include "image_folder.h"
#include "model_spec.h"
#include "run.h"
#include "trainrun/trainrun.h"

static int usage_error(const char *msg)
{
    fprintf(stderr,
            "trainrun predict: %s\nusage: trainrun predict RUN_DIR_OR_CHECKPOINT [key=value ...] [--images DIR] "
            "-o PREDS.csv\n",
            msg);
    return TR_E_CONFIG;
}

/* The run directory and checkpoint that PATH names: a checkpoint (it has a MANIFEST.json; its run directory is
 * two levels up, RUN_DIR/checkpoints/step-N) or a run directory (its best checkpoint by best.json when it has
 * one, else its newest checkpoint that verifies: tr_checkpoint_of_run). */
int tr_resolve_checkpoint(const char *path, char *run_dir, char *ckpt, tr_error *err)
{
    char manifest[TR_PATH_MAX + 32];
    snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", path);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return tr_error_set(err, TR_E_CONFIG, "%s: not a run directory or checkpoint (%s)", path,
                            errno ? strerror(errno) : "not a directory");
    if (stat(manifest, &st) == 0) {
        snprintf(ckpt, TR_PATH_MAX, "%s", path);
        snprintf(run_dir, TR_PATH_MAX, "%s", path);
        for (int up = 0; up < 2; up++) {
            size_t n = strlen(run_dir);
            while (n > 1 && run_dir[n - 1] == '/') run_dir[--n] = '\0';
            char *slash = strrchr(run_dir, '/');
            if (!slash) {
                snprintf(run_dir, TR_PATH_MAX, "%s", up == 0 ? "." : "..");
                break;
            }
            *slash = '\0';
            if (!run_dir[0]) snprintf(run_dir, TR_PATH_MAX, "/");
        }
        return tr_checkpoint_verify(ckpt, err);
    }
    snprintf(run_dir, TR_PATH_MAX, "%s", path);
    const char *which = NULL; /* its best checkpoint (best.json), else its newest that verifies */
    int rc = tr_checkpoint_of_run(path, ckpt, TR_PATH_MAX, &which, err);
    if (rc) return rc;
    if (!which) { /* not a run directory with checkpoints/ */
        rc = tr_checkpoint_find_latest(path, ckpt, NULL, NULL, err);
        if (rc) return rc;
        if (!ckpt[0]) return tr_error_set(err, TR_E_RUNTIME, "%s: no checkpoint that verifies", path);
    }
    return TR_OK;
}

int tr_resolve_run_config(const char *path, char *run_dir, char *ckpt, char *config, size_t config_size,
                          tr_error *err)
{
    const int rc = tr_resolve_checkpoint(path, run_dir, ckpt, err);
    if (rc) return rc;
    snprintf(config, config_size, "%s/config.yaml", run_dir);
    if (access(config, R_OK) != 0)
        return tr_error_set(err, TR_E_CONFIG, "%s: no config.yaml (give a run directory or one of its checkpoints)",
                            run_dir);
    return TR_OK;
}

/* Status codes of trainrun.h to exit codes: config errors 2, everything else that failed 1. */
static int exit_of(int status) { return status == TRAINRUN_E_CONFIG ? TR_E_CONFIG : TR_E_RUNTIME; }

/* index[,target],predicted,p_0.. (classes); index[,target_0..],predicted_0..,p_0.. (multi-label);
 * index[,target_0..],output_0.. (regression). Unlabeled inputs: no target columns. */
static void write_header(FILE *f, tr_loss_name loss, int64_t c, int labeled)
{
    fprintf(f, "index");
    if (loss == TR_LOSS_CROSS_ENTROPY) {
        fprintf(f, "%s,predicted", labeled ? ",target" : "");
        for (int64_t k = 0; k < c; k++) fprintf(f, ",p_%lld", (long long)k);
    } else {
        for (int64_t k = 0; labeled && k < c; k++) fprintf(f, ",target_%lld", (long long)k);
        const char *name = loss == TR_LOSS_BCE_WITH_LOGITS ? "predicted" : "output";
        for (int64_t k = 0; k < c; k++) fprintf(f, ",%s_%lld", name, (long long)k);
        if (loss == TR_LOSS_BCE_WITH_LOGITS)
            for (int64_t k = 0; k < c; k++) fprintf(f, ",p_%lld", (long long)k);
    }
    fputc('\n', f);
}

/* Image folders: index,file[,target],predicted,predicted_class,p_0..p_{c-1}; the file relative to its folder, the
 * class by the checkpoint's names. */
static void write_image_header(FILE *f, int labeled, int64_t c)
{
    fprintf(f, "index,file%s,predicted,predicted_class", labeled ? ",target" : "");
    for (int64_t k = 0; k < c; k++) fprintf(f, ",p_%lld", (long long)k);
    fputc('\n', f);
}

/* A CSV field: quoted (quotes doubled) when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* The predicted class of a cross-entropy model's c scores out[0..c): the first largest (both kinds of row). */
static int64_t argmax_of(const float *out, int64_t c)
{
    int64_t best = 0;
    for (int64_t k = 1; k < c; k++)
        if (out[k] > out[best]) best = k;
    return best;
}

/* Their softmax as the columns ",p_0,...,p_{c-1}": exp(out[k] - max) / sum in double, 9 significant digits. */
static void write_softmax(FILE *f, const float *out, int64_t c)
{
    double mx = out[0], z = 0;
    for (int64_t k = 1; k < c; k++)
        if (out[k] > mx) mx = out[k];
    for (int64_t k = 0; k < c; k++) z += exp((double)out[k] - mx);
    for (int64_t k = 0; k < c; k++) fprintf(f, ",%.9g", exp((double)out[k] - mx) / z);
}

static void write_image_row(FILE *f, const tr_image_set *s, int64_t i, const float *out, int64_t c, int64_t label,
                            char *const *classes, int64_t n_classes, int64_t *good)
{
    const int64_t best = argmax_of(out, c);
    fprintf(f, "%lld,", (long long)i);
    csv_field(f, s->names + s->name_off[i]);
    if (s->labeled) fprintf(f, ",%lld", (long long)label);
    fprintf(f, ",%lld,", (long long)best);
    csv_field(f, best < n_classes ? classes[best] : "");
    write_softmax(f, out, c);
    fputc('\n', f);
    *good += s->labeled && best == label;
}

/* One sample's row; adds to *good (correct, or exact-match) and *sse (regression). label < 0 / target NULL: an
 * unlabeled sample (no target columns, nothing added). */
static void write_row(FILE *f, tr_loss_name loss, int64_t index, const float *out, int64_t c, int64_t label,
                      const float *target, int64_t *good, double *sse)
{
    fprintf(f, "%lld", (long long)index);
    if (loss == TR_LOSS_CROSS_ENTROPY) {
        const int64_t best = argmax_of(out, c);
        if (label >= 0) fprintf(f, ",%lld", (long long)label);
        fprintf(f, ",%lld", (long long)best);
        write_softmax(f, out, c);
        *good += best == label;
    } else if (loss == TR_LOSS_BCE_WITH_LOGITS) {
        int all = target != NULL;
        for (int64_t k = 0; target && k < c; k++) fprintf(f, ",%.9g", target[k]);
        for (int64_t k = 0; k < c; k++) {
            fprintf(f, ",%d", out[k] > 0.0f);
            if (target) all &= (out[k] > 0.0f) == (target[k] > 0.5f);
        }
        for (int64_t k = 0; k < c; k++) fprintf(f, ",%.9g", 1.0 / (1.0 + exp(-(double)out[k])));
        *good += all;
    } else {
        for (int64_t k = 0; target && k < c; k++) fprintf(f, ",%.9g", target[k]);
        for (int64_t k = 0; k < c; k++) {
            fprintf(f, ",%.9g", out[k]);
            if (target) *sse += ((double)out[k] - target[k]) * ((double)out[k] - target[k]);
        }
    }
    fputc('\n', f);
}

int tr_cli_predict(int argc, char **argv)
{
    const char *path = NULL, *out_path = NULL, *images = NULL;
    char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
    if (!overrides) return TR_E_RUNTIME;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
            if (i + 1 >= argc) {
                free(overrides);
                return usage_error("-o needs a file name");
            }
            out_path = argv[++i];
        } else if (strcmp(argv[i], "--images") == 0) {
            if (i + 1 >= argc) {
                free(overrides);
                return usage_error("--images needs a folder");
            }
            images = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "trainrun predict: unknown option '%s'\n", argv[i]);
            free(overrides);
            return TR_E_CONFIG;
        } else if (!path) {
            path = argv[i];
        } else {
            overrides[n++] = argv[i];
        }
    }
    if (!path || !out_path) {
        free(overrides);
        return usage_error(!path ? "no run directory or checkpoint given" : "no output file given (-o PREDS.csv)");
    }

    tr_error err = {0};
    char run_dir[TR_PATH_MAX], ckpt[TR_PATH_MAX], config[TR_PATH_MAX + 16];
    int rc = tr_resolve_run_config(path, run_dir, ckpt, config, sizeof config, &err);
    tr_config cfg;
    if (!rc) rc = tr_config_load_cli(&cfg, config, overrides, n, &err);
    if (rc) {
        fprintf(stderr, "trainrun predict: %s\n", err.msg);
        free(overrides);
        return rc;
    }
    cfg.eval.test_at_end = true; /* the test data is what is predicted */

    tr_dataset train = {0}, val = {0}, test = {0};
    trainrun_trainer *tr = NULL;
    FILE *f = NULL;
    float *out = NULL;
    char tmp[TR_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    char **classes = NULL;
    int64_t n_classes = 0;
    if (images && cfg.data.format != TR_DATA_IMAGE_FOLDER)
        rc = tr_error_set(&err, TR_E_CONFIG, "--images: the run's data.format is not image_folder");
    if (!rc && cfg.data.format == TR_DATA_IMAGE_FOLDER)
        rc = tr_checkpoint_read_classes(ckpt, &classes, &n_classes, &err);
    if (!rc && images) rc = tr_image_folder_unlabeled(&cfg, images, classes, n_classes, &test, &err);
    else if (!rc) rc = tr_load_data(&cfg, &train, &val, &test, &err);
    if (!rc && test.n == 0)
        rc = tr_error_set(&err, TR_E_CONFIG, "%s: no test data (idx: data.test_images, with data.test_labels or "
                          "without (empty); csv: data.test_csv or data.test_size; npy: data.test_inputs, with "
                          "data.test_targets or without)", config);
    if (rc) goto done;

    /* A TorchScript model takes the per-sample shape of the run's data, as training gave it ([D] for flat
     * features, [C, H, W] for images): the trainer is told it unless the config names one. */
    char shape_kv[128], data_shape[80];
    if (test.h == 1 && test.w == 1) snprintf(data_shape, sizeof data_shape, "[%lld]", (long long)test.c);
    else
        snprintf(data_shape, sizeof data_shape, "[%lld, %lld, %lld]", (long long)test.c, (long long)test.h,
                 (long long)test.w);
    if (cfg.model.torchscript[0] && cfg.model.n_input_shape == 0) {
        snprintf(shape_kv, sizeof shape_kv, "model.input_shape=%s", data_shape);
        overrides[n++] = shape_kv;
    } else if (cfg.model.torchscript[0]) {
        const int ndim = test.h == 1 && test.w == 1 ? 1 : 3;
        const int64_t want[3] = {test.c, test.h, test.w};
        int same = cfg.model.n_input_shape == ndim;
        for (int i = 0; same && i < ndim; i++) same = (int64_t)cfg.model.input_shape[i] == want[i];
        if (!same) {
            rc = tr_error_set(&err, TR_E_CONFIG,
                              "model.input_shape: does not match the test data's per-sample %s "
                              "(leave the key out: the data gives the shape)",
                              data_shape);
            goto done;
        }
    }

    const int st_open = trainrun_trainer_open(config, (const char *const *)overrides, n, &tr);
    int st = st_open ? st_open : trainrun_trainer_load(tr, ckpt);
    if (st) {
        rc = tr_error_set(&err, exit_of(st), "%s", tr ? trainrun_trainer_errmsg(tr) : trainrun_errstr(st));
        goto done;
    }
    int64_t oshape[8];
    int ondim = 0;
    trainrun_trainer_output_shape(tr, oshape, &ondim);
    if (ondim != 1) {
        rc = tr_error_set(&err, TR_E_CONFIG, "the model's outputs are [N, T, C] per position; the CSV holds [N, C] "
                          "(use trainrun_trainer_predict)");
        goto done;
    }
    const int64_t c = oshape[0];
    if (cfg.train.loss != TR_LOSS_CROSS_ENTROPY && !test.unlabeled && test.t_cols != c) {
        rc = tr_error_set(&err, TR_E_CONFIG, "the model has %lld outputs but the test data %lld target columns",
                          (long long)c, (long long)test.t_cols);
        goto done;
    }

    /* The per-sample shape the model takes: the spec's input, else the data's [C, H, W] (or [D]). */
    trainrun_batch b;
    memset(&b, 0, sizeof b);
    b.x_dtype = TRAINRUN_FLOAT32;
    tr_model_spec spec;
    memset(&spec, 0, sizeof spec);
    char spec_path[TR_PATH_MAX];
    tr_config_resolve_path(&cfg, cfg.model.spec, spec_path);
    if (cfg.model.spec[0] && tr_model_spec_load(spec_path, &spec, &err) == TR_OK) {
        b.ndim = spec.input_ndim + 1;
        for (int i = 0; i < spec.input_ndim; i++) b.shape[i + 1] = spec.input_shape[i];
        tr_model_spec_free(&spec);
    } else if (test.h * test.w == 1) {
        b.ndim = 2;
        b.shape[1] = test.c;
    } else {
        b.ndim = 4;
        b.shape[1] = test.c;
        b.shape[2] = test.h;
        b.shape[3] = test.w;
    }
    const int64_t ebs = cfg.eval.batch_size;
    out = malloc((size_t)(ebs * c) * sizeof *out);
    f = fopen(tmp, "w");
    if (!out || !f) {
        rc = tr_error_set(&err, TR_E_RUNTIME, "%s: %s", tmp, !out ? "out of memory" : strerror(errno));
        goto done;
    }
    if (test.images) write_image_header(f, test.images->labeled, c);
    else write_header(f, cfg.train.loss, c, !test.unlabeled);
    int64_t good = 0;
    double sse = 0;
    tr_image_buf ibuf = {0};
    for (int64_t i = 0; i < test.n; i += ebs) {
        const int64_t m = i + ebs <= test.n ? ebs : test.n - i;
        if (!(b.x = tr_dataset_rows(&test, i, m, &ibuf, &err))) {
            rc = err.code;
            tr_image_buf_free(&ibuf);
            goto done;
        }
        b.shape[0] = m;
        if ((st = trainrun_trainer_predict(tr, &b, out, (size_t)(m * c)))) {
            rc = tr_error_set(&err, exit_of(st), "%s", trainrun_trainer_errmsg(tr));
            tr_image_buf_free(&ibuf);
            goto done;
        }
        for (int64_t j = 0; test.images && j < m; j++)
            write_image_row(f, test.images, i + j, out + j * c, c, test.y[i + j], classes, n_classes, &good);
        for (int64_t j = 0; !test.images && j < m; j++)
            write_row(f, cfg.train.loss, i + j, out + j * c, c, test.unlabeled ? -1 : test.y[i + j],
                      test.t && !test.unlabeled ? test.t + (i + j) * c : NULL, &good, &sse);
    }
    tr_image_buf_free(&ibuf);
    const int write_failed = ferror(f);
    if (fclose(f) != 0 || write_failed) {
        f = NULL;
        rc = tr_error_set(&err, TR_E_RUNTIME, "%s: write failed", tmp);
        goto done;
    }
    f = NULL;
    if (rename(tmp, out_path) != 0) {
        rc = tr_error_set(&err, TR_E_RUNTIME, "%s: cannot rename to %s: %s", tmp, out_path, strerror(errno));
        goto done;
    }
    printf("%lld %s -> %s (checkpoint %s)\n", (long long)test.n,
           images           ? "images"
           : test.unlabeled ? "unlabeled test inputs"
                            : "test samples",
           out_path, ckpt);
    if (images || test.unlabeled) { /* no targets: nothing to score */
    } else if (cfg.train.loss == TR_LOSS_CROSS_ENTROPY || cfg.train.loss == TR_LOSS_BCE_WITH_LOGITS)
        printf("%s %.4f (%lld of %lld)\n", cfg.train.loss == TR_LOSS_CROSS_ENTROPY ? "accuracy" : "subset accuracy",
               (double)good / (double)test.n, (long long)good, (long long)test.n);
    else
        printf("MSE %.6g\n", sse / (double)(test.n * c));
done:
    if (f) fclose(f);
    if (rc) {
        unlink(tmp);
        fprintf(stderr, "trainrun predict: %s\n", err.msg);
    }
    free(out);
    for (int64_t k = 0; k < n_classes; k++) free(classes[k]);
    free(classes);
    if (tr) trainrun_trainer_close(tr);
    tr_dataset_free(&train);
    tr_dataset_free(&val);
    tr_dataset_free(&test);
    free(overrides);
    return rc;
}
