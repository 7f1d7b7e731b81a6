/*
 * run_setup.c -- a run's set-up (tr_run_open): threads and seed first, then data, model and optimizer, the
 * selection monitors, the run directory (run_dir.c), the log and batch buffers, a resume or init.from (those two in
 * run_restore.c); and its mirror, teardown. The model, optimizer, EMA and generator state are the run's tr_core
 * (model_core.c, shared with the embedding API's trainer); tr_load_data is shared with it too.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "csv.h"
#include "device.h"
#include "io.h"
#include "image_folder.h"
#include "npy.h"
#include "run_internal.h"
#include "text.h"

/* The caller's data (embedding API): borrowed as given -- no normalisation, no split; teardown leaves it alone. */
static int setup_caller_data(tr_run_state *t, tr_error *err)
{
    const tr_run_data *d = &t->data;
    const tr_config *cfg = t->cfg;
    if (d->train) t->train = *d->train;
    if (d->val) t->val = *d->val;
    if (d->test) t->test = *d->test;
    if (!cfg->eval.test_at_end && cfg->eval.split != TR_EVAL_TEST) memset(&t->test, 0, sizeof t->test);
    const tr_dataset *sets[] = {d->val, d->test};
    const int64_t c = d->next_batch ? d->c : t->train.c, h = d->next_batch ? d->h : t->train.h,
                  w = d->next_batch ? d->w : t->train.w;
    for (int i = 0; i < 2; i++)
        if (sets[i] && (sets[i]->c != c || sets[i]->h != h || sets[i]->w != w))
            return tr_error_set(err, TR_E_CONFIG, "%s data: samples of [%lld, %lld, %lld] but training samples of "
                                "[%lld, %lld, %lld]", i ? "test" : "validation", (long long)sets[i]->c,
                                (long long)sets[i]->h, (long long)sets[i]->w, (long long)c, (long long)h, (long long)w);
    if (d->next_batch) {
        t->train = (tr_dataset){.c = d->c, .h = d->h, .w = d->w};
        if (cfg->train.max_steps <= 0)
            return tr_error_set(err, TR_E_CONFIG, "train.max_steps: a run fed by a batch callback needs max_steps > 0");
        return TR_OK;
    }
    if (t->train.n < cfg->train.batch_size)
        return tr_error_set(err, TR_E_CONFIG, "train.batch_size: %lld is larger than the %lld training samples",
                            (long long)cfg->train.batch_size, (long long)t->train.n);
    return TR_OK;
}

/* data.root must be a directory when files are read from under it: a config error naming the key (exit 2), not
 * a failing file read (exit 1). A CSV table or npy array given as ./x, ../x or /x does not use it. */
static int check_data_root(const tr_config *cfg, tr_error *err)
{
    const char *own = cfg->data.format == TR_DATA_CSV            ? cfg->data.train_csv
                      : cfg->data.format == TR_DATA_NPY          ? cfg->data.train_inputs
                      : cfg->data.format == TR_DATA_TEXT         ? cfg->data.train_text
                      : cfg->data.format == TR_DATA_TOKENS       ? cfg->data.train_tokens
                      : cfg->data.format == TR_DATA_IMAGE_FOLDER ? cfg->data.train_root
                                                                 : "";
    if (own[0] == '/' || strncmp(own, "./", 2) == 0 || strncmp(own, "../", 3) == 0) return TR_OK;
    char root[TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->data.root, root);
    struct stat st;
    if (stat(root, &st) != 0)
        return tr_error_set(err, TR_E_CONFIG, "data.root: %s: %s%s", root, strerror(errno),
                            strcmp(root, cfg->data.root) ? " (relative paths resolve against the config file's "
                                                           "directory)" : "");
    if (!S_ISDIR(st.st_mode)) return tr_error_set(err, TR_E_CONFIG, "data.root: %s is not a directory", root);
    return TR_OK;
}

/* data.format text / tokens (text.h): the splits' tokens as data sets of windows. Training: (n - 1) / block
 * windows make an epoch; validation: the tail's consecutive windows, at most data.val_windows. */
static int load_token_data(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_error *err)
{
    tr_token_splits s;
    tr_vocab v;
    const int rc = tr_text_load(cfg, &s, &v, err);
    if (rc) return rc;
    const int64_t T = cfg->data.block_size;
    *train = (tr_dataset){.tokens = s.train, .n_tokens = s.n_train, .block = T, .n = (s.n_train - 1) / T, .c = T,
                          .h = 1, .w = 1, .num_classes = v.size, .vocab = v};
    int64_t nv = s.n_val > T ? (s.n_val - 1) / T : 0;
    if (cfg->data.val_windows > 0 && nv > cfg->data.val_windows) nv = cfg->data.val_windows;
    *val = (tr_dataset){.tokens = s.val, .n_tokens = s.n_val, .block = T, .n = nv, .c = T, .h = 1, .w = 1,
                        .num_classes = v.size};
    return TR_OK;
}

/* tr_idx_load, its error led by the config key that named the file ("data.train_images: PATH: ..."). lbl NULL:
 * the images alone (unlabeled). */
static int idx_keyed(const char *img, const char *img_key, const char *lbl, const char *lbl_key, int64_t limit,
                     tr_dataset *out, tr_error *err)
{
    const int rc = tr_idx_load(img, lbl, limit, out, err);
    if (!rc) return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return tr_error_set(err, rc, "%s: %s", lbl && strncmp(msg, lbl, strlen(lbl)) == 0 ? lbl_key : img_key, msg);
}

int tr_load_data(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err)
{
    const int root_rc = check_data_root(cfg, err);
    if (root_rc) return root_rc;
    if (cfg->data.format == TR_DATA_CSV) return tr_csv_setup(cfg, train, val, test, err);
    if (cfg->data.format == TR_DATA_NPY) return tr_npy_setup(cfg, train, val, test, err);
    if (cfg->data.format == TR_DATA_IMAGE_FOLDER) return tr_image_folder_setup(cfg, train, val, test, err);
    if (cfg->data.format == TR_DATA_TEXT || cfg->data.format == TR_DATA_TOKENS)
        return load_token_data(cfg, train, val, err);
    char root[TR_PATH_MAX], img[2 * TR_PATH_MAX], lbl[2 * TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->data.root, root);
    snprintf(img, sizeof img, "%s/%s", root, cfg->data.train_images);
    snprintf(lbl, sizeof lbl, "%s/%s", root, cfg->data.train_labels);
    int rc = idx_keyed(img, "data.train_images", lbl, "data.train_labels", cfg->data.train_subset, train, err);
    if (rc) return rc;
    if (cfg->eval.test_at_end || cfg->eval.split == TR_EVAL_TEST) {
        snprintf(img, sizeof img, "%s/%s", root, cfg->data.test_images);
        snprintf(lbl, sizeof lbl, "%s/%s", root, cfg->data.test_labels);
        const char *lpath = cfg->data.test_labels[0] ? lbl : NULL; /* data.test_labels empty: images alone */
        if ((rc = idx_keyed(img, "data.test_images", lpath, "data.test_labels", cfg->data.test_subset, test, err)))
            return rc;
        if (test->num_classes < train->num_classes) test->num_classes = train->num_classes;
        if ((rc = tr_dataset_normalize(test, cfg->data.mean, cfg->data.std, cfg->data.n_mean, err))) return rc;
    }
    if ((rc = tr_dataset_normalize(train, cfg->data.mean, cfg->data.std, cfg->data.n_mean, err))) return rc;
    if (cfg->data.val_size > 0 &&
        (rc = tr_dataset_carve(train, cfg->data.val_size, cfg->seed, val, "data.val_size", err)))
        return rc;
    return TR_OK;
}

/* data.augment for the loader (tr_loader_augment); a caller's batch callback gathers its own batches. */
static int setup_augment(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    if (t->data.next_batch && (cfg->data.augment.crop_padding > 0 || cfg->data.augment.hflip > 0))
        return tr_error_set(err, TR_E_CONFIG, "%s: augmentation applies to the batches the runtime gathers, not to "
                            "a caller's next_batch callback (augment in the callback instead)",
                            cfg->data.augment.crop_padding > 0 ? "data.augment.crop_padding" : "data.augment.hflip");
    if (t->data.next_batch) return TR_OK;
    return tr_loader_augment(cfg, &t->train, !t->data.train || t->data.train_from_files, &t->loader.o.augment,
                             err);
}

static int setup_data(tr_run_state *t, tr_error *err)
{
    if (t->data.train || t->data.next_batch) {
        const int rc = setup_caller_data(t, err);
        return rc ? rc : setup_augment(t, err);
    }
    const tr_config *cfg = t->cfg;
    const int rc = tr_load_data(cfg, &t->train, &t->val, &t->test, err);
    int rc2;
    if (rc) return rc;
    if (t->test.unlabeled) { /* inputs without targets are for trainrun predict: nothing to evaluate */
        const char *what = cfg->data.format == TR_DATA_IDX   ? "data.test_images: no data.test_labels"
                           : cfg->data.format == TR_DATA_CSV ? "data.test_csv: no target columns"
                                                             : "data.test_inputs: no data.test_targets";
        if (cfg->eval.split == TR_EVAL_TEST)
            return tr_error_set(err, TR_E_CONFIG, "%s, but eval.split: test evaluates on the test set, which needs "
                                "targets (a test set without them is for trainrun predict)", what);
        tr_log_message(&t->sinks.log, "%s, so no test evaluation (trainrun predict writes the predictions of these %lld "
                       "inputs)", what, (long long)t->test.n);
        tr_dataset_free(&t->test);
    }
    if (t->train.n < cfg->train.batch_size * cfg->train.accumulate_steps)
        return tr_error_set(err, TR_E_CONFIG, "train.batch_size: %lld x accumulate_steps %lld is larger than the "
                            "%lld training samples", (long long)cfg->train.batch_size,
                            (long long)cfg->train.accumulate_steps, (long long)t->train.n);
    if ((rc2 = setup_augment(t, err))) return rc2;
    const tr_dataset *sets[] = {&t->train, &t->val, &t->test};
    static const char *const names[] = {"training", "validation", "test"};
    for (int i = 0; i < 3; i++) /* data.skip_bad_files: what was left out, said once */
        if (sets[i]->images && sets[i]->images->skipped)
            tr_log_message(&t->sinks.log, "data.skip_bad_files: %lld bad file%s skipped in the %s folder %s; the first: %s",
                           (long long)sets[i]->images->skipped, sets[i]->images->skipped == 1 ? "" : "s", names[i],
                           sets[i]->images->root, sets[i]->images->skip_note);
    int64_t cached = 0;
    int images = 0;
    for (int i = 0; i < 3; i++)
        if (sets[i]->images) images = 1, cached += sets[i]->images->cache_bytes;
    if (images && cached > 0 && cfg->data.cache != TR_IMAGE_CACHE_DISK)
        tr_log_message(&t->sinks.log, "data.cache: decoded images are kept in memory after their first decode (%lld bytes)",
                       (long long)cached);
    else if (images && cfg->data.cache == TR_IMAGE_CACHE_AUTO)
        tr_log_message(&t->sinks.log, "data.cache: auto: the decoded images would take more than a quarter of the memory "
                                "available: they are decoded from their files every epoch");
    for (int i = 0; i < 3; i++) { /* data.cache: disk: what each set's cache file gave (image_folder.h) */
        int warn = 0;
        const char *note = tr_image_disk_note(sets[i]->images, &warn);
        if (note) tr_log_message(&t->sinks.log, "%s: %s: %s", warn ? "warning: data.cache: disk" : "data", names[i], note);
    }
    if (cfg->data.train_subset > 0 && t->val.n > t->train.n) /* validation is carved from the subset */
        tr_log_message(&t->sinks.log, "warning: data.val_size %lld is carved from data.train_subset %lld: %lld samples "
                                "are left to train on (lower data.val_size to keep more)", (long long)t->val.n,
                       (long long)cfg->data.train_subset, (long long)t->train.n);
    return TR_OK;
}

/* "[a, b, c]" of n sizes into buf. */
static const char *shape_text(const int64_t *s, int n, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* model.torchscript: the archive, fed the data's per-sample shape ([D] for flat features, [C, H, W] for images). */
static int setup_torchscript(tr_run_state *t, char *path, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    const tr_dataset *d = &t->train;
    tr_config_resolve_path(cfg, cfg->model.torchscript, path);
    int64_t shape[3] = {d->c, d->h, d->w};
    const int ndim = d->h == 1 && d->w == 1 ? 1 : 3;
    t->shape.sample_elems = d->c * d->h * d->w;
    t->shape.batch_ndim = ndim + 1;
    t->shape.block = d->tokens ? d->block : 0;
    memcpy(t->shape.sample_shape, shape, sizeof t->shape.sample_shape);
    if (cfg->model.n_input_shape > 0) {
        int same = cfg->model.n_input_shape == ndim;
        for (int i = 0; same && i < ndim; i++) same = (int64_t)cfg->model.input_shape[i] == shape[i];
        if (!same) {
            char want[96], got[96];
            int64_t given[TR_MAX_CHANNELS];
            for (int i = 0; i < cfg->model.n_input_shape; i++) given[i] = (int64_t)cfg->model.input_shape[i];
            return tr_error_set(err, TR_E_CONFIG, "model.input_shape: %s does not match the data's per-sample %s",
                                shape_text(given, cfg->model.n_input_shape, got, sizeof got),
                                shape_text(shape, ndim, want, sizeof want));
        }
    }
    int rc = tr_core_build(&t->core, cfg, NULL, path, shape, ndim, err);
    trs_dtype in = TRS_DTYPE_FLOAT32;
    if (!rc) trs_model_input_dtype(t->core.model, &in);
    if (!rc && t->shape.block && in != TRS_DTYPE_INT64)
        return tr_error_set(err, TR_E_CONFIG, "%s: its forward runs on float32 inputs of shape [2, %lld], but "
                            "data.format %s feeds int64 token ids [N, %lld]: a language model embeds them "
                            "(nn.Embedding)", path, (long long)shape[0], cfg->data.format == TR_DATA_TEXT ? "text" : "tokens",
                            (long long)shape[0]);
    if (!rc && !t->shape.block && in == TRS_DTYPE_INT64 && !t->data.next_batch)
        return tr_error_set(err, TR_E_CONFIG, "%s: its forward takes int64 token ids, but this data is float32 "
                            "features (data.format: text or tokens feeds token ids)", path);
    return rc;
}

/* The config key and file that hold the labels of split i (0 training, 1 validation: carved from training, 2 test),
 * for a message about one of them: "data.train_targets (/data/y.npy)". "" for a caller's arrays. */
static void label_source(const tr_config *cfg, const tr_run_state *t, int i, char *out, size_t n)
{
    const int test = i == 2;
    const char *key = NULL, *file = NULL;
    if (t->data.train || t->data.next_batch) {
        snprintf(out, n, "the %s arrays given to trainrun_run_set_data", test ? "test" : i ? "validation" : "training");
        return;
    }
    switch (cfg->data.format) {
    case TR_DATA_NPY:
        key = test ? "data.test_targets" : "data.train_targets";
        file = test ? cfg->data.test_targets : cfg->data.train_targets;
        break;
    case TR_DATA_CSV:
        key = test ? (cfg->data.test_targets[0] ? "data.test_targets" : "data.test_csv")
                   : (cfg->data.train_targets[0] ? "data.train_targets" : "data.train_csv");
        file = test ? (cfg->data.test_targets[0] ? cfg->data.test_targets : cfg->data.test_csv)
                    : (cfg->data.train_targets[0] ? cfg->data.train_targets : cfg->data.train_csv);
        break;
    case TR_DATA_IDX:
        key = test ? "data.test_labels" : "data.train_labels";
        file = test ? cfg->data.test_labels : cfg->data.train_labels;
        break;
    default: key = "data.root"; file = cfg->data.root;
    }
    snprintf(out, n, "%s (%s)", key, file);
}

static int setup_model(tr_run_state *t, tr_error *err)
{
    static const char *const k_loss_names[] = {"cross_entropy", "bce_with_logits", "mse", "smooth_l1"};
    const tr_config *cfg = t->cfg;
    char path[TR_PATH_MAX];
    int rc = TR_OK;
    const tr_dataset *d = &t->train;
    if (cfg->model.torchscript[0]) {
        rc = setup_torchscript(t, path, err);
    } else {
        tr_config_resolve_path(cfg, cfg->model.spec, path);
        if (d->tokens)
            return tr_error_set(err, TR_E_CONFIG, "model.spec: data.format %s feeds int64 token ids, which a "
                                "sequential model spec cannot embed: give a TorchScript model (model.torchscript, e.g. "
                                "models/gpt.pt)", cfg->data.format == TR_DATA_TEXT ? "text" : "tokens");
        tr_model_spec spec = {0};
        rc = tr_model_spec_load(path, &spec, err);
        if (rc) return rc;
        t->shape.sample_elems = d->c * d->h * d->w;
        t->shape.batch_ndim = spec.input_ndim + 1;
        memcpy(t->shape.sample_shape, spec.input_shape, sizeof t->shape.sample_shape);
        if (spec.input_ndim == 1) {
            if (spec.input_shape[0] != t->shape.sample_elems)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld] does not match the data's %lld features per sample",
                                  path, (long long)spec.input_shape[0], (long long)t->shape.sample_elems);
        } else if (spec.input_ndim == 2) { /* [T, D]: the data's samples, row-major, seen as T rows of D */
            if (spec.input_shape[0] * spec.input_shape[1] != t->shape.sample_elems)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld, %lld] does not match the data's %lld values per "
                                  "sample", path, (long long)spec.input_shape[0], (long long)spec.input_shape[1],
                                  (long long)t->shape.sample_elems);
        } else {
            if (spec.input_shape[0] != d->c || spec.input_shape[1] != d->h || spec.input_shape[2] != d->w)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld, %lld, %lld] does not match the data's [%lld, %lld, %lld]",
                                  path, (long long)spec.input_shape[0], (long long)spec.input_shape[1],
                                  (long long)spec.input_shape[2], (long long)d->c, (long long)d->h, (long long)d->w);
        }
        if (!rc) rc = tr_core_build(&t->core, cfg, &spec, path, spec.input_shape, spec.input_ndim, err);
        tr_model_spec_free(&spec);
    }
    if (rc) return rc;
    t->core.step_opts.dist = t->dist.pg; /* NULL in one process: the train step averages over this group */
    t->core.step_opts.dist_bucket_bytes = (size_t)(cfg->dist.bucket_cap_mb * 1024.0 * 1024.0);

    int64_t out_dim = 0;
    if (trs_model_output_dim(t->core.model, &out_dim) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "%s", trs_model_errmsg(t->core.model));
    const tr_dataset *sets[] = {&t->train, &t->val, &t->test};
    static const char *const names[] = {"training", "validation", "test"};
    const int float_loss = t->core.step_opts.loss != TRS_LOSS_CROSS_ENTROPY;
    if (!t->data.next_batch && float_loss != (t->train.t_cols > 0))
        return tr_error_set(err, TR_E_CONFIG, "train.loss: %s needs %s targets; the training data has %s (data.target: "
                            "class, multi_hot or regression with data.format csv or npy; trainrun_data_arrays_targets "
                            "for arrays)", k_loss_names[cfg->train.loss], float_loss ? "float" : "class-index",
                            t->train.t_cols > 0 ? "float targets" : "class indices");
    if (t->train.t_cols > 0 && out_dim != t->train.t_cols && cfg->model.torchscript[0]) {
        int64_t out[TRS_MAX_DIMS + 1] = {2}, need[2] = {2, t->train.t_cols};
        int out_ndim = 0;
        trs_model_output_shape(t->core.model, out + 1, &out_ndim);
        out_ndim++;
        char b[96], c[96];
        return tr_error_set(err, TR_E_CONFIG, "%s: the module's output for a batch of 2 is %s but the targets are %s",
                            path, shape_text(out, out_ndim, b, sizeof b), shape_text(need, 2, c, sizeof c));
    }
    if (t->train.t_cols > 0 && out_dim != t->train.t_cols)
        return tr_error_set(err, TR_E_CONFIG, "%s: the model has %lld outputs but the data has %lld target columns",
                            path, (long long)out_dim, (long long)t->train.t_cols);
    for (int i = 0; i < 3; i++) {
        if (out_dim >= sets[i]->num_classes) continue;
        /* the data's fault as much as the model's: which file, which sample, which class */
        char src[TR_PATH_MAX + 64], first[96] = "";
        label_source(cfg, t, i, src, sizeof src);
        for (int64_t j = 0; sets[i]->y && j < sets[i]->n; j++)
            if (sets[i]->y[j] >= out_dim) {
                snprintf(first, sizeof first, "; the first is %s sample %lld, class %lld", names[i], (long long)j,
                         (long long)sets[i]->y[j]);
                break;
            }
        if (!cfg->model.torchscript[0])
            return tr_error_set(err, TR_E_CONFIG,
                                "%s: the %s labels go up to %lld, but the model (%s) has %lld "
                                "outputs, classes 0 to %lld%s%s: fix the labels or give the model more outputs",
                                src, names[i], (long long)sets[i]->num_classes - 1, path, (long long)out_dim,
                                (long long)out_dim - 1, first, i == 1 ? " (validation is carved from training)" : "");
        int64_t in[4] = {2, d->c, d->h, d->w}, out[TRS_MAX_DIMS + 1] = {2}, need[2] = {2, sets[i]->num_classes};
        int out_ndim = 0;
        trs_model_output_shape(t->core.model, out + 1, &out_ndim);
        out_ndim++; /* per-sample shape, behind the probe batch of 2 */
        char a[96], b[96], c[96];
        return tr_error_set(err, TR_E_CONFIG, "%s: forward maps a batch of shape %s to %s, but the %s labels go up "
                            "to %lld: cross_entropy needs outputs of shape %s (or more classes)", path,
                            shape_text(in, t->shape.batch_ndim, a, sizeof a), shape_text(out, out_ndim, b, sizeof b),
                            names[i], (long long)sets[i]->num_classes - 1, shape_text(need, 2, c, sizeof c));
    }
    if (cfg->eval.top_k > out_dim)
        return tr_error_set(err, TR_E_CONFIG, "eval.top_k: %d is more than the model's %lld outputs", cfg->eval.top_k,
                            (long long)out_dim);
    if ((rc = tr_metrics_init(&t->eval.metrics, tr_task_of_loss(t->core.step_opts.loss), out_dim, err))) return rc;
    if (t->shape.block)
        tr_metrics_set_lm(&t->eval.metrics, t->train.vocab.kind == TR_VOCAB_CHARS   ? "bpc"
                                       : t->train.vocab.kind == TR_VOCAB_BYTES ? "bpb"
                                                                               : "bits_per_token");
    return tr_core_add_ema(&t->core, cfg, err);
}

void run_warn_to_log(void *ctx, const char *msg) { tr_log_message(ctx, "warning: %s", msg); }

/* What a checkpoint's cursor must fit: this rank's epoch of the data set (none for the caller's batches). */
tr_ckpt_expect run_ckpt_expect(const tr_run_state *t)
{
    return (tr_ckpt_expect){.epoch_samples = t->data.next_batch ? -1 : tr_dist_shard_size(&t->dist, t->train.n)};
}

void run_teardown(tr_run_state *t)
{
    tr_ckpt_policy_close(&t->ckpt); /* conclude took any save in flight; joined here whatever the path */
    tr_checkpoint_release_spare(); /* the last snapshot's mapping, kept for a next one (checkpoint.h) */
    tr_loader_close(&t->loader); /* first: its thread reads the data set */
    tr_dist_free_rng(&t->p);
    tr_dist_close(&t->dist);
    if (t->sinks.trace) fclose(t->sinks.trace);
    tr_tb_close(&t->sinks.tb);
    if (t->sinks.log_open) tr_log_close(&t->sinks.log);
    tr_csv_sink_close(&t->sinks.csv);
    run_watchdog_free(t);
    tr_metrics_free(&t->eval.metrics);
    tr_core_close(&t->core); /* EMA, optimizer, model, generator state */
    if (!t->data.train && !t->data.next_batch) { /* the caller's data is the caller's */
        tr_dataset_free(&t->train);
        tr_dataset_free(&t->val);
        tr_dataset_free(&t->test);
    }
    tr_image_buf_free(&t->eval.buf);
    free(t->eval.ids);
    free(t->eval.y);
    free(t->eval.starts);
    run_dir_release(t); /* last: everything this process writes into the run directory is written */
}

/* Each metrics.jsonl record, just appended, to the sinks derived from it (today: metrics.csv). */
static void on_record(void *ctx, const char *line)
{
    tr_run_state *t = ctx;
    tr_csv_sink_record(&t->sinks.csv, line);
}

/* Allocate the batch buffers and open the log: what the loop needs once the data and model are known. */
static int setup_loop(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    const int64_t bs = cfg->train.batch_size * cfg->train.accumulate_steps; /* samples per optimizer step */
    t->shape.step_batch = bs;
    const int64_t epoch_n = tr_dist_shard_size(&t->dist, t->train.n); /* samples per epoch on this rank */
    t->shape.steps_per_epoch = cfg->train.drop_last ? epoch_n / bs : (epoch_n + bs - 1) / bs;
    t->shape.total_steps =
        cfg->train.max_steps > 0 ? cfg->train.max_steps : cfg->train.epochs * t->shape.steps_per_epoch;
    if (!t->data.next_batch) { /* the order and the batch buffers (a callback's batches are the caller's) */
        const tr_loader_opts o = {.seed = cfg->seed, .shuffle = cfg->data.shuffle, .prefetch = cfg->data.prefetch,
                                  .step_batch = bs, .steps_per_epoch = t->shape.steps_per_epoch,
                                  .augment = t->loader.o.augment};
        const int rc = tr_loader_open(&t->loader, &t->train, &t->dist, &o, err);
        if (rc) return rc;
    }
    if (t->shape.block) { /* one evaluation batch of windows */
        const size_t ebs = (size_t)cfg->eval.batch_size, per = (size_t)t->shape.block;
        t->eval.starts = malloc(ebs * sizeof *t->eval.starts);
        t->eval.ids = malloc(ebs * per * sizeof *t->eval.ids);
        t->eval.y = malloc(ebs * per * sizeof *t->eval.y);
        if (!t->eval.starts || !t->eval.ids || !t->eval.y)
            return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
    }
    t->p.epoch_samples = t->data.next_batch ? -1 : epoch_n; /* recorded in checkpoints: the cursor's bound */
    t->p.step_samples = bs;                                 /* ... and the geometry it moves by (checkpoint.h) */
    t->p.drop_last = cfg->train.drop_last;
    if (tr_dist_is_main(&t->dist)) { /* metrics.csv follows metrics.jsonl record by record */
        tr_csv_sink_open(&t->sinks.csv, t->dir.path, run_warn_to_log, &t->sinks.log);
        t->sinks.log.on_record = on_record;
        t->sinks.log.record_ctx = t;
    }
    int rc = tr_dist_log_open(&t->dist, &t->sinks.log, cfg, t->dir.path, t->shape.total_steps, err);
    if (rc) return rc;
    t->sinks.log_open = 1;
    t->sinks.log.memory_device = t->core.device; /* records carry the memory figures of the run's device */
    trs_model_param_count(t->core.model, &t->sum.params);
    tr_log_message(&t->sinks.log, "trainrun %s: %lld parameters, %lld train / %lld val / %lld test samples, %lld steps -> %s",
                   TR_VERSION, (long long)t->sum.params, (long long)t->train.n, (long long)t->val.n,
                   (long long)t->test.n, (long long)t->shape.total_steps, t->dir.path);
    int intra = 0, inter = 0, blas = 0;
    trs_get_threads(&intra, &inter, &blas);
    char device[32];
    tr_device_name(&t->core.device, device, sizeof device);
    tr_log_message(&t->sinks.log, "device %s; threads: %d intra-op, %d inter-op, BLAS %d%s; malloc thresholds %s; batch "
                   "prefetch %s", device, intra, inter, blas, blas < 0 ? " (unknown BLAS)" : "",
                   t->malloc_tuning.applied ? "pinned" : "glibc's", cfg->data.prefetch ? "on" : "off");
    /* through the log, not stderr: an embedding program's log function gets it like every other line */
    if (t->malloc_tuning.warning[0]) tr_log_message(&t->sinks.log, "warning: %s", t->malloc_tuning.warning);
    if (cfg->schedule.warmup_steps > t->shape.total_steps)
        tr_log_message(&t->sinks.log, "warning: schedule.warmup_steps (%lld) is longer than the run (%lld steps): the lr "
                                "never reaches optim.lr", (long long)cfg->schedule.warmup_steps,
                       (long long)t->shape.total_steps);
    if (t->dist.world_size > 1)
        tr_log_message(&t->sinks.log, "%d ranks: batch %lld per rank, %lld global; %lld of %lld samples per rank and epoch",
                       t->dist.world_size, (long long)bs, (long long)bs * t->dist.world_size, (long long)epoch_n,
                       (long long)t->train.n);
    return TR_OK;
}

/* Image folders: the class names go into RUN_DIR/classes.json and every checkpoint (trainer.json "classes"), so
 * that predict and a resume map class indices to the same names; a resume whose folders name other classes than
 * its checkpoint's is refused (the labels would silently mean other things). */
static int run_image_classes(tr_run_state *t, tr_error *err)
{
    const tr_image_set *s = t->train.images;
    if (!s) return TR_OK;
    t->p.classes = (const char *const *)s->classes;
    t->p.n_classes = s->n_classes;
    if (t->dir.resume_from[0]) {
        char **saved = NULL;
        int64_t n = 0;
        int rc = tr_checkpoint_read_classes(t->dir.resume_from, &saved, &n, err);
        if (rc) return rc;
        int same = n == s->n_classes;
        int64_t first = -1;
        for (int64_t i = 0; same && i < n; i++)
            if (strcmp(saved[i], s->classes[i]) != 0) same = 0, first = i;
        if (!same && saved)
            rc = tr_error_set(err, TR_E_CONFIG,
                              "data.train_root: its %lld classes are not the checkpoint's %lld (%s%s%s%s"
                              "): resuming would give the labels other meanings (checkpoint %s)",
                              (long long)s->n_classes, (long long)n, first >= 0 ? "class " : "",
                              first >= 0 ? s->classes[first] : "", first >= 0 ? " where the checkpoint has " : "",
                              first >= 0 ? saved[first] : "another count", t->dir.resume_from);
        for (int64_t i = 0; i < n; i++) free(saved[i]);
        free(saved);
        if (rc) return rc;
    }
    if (!tr_dist_is_main(&t->dist)) return TR_OK;
    char *json = tr_image_classes_json(s);
    if (!json) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/classes.json", t->dir.path);
    const int rc = tr_io_write_file_atomic(path, json, strlen(json), err);
    free(json);
    return rc;
}

static int open_locked(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    int rc = tr_config_validate(cfg, err);
    const char *world = getenv("WORLD_SIZE");
    if (!rc && world && *world && strcmp(world, "1") != 0) /* before the wait, so a watcher knows where it stands */
        tr_log_message(&t->sinks.log,
                       "rank %s of %s: joining the process group at %s:%s (at most dist.timeout_seconds "
                       "%g s)",
                       getenv("RANK") ? getenv("RANK") : "?", world,
                       getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "?",
                       getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "?", cfg->dist.timeout_seconds);
    if (!rc) rc = tr_dist_open(&t->dist, cfg, run_stop_requested, t, err);
    if (!rc) rc = tr_device_resolve(cfg->device, &t->core.device, err); /* before any data is read: refused at once */
    if (!rc && cfg->watchdog.snapshot && !trs_cuda_memory_snapshot_built())
        rc = tr_error_set(err, TR_E_CONFIG,
                          "watchdog.snapshot: this build cannot record CUDA memory history (it needs a CUDA build "
                          "against libtorch 2.1 or later; this one: libtorch %s, CUDA %s)",
                          trs_torch_version(), trs_cuda_built() ? "ON" : "OFF");
    if (!rc && tr_dist_is_main(&t->dist)) rc = run_dir_claim(t, err);   /* one writer: refused before anything else */
    if (!rc) rc = tr_setup_threads(cfg, &t->malloc_tuning.applied, t->malloc_tuning.warning, sizeof t->malloc_tuning.warning, err);
    if (!rc) rc = setup_data(t, err);
    if (!rc) rc = setup_model(t, err);
    if (!rc) rc = run_watchdog_record(t, err);
    if (!rc) rc = run_setup_selection(t, err);
    if (!rc && tr_dist_is_main(&t->dist)) rc = run_dir_setup(t, err);
    if (!rc && tr_dist_is_main(&t->dist) && t->shape.block)
        rc = tr_run_dir_vocab(t->cfg, t->dir.path, t->dir.resume_from, &t->train.vocab, err);
    if (!rc && tr_dist_is_main(&t->dist)) rc = run_dir_write_files(t, 0, err);
    rc = tr_dist_agree(&t->dist, rc, err); /* one rank's set-up error stops every rank */
    if (!rc) rc = tr_dist_share_paths(&t->dist, t->dir.path, t->dir.resume_from, err);
    if (!rc) rc = run_watchdog_open(t, err);
    if (!rc) rc = setup_loop(t, err);
    if (!rc) rc = run_restore(t, err);
    if (!rc) rc = run_image_classes(t, err);
    if (!rc) rc = tr_dist_sync_model(&t->dist, t->core.model, err);
    if (!rc && t->dist.pg) trs_dist_stats(t->dist.pg, &t->clock.allreduce0, NULL, NULL, NULL);
    if (rc) {
        t->phase = RUN_FINISHED;
        return t->rc = rc;
    }
    if (t->dir.resume_from[0] && run_complete(t)) {
        if (t->p.sel.es.stopped)
            tr_log_message(&t->sinks.log, "the run is already complete: early stopping ended it at step %lld (%s did not "
                                    "improve). Nothing to train; continue it with early_stopping.monitor= (off) or "
                                    "another early_stopping.monitor, or set another run.name for a new run",
                           (long long)t->p.step, t->p.sel.es_metric);
        else
            tr_log_message(&t->sinks.log, "the run is already complete (step %lld of %lld): nothing to train. Raise "
                                    "train.max_steps or train.epochs to continue it, or set another run.name for a "
                                    "new run", (long long)t->p.step, (long long)t->shape.total_steps);
        t->sum.already_complete = 1;
        t->sinks.log_open = 0; /* leave its summary.json and metrics as they are */
        tr_log_close(&t->sinks.log);
        t->phase = RUN_FINISHED;
        return TR_OK;
    }
    if (t->dir.resume_from[0] && tr_dist_is_main(&t->dist)) rc = run_dir_write_files(t, 1, err);
    if (!rc) rc = run_open_trace(t, err);
    if (rc) {
        t->phase = RUN_FINISHED;
        return t->rc = rc;
    }
    if ((rc = run_start_loader(t, err))) {
        t->phase = RUN_FINISHED;
        return t->rc = rc;
    }
    t->clock.elapsed0 = t->p.elapsed;
    t->sinks.log.step0 = t->p.step; /* the progress line's ETA counts this process's pace */
    t->sinks.log.elapsed0 = t->p.elapsed;
    t->clock.start = run_now(t);
    t->clock.win_t0 = run_now(t);
    t->last.lr = run_scheduled_lr(t);
    return TR_OK;
}

int tr_run_open(const tr_config *cfg, const tr_run_data *data, tr_run_state **out, tr_error *err)
{
    tr_run_state *t = calloc(1, sizeof *t);
    *out = t;
    if (!t) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    t->cfg = cfg;
    run_ckpt_init(t);
    t->dir.resumed_at = -1;
    t->sum.final_reserved_bytes = -1;
    snprintf(t->sum.device, sizeof t->sum.device, "%s", cfg->device);
    if (data) t->data = *data;
    t->sinks.log.sink = t->data.log; /* before any message: set-up warnings go there too */
    t->sinks.log.clock = t->data.clock;
    tr_torch_enter(NULL, 0);
    int rc = open_locked(t, err);
    if (!rc && t->phase == RUN_STEPPING) {
        /* From here on the run's generator lives in t->core.rng while other runs hold the lock. */
        if (tr_core_keep_rng(&t->core)) rc = tr_error_set(err, TR_E_RUNTIME, "out of memory");
        else trs_rng_get_state(t->core.rng, t->core.rng_size);
        if (rc) t->phase = RUN_FINISHED, t->rc = rc;
    }
    tr_torch_leave(NULL, 0);
    return rc;
}
