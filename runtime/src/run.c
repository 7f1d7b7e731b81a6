/*
 * run.c -- the training loop, as open / step / finish / close so that a caller (the CLI's tr_run, the embedding
 * API) can drive it a step at a time. tr_run_step() reads top to bottom: take a batch, set the scheduled lr, take
 * one train step (only scalars come back), then one named call per concern (log, validate, watch memory,
 * checkpoint). tr_run_finish() saves the last checkpoint and tests; tr_run_close() reports and frees.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "run.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_saver.h"
#include "csv.h"
#include "data.h"
#include "device.h"
#include "dist.h"
#include "history.h"
#include "io.h"
#include "log.h"
#include "memreport.h"
#include "metrics.h"
#include "model_spec.h"
#include "best.h"
#include "monitor.h"
#include "npy.h"
#include "plot.h"
#include "prefetch.h"
#include "schedule.h"
#include "trace.h"
#include "trainrun_shim.h"
#include "watchdog.h"

static volatile sig_atomic_t stop_requested;

void tr_request_stop(void) { stop_requested = 1; }

/* libtorch's default CPU generator and its thread settings are process-wide. Every call that runs libtorch for a
 * run holds this lock, with that run's own generator state swapped in, so runs in several threads interleave a
 * step at a time and each draws exactly what it would alone (tr_torch_enter / tr_torch_leave). */
static pthread_mutex_t torch_lock = PTHREAD_MUTEX_INITIALIZER;

int tr_torch_enter(const void *rng_state, size_t nbytes)
{
    pthread_mutex_lock(&torch_lock);
    if (rng_state && trs_rng_set_state(rng_state, nbytes) != TRS_OK) {
        pthread_mutex_unlock(&torch_lock);
        return TR_E_RUNTIME;
    }
    return TR_OK;
}

void tr_torch_leave(void *rng_state, size_t nbytes)
{
    if (rng_state) trs_rng_get_state(rng_state, nbytes);
    pthread_mutex_unlock(&torch_lock);
}

/** One prepared training batch and the data cursor just after it. */
typedef struct batch_slot {
    float *x;                   /* [batch_size, ...] host batch, allocated once              */
    int64_t *y;                 /* [batch_size]                                              */
    float *t;                   /* [batch_size, K] float targets (multi-hot / regression), or NULL */
    int64_t *ids;               /* token data: [batch_size, block] int64 input ids (y: [batch_size, block]) */
    int64_t n, epoch, pos;      /* rows in it; the epoch it belongs to and the position after it */
} batch_slot;

/** Everything a run holds; allocated in tr_run_open, freed in tr_run_close. */
struct tr_run_state {
    const tr_config *cfg;
    tr_dataset train, val, test;
    tr_run_data data;           /* the caller's data sources (zero: the config's files)      */
    tr_device device;           /* where the model lives (device.h)                          */
    trs_model *model;
    trs_optimizer *opt;
    trs_ema *ema;               /* ema.enabled: the moving average, or NULL                   */
    tr_metrics metrics;         /* evaluation sums, allocated once                            */
    trs_step_options step_opts;
    int batch_ndim;             /* 2 for a [D]-input model, 3 for [T, D], 4 for [C, H, W]    */
    int64_t sample_shape[3];    /* the model spec's input: the batch view's shape[1..batch_ndim) */
    int64_t sample_elems;       /* floats per sample                                         */
    float *xbuf;                /* the batch the step reads: slots[k].x of the slot taken last */
    int64_t *ybuf;              /* ... and its labels, slots[k].y                            */
    float *tbuf;                /* ... and its float targets [n, K], slots[k].t (or NULL)    */
    int64_t *idsbuf;            /* ... token data: its input ids [n, block], slots[k].ids       */
    int64_t block;              /* token data (train.tokens): tokens per window, else 0       */
    int64_t *starts;            /* token data: window starts, [step_batch] (loader) + [eval batch] */
    int64_t *eval_ids, *eval_y; /* token data: one evaluation batch of windows [eval bs, block]  */
    int64_t step_batch;         /* samples per optimizer step: batch_size * accumulate_steps  */
    batch_slot slots[2];        /* batches prepared by the loader (double buffer)            */
    int64_t *perm;              /* the loader's epoch's order (this rank's shard; loader thread only once
                                   started), then scratch for sharding it                   */
    int64_t order_n;            /* samples in an epoch's order: train.n, or the rank's shard  */
    int64_t loader_epoch;       /* the loader's cursor: one batch ahead of p.epoch / p.pos    */
    int64_t loader_pos;
    tr_augment augment;         /* data.augment, for the loader's training batches            */
    tr_prefetch pf;             /* the loader's worker thread when data.prefetch              */
    int malloc_tuned;           /* trs_set_malloc_thresholds applied (malloc_tuning, glibc)   */
    char malloc_warning[320];   /* why it was not (another allocator), for the run's log      */
    int64_t steps_per_epoch, total_steps;
    tr_ckpt_progress p;         /* step, data cursor, time, log window: all a checkpoint carries */
    double t_start;             /* monotonic time when this process's loop started               */
    double elapsed0;            /* p.elapsed at that moment (carried over from a resume)          */
    double last_ckpt_elapsed;   /* training seconds at the last checkpoint                        */
    int64_t last_ckpt_step;     /* its step, -1 before the first                                  */
    int64_t checkpoints_done;
    tr_ckpt_saver saver;        /* the checkpoint being written in the background (checkpoint.async) */
    struct {                    /* ... and what its record needs besides the saver's outcome      */
        double stall, elapsed; /* seconds the loop paused for its snapshot; training seconds then */
        int64_t epoch;
        tr_topk best;          /* checkpoint.save_top_k's set when it was taken                */
    } saving;
    char run_dir[TR_PATH_MAX];
    char resume_from[TR_PATH_MAX]; /* checkpoint to resume from, "" for a fresh run              */
    tr_log log;
    tr_watchdog wd;
    int log_open;
    FILE *trace;                /* log.trace, or NULL                                        */
    double lr;                  /* lr of the last step taken                                 */
    double win_t0;              /* monotonic time the open log window started                */
    int ended;                  /* the loop is over: tr_run_step returns TR_RUN_DONE          */
    int finished;               /* tr_run_finish has run (or there is nothing to finish)      */
    int concluded;              /* summary filled in and summary.json written                */
    int rc;                     /* the status the run ended with                             */
    volatile sig_atomic_t stop; /* tr_run_request_stop on this run                           */
    tr_eval_figures fig[2][2];  /* latest evaluation: [val, test][live, ema]                  */
    tr_summary sum;
    tr_run_event_fn on_event;   /* tr_run_set_event_hook                                     */
    void *event_ctx;
    void *rng;                  /* this run's default-generator state while others run       */
    size_t rng_size;
    tr_dist dist;               /* the process group of a multi-process run (dist.h)         */
    int flags;                  /* TR_DIST_* requests every rank agreed on at the last step  */
    int wd_pending;             /* this rank's watchdog asked to stop; the others learn next step */
    double step_seconds_here;   /* seconds in train steps in this process (for the all-reduce share) */
    double allreduce0;          /* all-reduce seconds spent in set-up, before the first step      */
    tr_memsnap mem_base;        /* live blocks by (phase, size) at the watchdog's baseline        */
    trs_memory_stats mem_base_stats; /* allocated / reserved / RSS at the baseline                  */
    tr_csv_sink csv;            /* metrics.csv, fed each metrics.jsonl record (history.h)         */
    tr_monitor topk_mon, es_mon, plateau_mon; /* checkpoint.monitor, early_stopping.monitor, schedule.monitor */
    int has_topk, has_es, has_plateau;
    int best_due;               /* the last evaluation entered the top-k: save a checkpoint now   */
    int curves_failed;          /* drawing curves.png failed once: not tried again                */
    char stop_reason[320];      /* why early stopping ended the run ("" = it did not)             */
};

typedef struct tr_run_state trainer;

/* ---------------------------------------------------------------------------------------------------- set-up */

/* The run's clock (tr_run_data.clock): every time a run reads or writes comes from it. */
static double now_s(const trainer *t) { return tr_clock_now(&t->data.clock); }

/* Training seconds, summed over every process of this run. */
static double elapsed(const trainer *t) { return t->elapsed0 + (now_s(t) - t->t_start); }

/* Hand an event to the caller's hook (tr_run_set_event_hook), stamped with where the run is. */
static void emit(const trainer *t, tr_run_event ev)
{
    if (!t->on_event) return;
    ev.step = t->p.step;
    ev.epoch = t->p.epoch;
    t->on_event(t->event_ctx, &ev);
}

/* Threads: 0 = auto = 1 intra-op thread with BLAS pinned to 1. Measured on 2-core machines, libtorch with 2 OpenMP
 * threads plus multithreaded OpenBLAS ran a small MLP 2.7x slower than 1 thread (DESIGN.md).
 * malloc: glibc's thresholds pinned (trs_set_malloc_thresholds) unless the user set malloc tunables in
 * GLIBC_TUNABLES; bench/RESULTS.md measured the convnet 1.5x faster with them. */
int tr_setup_threads(const tr_config *cfg, int *malloc_tuned, char *warning, size_t warning_size, tr_error *err)
{
    if (warning && warning_size) warning[0] = '\0';
    const char *tunables = getenv("GLIBC_TUNABLES");
    if (cfg->malloc_tuning && !(tunables && strstr(tunables, "glibc.malloc."))) {
        const trs_status st = trs_set_malloc_thresholds(32 << 20, 256 << 20);
        if (st == TRS_E_INVALID) return tr_error_set(err, TR_E_RUNTIME, "malloc thresholds: %s", trs_last_error());
        /* another allocator (a sanitizer's, or not glibc): the run goes on with its defaults */
        if (st != TRS_OK && warning)
            snprintf(warning, warning_size, "malloc thresholds left alone: %s", trs_last_error());
        else if (st != TRS_OK)
            fprintf(stderr, "trainrun: warning: malloc thresholds left alone: %s\n", trs_last_error());
        if (malloc_tuned) *malloc_tuned = st == TRS_OK;
    }
    const int intra = cfg->threads > 0 ? cfg->threads : 1;
    if (trs_set_threads(intra, cfg->interop_threads, 1) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "setting threads: %s", trs_last_error());
    if (cfg->deterministic && trs_set_deterministic(1) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "deterministic mode: %s", trs_last_error());
    return TR_OK;
}

/* The caller's data (embedding API): borrowed as given -- no normalisation, no split; teardown leaves it alone. */
static int setup_caller_data(trainer *t, tr_error *err)
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
    const char *own = cfg->data.format == TR_DATA_CSV      ? cfg->data.train_csv
                      : cfg->data.format == TR_DATA_NPY    ? cfg->data.train_inputs
                      : cfg->data.format == TR_DATA_TEXT   ? cfg->data.train_text
                      : cfg->data.format == TR_DATA_TOKENS ? cfg->data.train_tokens
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

int tr_load_data(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err)
{
    const int root_rc = check_data_root(cfg, err);
    if (root_rc) return root_rc;
    if (cfg->data.format == TR_DATA_CSV) return tr_csv_setup(cfg, train, val, test, err);
    if (cfg->data.format == TR_DATA_NPY) return tr_npy_setup(cfg, train, val, test, err);
    if (cfg->data.format == TR_DATA_TEXT || cfg->data.format == TR_DATA_TOKENS)
        return load_token_data(cfg, train, val, err);
    char root[TR_PATH_MAX], img[2 * TR_PATH_MAX], lbl[2 * TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->data.root, root);
    snprintf(img, sizeof img, "%s/%s", root, cfg->data.train_images);
    snprintf(lbl, sizeof lbl, "%s/%s", root, cfg->data.train_labels);
    int rc = tr_idx_load(img, lbl, cfg->data.train_subset, train, err);
    if (rc) return rc;
    if (cfg->eval.test_at_end || cfg->eval.split == TR_EVAL_TEST) {
        snprintf(img, sizeof img, "%s/%s", root, cfg->data.test_images);
        snprintf(lbl, sizeof lbl, "%s/%s", root, cfg->data.test_labels);
        if ((rc = tr_idx_load(img, lbl, cfg->data.test_subset, test, err))) return rc;
        if ((rc = tr_dataset_normalize(test, cfg->data.mean, cfg->data.std, cfg->data.n_mean, err))) return rc;
    }
    if ((rc = tr_dataset_normalize(train, cfg->data.mean, cfg->data.std, cfg->data.n_mean, err))) return rc;
    if (cfg->data.val_size > 0 && (rc = tr_dataset_split(train, cfg->data.val_size, cfg->seed, val, err))) {
        if (rc != TR_E_CONFIG) return rc;
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return tr_error_set(err, TR_E_CONFIG, "data.val_size: %s", msg);
    }
    return TR_OK;
}

/* data.augment: only for image samples the runtime reads itself ([c, h, w] with h, w > 1), the padding smaller
 * than the image; the padding value is a black pixel after data.mean / data.std (IDX files), else 0 (npy files
 * and a caller's arrays, in their own units). */
static int setup_augment(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    const tr_dataset *d = &t->train;
    tr_augment *a = &t->augment;
    a->crop_padding = cfg->data.augment.crop_padding;
    a->hflip = cfg->data.augment.hflip;
    if (!tr_augment_enabled(a)) return TR_OK;
    const char *key = a->crop_padding > 0 ? "data.augment.crop_padding" : "data.augment.hflip";
    if (t->data.next_batch)
        return tr_error_set(err, TR_E_CONFIG, "%s: augmentation applies to the batches the runtime gathers, not to "
                            "a caller's next_batch callback (augment in the callback instead)", key);
    if (d->tokens || d->h < 2 || d->w < 2)
        return tr_error_set(err, TR_E_CONFIG, "%s: augmentation needs image samples [C, H, W]; this data set's "
                            "samples are %s", key, d->tokens ? "token windows" : "flat feature vectors");
    if (a->crop_padding >= d->h || a->crop_padding >= d->w)
        return tr_error_set(err, TR_E_CONFIG, "data.augment.crop_padding: %lld pixels is not smaller than the "
                            "%lld x %lld images", (long long)a->crop_padding, (long long)d->h, (long long)d->w);
    a->n_fill = 1;
    if (cfg->data.format == TR_DATA_IDX && !t->data.train) {
        const int nm = cfg->data.n_mean, ns = cfg->data.n_std, cap = (int)(sizeof a->fill / sizeof a->fill[0]);
        a->n_fill = nm > ns ? nm : ns;
        if (a->n_fill > cap) a->n_fill = cap; /* data.mean / data.std hold at most TR_MAX_CHANNELS = 4 */
        for (int k = 0; k < a->n_fill; k++) /* as tr_dataset_normalize computes it, for a pixel of 0 */
            a->fill[k] = (0.0f - (float)cfg->data.mean[nm > 1 ? k : 0]) / (float)cfg->data.std[ns > 1 ? k : 0];
    }
    return TR_OK;
}

static int setup_data(trainer *t, tr_error *err)
{
    if (t->data.train || t->data.next_batch) {
        const int rc = setup_caller_data(t, err);
        return rc ? rc : setup_augment(t, err);
    }
    const tr_config *cfg = t->cfg;
    const int rc = tr_load_data(cfg, &t->train, &t->val, &t->test, err);
    int rc2;
    if (rc) return rc;
    if (t->train.n < cfg->train.batch_size * cfg->train.accumulate_steps)
        return tr_error_set(err, TR_E_CONFIG, "train.batch_size: %lld x accumulate_steps %lld is larger than the "
                            "%lld training samples", (long long)cfg->train.batch_size,
                            (long long)cfg->train.accumulate_steps, (long long)t->train.n);
    if ((rc2 = setup_augment(t, err))) return rc2;
    if (cfg->data.train_subset > 0 && t->val.n > t->train.n) /* validation is carved from the subset */
        tr_log_message(&t->log, "warning: data.val_size %lld is carved from data.train_subset %lld: %lld samples "
                                "are left to train on (lower data.val_size to keep more)", (long long)t->val.n,
                       (long long)cfg->data.train_subset, (long long)t->train.n);
    return TR_OK;
}

/* The optimizer, with optim.no_decay split into "auto" (timm's rule) and fnmatch globs. */
static int create_optimizer(const tr_config *cfg, trs_model *model, trs_optim_options *o, trs_optimizer **opt,
                            tr_error *err)
{
    char buf[sizeof cfg->optim.no_decay];
    snprintf(buf, sizeof buf, "%s", cfg->optim.no_decay);
    const char *patterns[64];
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (strcmp(tok, "auto") == 0) o->no_decay_1d = 1;
        else if (n < sizeof patterns / sizeof patterns[0]) patterns[n++] = tok;
        else return tr_error_set(err, TR_E_CONFIG, "optim.no_decay: more than 64 patterns");
    }
    o->no_decay = patterns;
    o->n_no_decay = n;
    if (trs_optimizer_create(model, o, opt) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "optim: %s", trs_model_errmsg(model));
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
static int setup_torchscript(trainer *t, char *path, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    const tr_dataset *d = &t->train;
    tr_config_resolve_path(cfg, cfg->model.torchscript, path);
    int64_t shape[3] = {d->c, d->h, d->w};
    const int ndim = d->h == 1 && d->w == 1 ? 1 : 3;
    t->sample_elems = d->c * d->h * d->w;
    t->batch_ndim = ndim + 1;
    t->block = d->tokens ? d->block : 0;
    memcpy(t->sample_shape, shape, sizeof t->sample_shape);
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
    int rc = tr_build_model(cfg, NULL, path, shape, ndim, &t->model, &t->opt, &t->step_opts, err);
    trs_dtype in = TRS_DTYPE_FLOAT32;
    if (!rc) trs_model_input_dtype(t->model, &in);
    if (!rc && t->block && in != TRS_DTYPE_INT64)
        return tr_error_set(err, TR_E_CONFIG, "%s: its forward runs on float32 inputs of shape [2, %lld], but "
                            "data.format %s feeds int64 token ids [N, %lld]: a language model embeds them "
                            "(nn.Embedding)", path, (long long)shape[0], cfg->data.format == TR_DATA_TEXT ? "text" : "tokens",
                            (long long)shape[0]);
    if (!rc && !t->block && in == TRS_DTYPE_INT64 && !t->data.next_batch)
        return tr_error_set(err, TR_E_CONFIG, "%s: its forward takes int64 token ids, but this data is float32 "
                            "features (data.format: text or tokens feeds token ids)", path);
    return rc;
}

static int setup_model(trainer *t, tr_error *err)
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
        t->sample_elems = d->c * d->h * d->w;
        t->batch_ndim = spec.input_ndim + 1;
        memcpy(t->sample_shape, spec.input_shape, sizeof t->sample_shape);
        if (spec.input_ndim == 1) {
            if (spec.input_shape[0] != t->sample_elems)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld] does not match the data's %lld features per sample",
                                  path, (long long)spec.input_shape[0], (long long)t->sample_elems);
        } else if (spec.input_ndim == 2) { /* [T, D]: the data's samples, row-major, seen as T rows of D */
            if (spec.input_shape[0] * spec.input_shape[1] != t->sample_elems)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld, %lld] does not match the data's %lld values per "
                                  "sample", path, (long long)spec.input_shape[0], (long long)spec.input_shape[1],
                                  (long long)t->sample_elems);
        } else {
            if (spec.input_shape[0] != d->c || spec.input_shape[1] != d->h || spec.input_shape[2] != d->w)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld, %lld, %lld] does not match the data's [%lld, %lld, %lld]",
                                  path, (long long)spec.input_shape[0], (long long)spec.input_shape[1],
                                  (long long)spec.input_shape[2], (long long)d->c, (long long)d->h, (long long)d->w);
        }
        if (!rc) rc = tr_build_model(cfg, &spec, path, spec.input_shape, spec.input_ndim, &t->model, &t->opt,
                                     &t->step_opts, err);
        tr_model_spec_free(&spec);
    }
    if (rc) return rc;
    t->step_opts.dist = t->dist.pg; /* NULL in one process: the train step averages over this group */
    t->step_opts.dist_bucket_bytes = (size_t)(cfg->dist.bucket_cap_mb * 1024.0 * 1024.0);

    int64_t out_dim = 0;
    if (trs_model_output_dim(t->model, &out_dim) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "%s", trs_model_errmsg(t->model));
    const tr_dataset *sets[] = {&t->train, &t->val, &t->test};
    static const char *const names[] = {"training", "validation", "test"};
    const int float_loss = t->step_opts.loss != TRS_LOSS_CROSS_ENTROPY;
    if (!t->data.next_batch && float_loss != (t->train.t_cols > 0))
        return tr_error_set(err, TR_E_CONFIG, "train.loss: %s needs %s targets; the training data has %s (data.target: "
                            "class, multi_hot or regression with data.format csv or npy; trainrun_data_arrays_targets "
                            "for arrays)", k_loss_names[cfg->train.loss], float_loss ? "float" : "class-index",
                            t->train.t_cols > 0 ? "float targets" : "class indices");
    if (t->train.t_cols > 0 && out_dim != t->train.t_cols && cfg->model.torchscript[0]) {
        int64_t out[TRS_MAX_DIMS + 1] = {2}, need[2] = {2, t->train.t_cols};
        int out_ndim = 0;
        trs_model_output_shape(t->model, out + 1, &out_ndim);
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
        if (!cfg->model.torchscript[0])
            return tr_error_set(err, TR_E_CONFIG, "%s: the model has %lld outputs but the %s labels go up to %lld",
                                path, (long long)out_dim, names[i], (long long)sets[i]->num_classes - 1);
        int64_t in[4] = {2, d->c, d->h, d->w}, out[TRS_MAX_DIMS + 1] = {2}, need[2] = {2, sets[i]->num_classes};
        int out_ndim = 0;
        trs_model_output_shape(t->model, out + 1, &out_ndim);
        out_ndim++; /* per-sample shape, behind the probe batch of 2 */
        char a[96], b[96], c[96];
        return tr_error_set(err, TR_E_CONFIG, "%s: forward maps a batch of shape %s to %s, but the %s labels go up "
                            "to %lld: cross_entropy needs outputs of shape %s (or more classes)", path,
                            shape_text(in, t->batch_ndim, a, sizeof a), shape_text(out, out_ndim, b, sizeof b),
                            names[i], (long long)sets[i]->num_classes - 1, shape_text(need, 2, c, sizeof c));
    }
    if (cfg->eval.top_k > out_dim)
        return tr_error_set(err, TR_E_CONFIG, "eval.top_k: %d is more than the model's %lld outputs", cfg->eval.top_k,
                            (long long)out_dim);
    if ((rc = tr_metrics_init(&t->metrics, tr_task_of_loss(t->step_opts.loss), out_dim, err))) return rc;
    if (t->block)
        tr_metrics_set_lm(&t->metrics, t->train.vocab.kind == TR_VOCAB_CHARS   ? "bpc"
                                       : t->train.vocab.kind == TR_VOCAB_BYTES ? "bpb"
                                                                               : "bits_per_token");
    if (cfg->ema.enabled) {
        const trs_ema_options eo = {.decay = cfg->ema.decay, .warmup = cfg->ema.warmup,
                                    .buffers_average = cfg->ema.buffers == TR_EMA_BUFFERS_AVERAGE};
        if (trs_ema_create(t->model, &eo, &t->ema) != TRS_OK)
            return tr_error_set(err, TR_E_CONFIG, "ema: %s", trs_model_errmsg(t->model));
    }
    return TR_OK;
}

int tr_build_model(const tr_config *cfg, const tr_model_spec *spec, const char *path, const int64_t *input_shape,
                   int input_ndim, trs_model **model, trs_optimizer **opt, trs_step_options *step_opts,
                   tr_error *err)
{
    /* Seed right before the parameters are initialised, as a PyTorch script does before building its model (a
     * TorchScript archive draws nothing unless model.init_method draws its weights). */
    if (trs_manual_seed(cfg->seed) != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "seeding: %s", trs_last_error());
    if (!spec) {
        if (trs_model_load_torchscript(path, input_shape, input_ndim, model) != TRS_OK)
            return tr_error_set(err, TR_E_CONFIG, "%s", trs_last_error());
        /* model.init_method: the module draws its own initial weights from the seed, as the Python script's
         * torch.manual_seed(seed); m.init_weights() would (an archive may ship placeholder weights). */
        if (cfg->model.init_method[0] && trs_model_run_init(*model, cfg->model.init_method) != TRS_OK)
            return tr_error_set(err, TR_E_CONFIG, "%s: model.init_method: %s", path, trs_last_error());
    } else if (trs_model_create(spec->layers, spec->n_layers, input_shape, input_ndim, model) != TRS_OK) {
        return tr_error_set(err, TR_E_CONFIG, "%s: %s", path, trs_last_error());
    }
    /* Seeded again once the model exists, so training's draws (dropout) start from the same state whatever the
     * model's kind: a YAML model's initialisation draws, a TorchScript archive does not. A YAML MLP and its
     * TorchScript twin (models/mlp.py) then train to the same trace (bench/reference/train_reference.py does the
     * same after building or loading its module). */
    if (trs_manual_seed(cfg->seed) != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "seeding: %s", trs_last_error());
    /* Built and initialised on the CPU, then moved once, before the optimizer and EMA exist (as model.to(device)
     * in PyTorch): a seed gives the same initial weights on every device. On the CPU the move changes nothing. */
    tr_device dev;
    int rc = tr_device_resolve(cfg, &dev, err);
    if (rc) return rc;
    if (trs_model_to_device(*model, dev.cuda ? TRS_DEVICE_CUDA : TRS_DEVICE_CPU, dev.index) != TRS_OK) {
        char name[32];
        tr_device_name(&dev, name, sizeof name);
        return tr_error_set(err, TR_E_RUNTIME, "device: moving the model to %s: %s", name, trs_model_errmsg(*model));
    }
    static const trs_optim_kind kinds[] = {[TR_OPTIM_SGD] = TRS_OPT_SGD, [TR_OPTIM_ADAM] = TRS_OPT_ADAM,
                                           [TR_OPTIM_ADAMW] = TRS_OPT_ADAMW};
    trs_optim_options o = {
        .kind = kinds[cfg->optim.name],
        .lr = tr_schedule_lr(cfg, 0, 1, 1),
        .momentum = cfg->optim.momentum,
        .dampening = cfg->optim.dampening,
        .weight_decay = cfg->optim.weight_decay,
        .nesterov = cfg->optim.nesterov,
        .beta1 = cfg->optim.beta1,
        .beta2 = cfg->optim.beta2,
        .eps = cfg->optim.eps,
        .amsgrad = cfg->optim.amsgrad,
    };
    rc = create_optimizer(cfg, *model, &o, opt, err);
    if (rc) return rc;
    if (cfg->debug.leak_bytes_per_step > 0 && trs_debug_set_leak(*model, cfg->debug.leak_bytes_per_step) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "debug.leak_bytes_per_step: %s", trs_model_errmsg(*model));
    if (cfg->debug.leak_bytes_per_eval_batch > 0 &&
        trs_debug_set_eval_leak(*model, cfg->debug.leak_bytes_per_eval_batch) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "debug.leak_bytes_per_eval_batch: %s", trs_model_errmsg(*model));
    /* the allocator is process-wide: the last run or trainer opened sets it (the watchdog's limit joins in
     * apply_cache_limit once a run knows it) */
    if (trs_memory_configure(cfg->memory.cache, cfg->memory.cache_limit_bytes, cfg->watchdog.backtrace) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "memory: %s", trs_last_error());
    static const trs_loss_kind losses[] = {[TR_LOSS_CROSS_ENTROPY] = TRS_LOSS_CROSS_ENTROPY,
                                           [TR_LOSS_BCE_WITH_LOGITS] = TRS_LOSS_BCE_WITH_LOGITS,
                                           [TR_LOSS_MSE] = TRS_LOSS_MSE, [TR_LOSS_SMOOTH_L1] = TRS_LOSS_SMOOTH_L1};
    *step_opts = (trs_step_options){.loss = losses[cfg->train.loss],
                                      .label_smoothing = cfg->train.label_smoothing,
                                      .grad_clip_norm = cfg->optim.grad_clip_norm,
                                      .top_k = cfg->eval.top_k,
                                      .accumulate_steps = cfg->train.accumulate_steps,
                                      .precision = cfg->precision == TR_PRECISION_BF16_MIXED
                                                       ? TRS_PRECISION_BF16_MIXED : TRS_PRECISION_32};
    return TR_OK;
}

/* ---------------------------------------------------------------------------------------------------- run dir */

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return 1;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

/* mkdir -p of the parents of `path`, then `path` itself; *created = 1 if this call created the last component. */
static int make_dirs(const char *path, int *created, tr_error *err)
{
    char buf[TR_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    *created = 0;
    for (char *p = buf + 1;; p++) {
        const char c = *p;
        if (c == '/' || c == '\0') {
            *p = '\0';
            if (mkdir(buf, 0777) == 0) {
                *created = c == '\0';
            } else if (errno != EEXIST) {
                return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create directory: %s", buf, strerror(errno));
            }
            *p = c;
        }
        if (c == '\0') break;
    }
    return TR_OK;
}

static void warn_to_log(void *ctx, const char *msg) { tr_log_message(ctx, "warning: %s", msg); }

/* What a checkpoint's cursor must fit: this rank's epoch of the data set (none for the caller's batches). */
static tr_ckpt_expect ckpt_expect(const trainer *t)
{
    return (tr_ckpt_expect){.epoch_samples = t->data.next_batch ? -1 : tr_dist_shard_size(&t->dist, t->train.n)};
}

/*
 * The run directory and what to resume from. run.name set: run.dir/run.name, which may hold an earlier run of
 * the same name: resume auto continues from its newest valid checkpoint; without one, a fresh start that keeps
 * the earlier metrics under another name. run.name empty: a new run.dir/<config stem>-<UTC time>[-k].
 * run.resume PATH: that checkpoint, whatever the directory.
 */
static int setup_run_dir(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char dir[TR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->run.dir);
    int created = 0, rc;
    if (cfg->run.name[0]) {
        if (snprintf(t->run_dir, sizeof t->run_dir, "%s/%s", dir, cfg->run.name) >= (int)sizeof t->run_dir)
            return tr_error_set(err, TR_E_CONFIG, "run.dir/run.name: path longer than %d bytes", TR_PATH_MAX - 1);
        if ((rc = make_dirs(t->run_dir, &created, err))) return rc;
        if (!created && !dir_is_empty(t->run_dir) && strcmp(cfg->run.resume, "never") == 0)
            return tr_error_set(err, TR_E_CONFIG,
                                "run.resume: never, but %s already holds a run; choose another run.name or remove it",
                                t->run_dir);
    } else {
        const char *base = strrchr(cfg->source, '/');
        base = base ? base + 1 : (cfg->source[0] ? cfg->source : "run");
        const char *dot = strrchr(base, '.');
        const int stem = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
        char stamp[32];
        const time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        /* Create the last component exclusively, so two runs started in the same second never share it. */
        for (int k = 1; !created && k < 1000; k++) {
            char suffix[16] = "";
            if (k > 1) snprintf(suffix, sizeof suffix, "-%d", k);
            if (snprintf(t->run_dir, sizeof t->run_dir, "%s/%.*s-%s%s", dir, stem > 200 ? 200 : stem, base, stamp,
                         suffix) >= (int)sizeof t->run_dir)
                return tr_error_set(err, TR_E_CONFIG, "run.dir: path longer than %d bytes", TR_PATH_MAX - 1);
            int parent_created;
            if ((rc = make_dirs(dir, &parent_created, err))) return rc;
            if (mkdir(t->run_dir, 0777) == 0) created = 1;
            else if (errno != EEXIST)
                return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create directory: %s", t->run_dir, strerror(errno));
        }
    }

    if (!created) { /* stale temporaries of killed saves and writes first: a full disk is not made fuller */
        char ckpts[TR_PATH_MAX + 16];
        tr_io_remove_stale(t->run_dir);
        if (snprintf(ckpts, sizeof ckpts, "%s/checkpoints", t->run_dir) < (int)sizeof ckpts) tr_io_remove_stale(ckpts);
    }

    /* What to resume from. */
    t->resume_from[0] = '\0';
    if (strcmp(cfg->run.resume, "never") != 0 && strcmp(cfg->run.resume, "auto") != 0) {
        char path[TR_PATH_MAX];
        tr_config_resolve_path(cfg, cfg->run.resume, path);
        const tr_ckpt_expect x = ckpt_expect(t);
        if ((rc = tr_checkpoint_check(path, cfg, t->model, t->opt, t->ema, &x, err))) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return tr_error_set(err, TR_E_CONFIG, "run.resume: %s", msg);
        }
        snprintf(t->resume_from, sizeof t->resume_from, "%s", path);
    } else if (strcmp(cfg->run.resume, "auto") == 0 && !created) {
        /* Every checkpoint is checked before it is chosen; a damaged one is reported and skipped (and kept, as
         * is every one, until a resume from an older one has succeeded). One saved with another config that
         * does not fit this one stops the run here: nothing is renamed and nothing starts afresh over it. */
        const tr_ckpt_expect x = ckpt_expect(t);
        if ((rc = tr_checkpoint_find_resumable(t->run_dir, cfg, t->model, t->opt, t->ema, &x, t->resume_from,
                                               warn_to_log, &t->log, err)))
            return rc;
    }
    if (!t->resume_from[0] && !created) {
        /* A fresh start in a used directory: checkpoints none of which verified are set aside (they would
         * otherwise outrank this run's in pruning), and what the earlier run logged is kept. */
        if ((rc = tr_checkpoint_set_aside_newer(t->run_dir, -1, warn_to_log, &t->log, err))) return rc;
        char old[TR_PATH_MAX + 32], kept[TR_PATH_MAX + 64];
        snprintf(old, sizeof old, "%s/metrics.jsonl", t->run_dir);
        struct stat st;
        for (int k = 1; stat(old, &st) == 0 && k < 10000; k++) {
            snprintf(kept, sizeof kept, "%s/metrics.earlier-%d.jsonl", t->run_dir, k);
            if (stat(kept, &st) != 0 && rename(old, kept) == 0) {
                tr_log_message(&t->log, "%s holds a run without a complete checkpoint: starting afresh; its metrics "
                                        "are kept in %s", t->run_dir, kept);
                break;
            }
        }
    }
    return TR_OK;
}

/* Write a run file through the atomic path (io.h): the text goes to memory first, then temp, fsync, rename. */
static int write_atomically(const char *path, int (*write_fn)(const void *arg, FILE *f), const void *arg,
                            tr_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    const int rc = write_fn(arg, f);
    if (fclose(f) != 0 || rc != TR_OK) {
        free(buf);
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot produce the contents", path);
    }
    const int wrc = tr_io_write_file_atomic(path, buf, len, err);
    free(buf);
    return wrc;
}

static int write_config_fn(const void *arg, FILE *f) { return tr_config_write_yaml(arg, f); }

static int copy_file_fn(const void *arg, FILE *out)
{
    FILE *in = fopen(arg, "rb");
    if (!in) return TR_E_RUNTIME;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) break;
    const int rc = ferror(in) || ferror(out) ? TR_E_RUNTIME : TR_OK;
    fclose(in);
    return rc;
}

/*
 * The run directory gets a self-contained copy of what defines the run: model.yaml (the model spec) or model.pt
 * (the TorchScript archive, byte for byte; model.pt.gz for a gzip'd one) and config.yaml (the effective config with model.spec /
 * model.torchscript pointing at that copy, and absolute data, init and run paths), so `trainrun RUN_DIR/config.yaml`
 * repeats or continues it from anywhere. A resumed run rewrites them once the checkpoint is loaded (`resumed`),
 * unless it finds the run complete: a run continued with other values (train.max_steps raised to extend it) leaves
 * its config.yaml saying what it now is.
 */
static int write_run_files(trainer *t, int resumed, tr_error *err)
{
    char path[TR_PATH_MAX + 32], spec[TR_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.yaml", t->run_dir);
    struct stat st;
    if (t->resume_from[0] && !resumed && stat(path, &st) == 0) return TR_OK; /* after the resume (below) */
    tr_config *eff = malloc(sizeof *eff);
    if (!eff) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    *eff = *t->cfg;
    const int torchscript = t->cfg->model.torchscript[0] != '\0';
    tr_config_resolve_path(t->cfg, torchscript ? t->cfg->model.torchscript : t->cfg->model.spec, spec);
    char abs[PATH_MAX];
    if (realpath(t->run_dir, abs)) {
        char *slash = strrchr(abs, '/');
        if (slash && slash != abs) {
            snprintf(eff->run.name, sizeof eff->run.name, "%s", slash + 1);
            *slash = '\0';
            if (snprintf(eff->run.dir, sizeof eff->run.dir, "%s", abs) >= (int)sizeof eff->run.dir)
                snprintf(eff->run.dir, sizeof eff->run.dir, "%s", t->cfg->run.dir);
        }
    }
    char tmp[TR_PATH_MAX];
    tr_config_resolve_path(t->cfg, t->cfg->data.root, tmp);
    if (realpath(tmp, abs) && strlen(abs) < sizeof eff->data.root) memcpy(eff->data.root, abs, strlen(abs) + 1);
    if (t->cfg->init.from[0]) {
        tr_config_resolve_path(t->cfg, t->cfg->init.from, tmp);
        if (realpath(tmp, abs) && strlen(abs) < sizeof eff->init.from) memcpy(eff->init.from, abs, strlen(abs) + 1);
    }
    const size_t spec_len = strlen(spec);
    const int gzipped = spec_len > 3 && strcmp(spec + spec_len - 3, ".gz") == 0; /* keep the name's meaning */
    const char *copy = torchscript ? (gzipped ? "model.pt.gz" : "model.pt") : "model.yaml";
    snprintf(torchscript ? eff->model.torchscript : eff->model.spec, TR_PATH_MAX, "%s", copy);
    char model_path[TR_PATH_MAX + 32];
    snprintf(model_path, sizeof model_path, "%s/%s", t->run_dir, copy);
    tr_config *before = NULL;
    if (resumed && (before = malloc(sizeof *before))) {
        tr_error ignore = {0};
        tr_config_defaults(before);
        if (tr_config_load_file(before, path, &ignore) != TR_OK) {
            free(before);
            before = NULL;
        }
    }
    int rc = write_atomically(model_path, copy_file_fn, spec, err);
    if (!rc) rc = write_atomically(path, write_config_fn, eff, err);
    if (!rc && before) {
        char changes[1024];
        tr_config_defaults(eff);
        tr_error ignore = {0};
        if (tr_config_load_file(eff, path, &ignore) == TR_OK &&
            tr_config_diff(before, eff, NULL, changes, sizeof changes) > 0)
            tr_log_message(&t->log, "%s updated: %s", path, changes);
    }
    free(before);
    free(eff);
    return rc;
}

/* A vocab.json (untrusted, at most 4 MiB) into *v; 0 with *v zeroed when `file` does not exist. */
static int read_vocab_file(const char *file, tr_vocab *v, int *found, tr_error *err)
{
    *found = 0;
    memset(v, 0, sizeof *v);
    FILE *f = fopen(file, "rb");
    if (!f) return errno == ENOENT ? TR_OK : tr_error_set(err, TR_E_CONFIG, "%s: cannot open: %s", file, strerror(errno));
    enum { cap = 4 << 20 };
    char *text = malloc(cap + 1);
    const size_t n = text ? fread(text, 1, cap + 1, f) : 0;
    fclose(f);
    if (!text) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
    if (n > cap) {
        free(text);
        return tr_error_set(err, TR_E_CONFIG, "%s: more than %d bytes", file, (int)cap);
    }
    text[n] = '\0';
    const int rc = tr_vocab_from_json(text, file, v, err);
    free(text);
    if (rc) return err->code = TR_E_CONFIG;
    *found = 1;
    return TR_OK;
}

/* Token data: the vocabulary of this run's data must be the one the weights were trained with -- the checkpoint
 * resumed from (its vocab.json), init.from's, or this run directory's from an earlier process -- or the ids mean
 * other characters (a checkpoint of another corpus). Then the run directory gets it as vocab.json, and every
 * checkpoint a copy (tr_checkpoint_save), so `trainrun sample` needs nothing else. */
static int setup_vocab(trainer *t, tr_error *err)
{
    if (!t->block) return TR_OK;
    static const char *const kinds[] = {"bytes", "characters", "token ids"};
    char files[3][TR_PATH_MAX + 32];
    int n = 0;
    if (t->resume_from[0]) snprintf(files[n++], sizeof files[0], "%s/vocab.json", t->resume_from);
    if (t->resume_from[0]) snprintf(files[n++], sizeof files[0], "%s/vocab.json", t->run_dir);
    if (!t->resume_from[0] && t->cfg->init.from[0]) {
        char from[TR_PATH_MAX];
        tr_config_resolve_path(t->cfg, t->cfg->init.from, from);
        struct stat st;
        if (stat(from, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(files[n++], sizeof files[0], "%s/vocab.json", from);
    }
    const tr_vocab *mine = &t->train.vocab;
    for (int i = 0; i < n; i++) {
        tr_vocab v;
        int found = 0;
        int rc = read_vocab_file(files[i], &v, &found, err);
        if (rc) return rc;
        if (!found) continue;
        const int same = tr_vocab_equal(&v, mine);
        if (!same)
            rc = tr_error_set(err, TR_E_CONFIG, "%s: the weights were trained with another vocabulary (%lld %s) than "
                              "this data's (%lld %s, data.format %s, data.vocab): a checkpoint of another corpus?",
                              files[i], (long long)v.size, kinds[v.kind], (long long)mine->size, kinds[mine->kind],
                              t->cfg->data.format == TR_DATA_TEXT ? "text" : "tokens");
        tr_vocab_free(&v);
        if (rc) return rc;
        break; /* the first one found decides */
    }
    if (!tr_dist_is_main(&t->dist)) return TR_OK;
    char *json = tr_vocab_to_json(mine);
    if (!json) return tr_error_set(err, TR_E_RUNTIME, "vocab.json: out of memory");
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/vocab.json", t->run_dir);
    const int rc = tr_io_write_file_atomic(path, json, strlen(json), err);
    free(json);
    return rc;
}

static void teardown(trainer *t)
{
    tr_ckpt_saved ignore; /* conclude took any save in flight; joined here whatever the path */
    tr_ckpt_saver_take(&t->saver, 1, &ignore);
    tr_checkpoint_release_spare(); /* the last snapshot's mapping, kept for a next one (checkpoint.h) */
    tr_prefetch_stop(&t->pf); /* first: the loader thread reads the data set and writes the slots */
    tr_dist_free_rng(&t->p);
    tr_dist_close(&t->dist);
    if (t->trace) fclose(t->trace);
    if (t->log_open) tr_log_close(&t->log);
    tr_csv_sink_close(&t->csv);
    tr_watchdog_free(&t->wd);
    tr_memsnap_free(&t->mem_base);
    tr_metrics_free(&t->metrics);
    trs_ema_free(t->ema);
    trs_optimizer_free(t->opt);
    trs_model_free(t->model);
    if (!t->data.train && !t->data.next_batch) { /* the caller's data is the caller's */
        tr_dataset_free(&t->train);
        tr_dataset_free(&t->val);
        tr_dataset_free(&t->test);
    }
    free(t->rng);
    for (int i = 0; i < 2; i++) {
        free(t->slots[i].x);
        free(t->slots[i].y);
        free(t->slots[i].t);
        free(t->slots[i].ids);
    }
    free(t->starts);
    free(t->eval_ids);
    free(t->eval_y);
    free(t->perm);
}

/* ---------------------------------------------------------------------------------------------------- steps */

static trs_batch batch_view(const trainer *t, int64_t n)
{
    trs_batch b = {.x = t->xbuf, .y = t->ybuf, .target = t->tbuf, .ndim = t->batch_ndim};
    b.shape[0] = n;
    for (int d = 1; d < t->batch_ndim; d++) b.shape[d] = t->sample_shape[d - 1];
    if (t->block) { /* token data: ids [n, T] in, next-token targets [n, T] */
        b.x = NULL;
        b.x_ids = t->idsbuf;
        b.y_ndim = 2;
        b.y_shape[0] = n;
        b.y_shape[1] = t->block;
    }
    return b;
}

static int pos_ends_epoch(const trainer *t, int64_t pos)
{
    return pos >= t->steps_per_epoch * t->step_batch || pos >= t->order_n;
}

static int epoch_done(const trainer *t)
{
    return !t->data.next_batch && pos_ends_epoch(t, t->p.pos); /* a callback's batches have no epochs */
}

/* The order of the loader's epoch: a pure function of (seed, epoch), so a resume can rebuild it; in a
 * multi-process run, this rank's shard of it (dist.h), order_n long. */
static void make_order(trainer *t)
{
    if (t->cfg->data.shuffle && !t->block) tr_permutation(t->cfg->seed, (uint64_t)t->loader_epoch, t->train.n, t->perm);
    else for (int64_t i = 0; i < t->train.n; i++) t->perm[i] = i;
    tr_dist_shard(&t->dist, t->perm, t->train.n, t->perm + t->train.n);
}

/* The loader: gather the batch after the loader's cursor into `slot` and advance the cursor, starting a new epoch
 * (new order) when one is used up. On the prefetch thread when data.prefetch, else on the loop's thread; either
 * way batches come out in the same order with the same rows. */
static int load_batch(void *ctx, int slot)
{
    trainer *t = ctx;
    batch_slot *b = &t->slots[slot];
    if (pos_ends_epoch(t, t->loader_pos)) {
        t->loader_epoch++;
        t->loader_pos = 0;
        make_order(t);
    }
    const int64_t bs = t->step_batch;
    b->n = t->loader_pos + bs <= t->order_n ? bs : t->order_n - t->loader_pos;
    if (t->block) {
        /* token data: window g = epoch x windows per epoch + index in the epoch (this rank's share of them) */
        for (int64_t i = 0; i < b->n; i++)
            t->starts[i] = tr_window_start(t->cfg->seed, (uint64_t)(t->loader_epoch * t->train.n +
                                                                    t->perm[t->loader_pos + i]),
                                           t->train.n_tokens, t->block);
        tr_window_cut(t->train.tokens, t->starts, b->n, t->block, b->ids, b->y);
    } else {
        if (tr_augment_enabled(&t->augment))
            tr_dataset_gather_augmented(&t->train, t->perm + t->loader_pos, b->n, &t->augment, t->cfg->seed,
                                        (uint64_t)t->loader_epoch, b->x, b->y);
        else
            tr_dataset_gather(&t->train, t->perm + t->loader_pos, b->n, b->x, b->y);
        tr_dataset_gather_targets(&t->train, t->perm + t->loader_pos, b->n, b->t);
    }
    t->loader_pos += b->n;
    b->epoch = t->loader_epoch;
    b->pos = t->loader_pos;
    return 0;
}

/* Position the loader at the run's cursor (fresh or restored) and start its thread when data.prefetch. */
static int start_loader(trainer *t, tr_error *err)
{
    if (t->data.next_batch) return TR_OK; /* the caller's callback is the loader */
    t->loader_epoch = t->p.epoch;
    t->loader_pos = t->p.pos;
    make_order(t);
    return t->cfg->data.prefetch ? tr_prefetch_start(&t->pf, load_batch, t, err) : TR_OK;
}

/* Point the batch view at the next training batch and move the run's cursor past it. */
static int64_t take_batch(trainer *t)
{
    int slot = 0;
    if (t->cfg->data.prefetch) slot = tr_prefetch_take(&t->pf, NULL); /* load_batch never fails */
    else load_batch(t, slot);
    const batch_slot *b = &t->slots[slot];
    t->xbuf = b->x;
    t->ybuf = b->y;
    t->tbuf = b->t;
    t->idsbuf = b->ids;
    t->p.epoch = b->epoch;
    t->p.pos = b->pos;
    return b->n;
}

/* The next training batch: from the caller's callback, or gathered from the data set in this epoch's order. */
static int next_batch(trainer *t, trs_batch *b, tr_error *err)
{
    if (t->data.next_batch) {
        *b = (trs_batch){0};
        const int rc = t->data.next_batch(t->data.ctx, t->p.step, t->step_batch, b, err);
        if (rc) return rc;
        t->p.pos += b->shape[0];
        return TR_OK;
    }
    *b = batch_view(t, take_batch(t));
    return TR_OK;
}

/* Evaluate a whole data set in order, in eval-batch-sized chunks, with the live weights (ema NULL) or the EMA's;
 * the shim returns counts per batch and they are accumulated here in C. */
static int evaluate_weights(trainer *t, const tr_dataset *ds, const char *split, trs_ema *ema, tr_eval_figures *fig,
                            tr_error *err)
{
    const double t0 = now_s(t);
    const int64_t ebs = t->cfg->eval.batch_size;
    const size_t feat = (size_t)t->sample_elems, tc = (size_t)ds->t_cols;
    tr_metrics *m = &t->metrics;
    tr_metrics_reset(m);
    for (int64_t i = 0; i < ds->n; i += ebs) {
        const int64_t n = i + ebs <= ds->n ? ebs : ds->n - i;
        trs_batch b = batch_view(t, n);
        if (t->block) { /* token data: the fixed windows i, i + 1, ... starting at multiples of block */
            int64_t *starts = t->starts + t->step_batch;
            for (int64_t j = 0; j < n; j++) starts[j] = (i + j) * t->block;
            tr_window_cut(ds->tokens, starts, n, t->block, t->eval_ids, t->eval_y);
            b.x_ids = t->eval_ids;
            b.y = t->eval_y;
        } else {
            b.x = ds->x + (size_t)i * feat; /* contiguous rows: no gather needed */
            b.y = ds->y + i;
            b.target = ds->t ? ds->t + (size_t)i * tc : NULL;
        }
        trs_step_result r;
        if (trs_eval_batch(t->model, ema, &b, &t->step_opts, &r, &m->batch) != TRS_OK)
            return tr_error_set(err, TR_E_RUNTIME, "%s evaluation%s: %s", split, ema ? " (EMA weights)" : "",
                                trs_model_errmsg(t->model));
        tr_metrics_add(m, &r);
    }
    const double secs = now_s(t) - t0;
    tr_log_eval_metrics(&t->log, split, ema ? "ema" : "live", t->p.step, t->p.epoch, m, t->cfg->eval.top_k, secs);
    if (!ema || t->cfg->eval.weights == TR_WEIGHTS_EMA) /* the event reports the weights evaluate() returns */
        emit(t, (tr_run_event){.kind = TR_RUN_EV_EVAL, .split = split, .loss = tr_metrics_loss(m),
                               .correct = m->correct, .samples = m->samples, .accuracy = tr_metrics_accuracy(m),
                               .seconds = secs});
    if (t->trace && !ema) tr_trace_write_eval(t->trace, split, t->p.step, m->correct, m->samples, tr_metrics_loss(m));
    *fig = (tr_eval_figures){.has = 1, .loss = tr_metrics_loss(m), .accuracy = tr_metrics_accuracy(m),
                             .top_k_accuracy = tr_metrics_topk_accuracy(m), .micro_f1 = tr_metrics_micro_f1(m),
                             .macro_f1 = tr_metrics_macro_f1(m), .mse = tr_metrics_mse(m), .mae = tr_metrics_mae(m),
                             .samples = m->samples, .step = t->p.step};
    if (m->confusion) { /* the run directory keeps the latest confusion matrix of each split and weights */
        char path[TR_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/confusion_%s%s.csv", t->run_dir, split, ema ? "_ema" : "");
        return tr_metrics_write_confusion(m, path, err);
    }
    return TR_OK;
}

/* A phase change (after an evaluation pass, before a checkpoint): the caching allocators release the blocks no
 * tensor uses -- the CPU one's (trs_memory_empty_cache) and, on a CUDA device, the CUDA one's
 * (torch.cuda.empty_cache) -- so `reserved` shows what the next phase needs. Never per step: a released block must
 * be obtained again when it is needed (on CUDA a synchronising cudaMalloc). */
static void phase_change(const trainer *t)
{
    trs_memory_empty_cache(NULL);
    if (t->device.cuda) trs_cuda_empty_cache();
}

/* Evaluate with the weights eval.weights names: live, EMA or both. *loss_out / *acc_out get the live figures (the
 * EMA's when only those are evaluated); every figure goes into t->fig. */
static int evaluate(trainer *t, const tr_dataset *ds, const char *split, double *loss_out, double *acc_out,
                    tr_error *err)
{
    const int s = strcmp(split, "test") == 0;
    const tr_eval_weights w = t->cfg->eval.weights;
    int rc = TR_OK;
    /* Phase changes, train to eval and back: the training step's cached blocks go back before the pass (whose
     * activations at eval.batch_size are other sizes), and the pass's after it. Never inside the loop of steps. */
    trs_memory_empty_cache(NULL);
    if (w != TR_WEIGHTS_EMA) rc = evaluate_weights(t, ds, split, NULL, &t->fig[s][0], err);
    if (!rc && w != TR_WEIGHTS_LIVE) rc = evaluate_weights(t, ds, split, t->ema, &t->fig[s][1], err);
    phase_change(t);
    if (rc) return rc;
    const tr_eval_figures *f = &t->fig[s][w == TR_WEIGHTS_EMA ? 1 : 0];
    if (loss_out) *loss_out = f->loss;
    if (acc_out) *acc_out = f->accuracy;
    return TR_OK;
}

/* Close the open log window into a train record. */
static void log_window(trainer *t, int partial)
{
    tr_ckpt_progress *p = &t->p;
    if (p->win_steps == 0) return;
    const double now = now_s(t);
    p->last_loss = p->win_loss / (double)p->win_steps;
    /* token data: correct counts positions, block of them per window */
    const double counted = (double)p->win_samples * (double)(t->block ? t->block : 1);
    tr_log_train(&t->log, p->step, p->epoch, p->last_loss, (double)p->win_correct / counted, t->lr,
                 (double)p->win_samples / (now - t->win_t0 > 0 ? now - t->win_t0 : 1e-9), partial);
    p->win_loss = 0.0;
    p->win_correct = p->win_samples = p->win_steps = 0;
    t->win_t0 = now_s(t);
}

/* ---------------------------------------------------------------------------------------------------- concerns */

/* The set periodic evaluation runs on: the validation split, or the test set with eval.split: test. */
static const tr_dataset *eval_set(const trainer *t)
{
    return t->cfg->eval.split == TR_EVAL_TEST ? &t->test : &t->val;
}

/* Warm-up is over once the lazily allocated state exists: optimizer state (first step), evaluation buffers (first
 * validation pass, when one is configured), the first step-interval checkpoint (when configured) -- and the
 * configured number of steps has passed. Saving a checkpoint keeps no tensor memory (tests/test_checkpoint.c). */
static int warmed_up(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    const int val_configured = eval_set(t)->n > 0 && (cfg->eval.every_steps > 0 || cfg->eval.every_epoch);
    const int ckpt_configured = cfg->checkpoint.every_steps > 0;
    return t->p.step >= 1 && t->p.step >= cfg->watchdog.warmup_steps && (!val_configured || t->p.evals_done > 0) &&
           (!ckpt_configured || t->checkpoints_done > 0);
}

/* memory.cache_limit_bytes and memory.cache_limit_fraction x the watchdog's hard limit, whichever is smaller (0:
 * none): reserved bytes above it give the cache back. The watchdog's limit is known in full at its baseline. */
static void apply_cache_limit(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    int64_t lim = cfg->memory.cache_limit_bytes;
    const int64_t wd = t->wd.has_baseline ? t->wd.limit : tr_watchdog_limit_without_baseline(&t->wd);
    if (cfg->watchdog.enabled && cfg->memory.cache_limit_fraction > 0 && wd > 0) {
        const int64_t f = (int64_t)(cfg->memory.cache_limit_fraction * (double)wd);
        if (lim == 0 || f < lim) lim = f;
    }
    trs_memory_configure(cfg->memory.cache, lim, cfg->watchdog.backtrace);
}

/* What grew since the baseline, by (phase, size): the top lines into the log, and RUN_DIR/memory_report.json
 * (with the fastest-growing key's allocating call stack under watchdog.backtrace). `reason`: "warn", "limit",
 * "end". Failing to write the report is logged, not fatal: the run's own work comes first. */
static void report_growth(trainer *t, const char *reason, int log_lines)
{
    if (!t->mem_base.taken || !tr_dist_is_main(&t->dist)) return;
    tr_memsnap cur = {0};
    tr_error e = {0};
    if (tr_memsnap_take(&cur, t->p.step, &e)) {
        tr_log_message(&t->log, "watchdog: %s", e.msg);
        return;
    }
    tr_mem_growth *g = NULL;
    const size_t n = tr_memsnap_diff(&t->mem_base, &cur, &g, NULL);
    trs_memory_stats now;
    if (trs_memory_stats_get(&now) != TRS_OK) memset(&now, 0, sizeof now);
    char bt[8192] = "";
    if (n > 0 && t->cfg->watchdog.backtrace) {
        size_t best = 0; /* fastest-growing: most bytes per step, i.e. g[0] (sorted by bytes) */
        trs_memory_key_backtrace(g[best].phase, g[best].size, bt, sizeof bt, NULL);
    }
    for (size_t i = 0; log_lines && i < n && i < 5; i++) {
        char line[256];
        tr_mem_growth_line(&g[i], t->mem_base.step, line, sizeof line);
        tr_log_message(&t->log, "watchdog:   %s", line);
    }
    if (log_lines && n > 5) tr_log_message(&t->log, "watchdog:   ... %zu more (phase, size) keys grew", n - 5);
    if (log_lines && bt[0]) { /* the first key's allocating stack, innermost first, one frame a line */
        tr_log_message(&t->log, "watchdog:   the first was allocated at:");
        for (const char *line = bt; *line;) {
            const char *nl = strchr(line, '\n');
            tr_log_message(&t->log, "watchdog:     %.*s", nl ? (int)(nl - line) : (int)strlen(line), line);
            if (!nl) break;
            line = nl + 1;
        }
    }
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/memory_report.json", t->run_dir);
    if (tr_memreport_write(path, reason, t->mem_base.step, t->p.step, &t->mem_base_stats, &now, g, n, bt, &e))
        tr_log_message(&t->log, "watchdog: %s", e.msg);
    free(g);
    tr_memsnap_free(&cur);
}

/* Sample allocated bytes when due and report what the watchdog sees. Returns 1 when the run must stop. */
static int watch_memory(trainer *t)
{
    const tr_config *cfg = t->cfg;
    if (!cfg->watchdog.enabled || t->p.step % cfg->watchdog.every_steps != 0) return 0;
    tr_memory m; /* the CPU's counted bytes, or the CUDA caching allocator's for the run's device */
    if (tr_memory_read(&t->device, &m) != TR_OK) return 0;
    tr_watchdog_report r;
    const tr_watchdog_event ev = tr_watchdog_sample(&t->wd, t->p.step, m.allocated, warmed_up(t), &r);
    r.reserved = m.reserved;
    r.rss = m.rss;
    t->sum.growth_per_step = r.growth_per_step;
    if (ev == TR_WD_EV_NONE) return 0;
    if (ev == TR_WD_EV_BASELINE) {
        t->sum.baseline_bytes = r.baseline;
        t->sum.baseline_step = r.step;
        tr_error e = {0};
        if (tr_memsnap_take(&t->mem_base, t->p.step, &e)) tr_log_message(&t->log, "watchdog: %s", e.msg);
        if (trs_memory_stats_get(&t->mem_base_stats) != TRS_OK) memset(&t->mem_base_stats, 0, sizeof t->mem_base_stats);
        apply_cache_limit(t);
    }
    tr_log_watchdog(&t->log, &r);
    if (ev != TR_WD_EV_BASELINE) report_growth(t, ev == TR_WD_EV_LIMIT ? "limit" : "warn", 1);
    emit(t, (tr_run_event){.kind = TR_RUN_EV_WATCHDOG, .watchdog = r});
    if (ev == TR_WD_EV_LIMIT && cfg->watchdog.action == TR_WD_CHECKPOINT_EXIT) {
        tr_log_message(&t->log, "watchdog: stopping at step %lld (watchdog.action = checkpoint_exit)",
                       (long long)t->p.step);
        return 1;
    }
    return 0;
}

static int interval_due(const trainer *t)
{
    const double every = t->cfg->checkpoint.every_seconds;
    return every > 0 && elapsed(t) - t->last_ckpt_elapsed >= every;
}

/* Why a checkpoint is due after this step ("steps", "interval"), or NULL. In a multi-process run the interval is
 * the ranks' agreement (agree_on_step), so every rank saves at the same step. */
static const char *checkpoint_due(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    if (cfg->checkpoint.every_steps > 0 && t->p.step % cfg->checkpoint.every_steps == 0) return "steps";
    if (t->dist.pg ? (t->flags & TR_DIST_CHECKPOINT) != 0 : interval_due(t)) return "interval";
    return NULL;
}

static int eval_due(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    return eval_set(t)->n > 0 && ((cfg->eval.every_steps > 0 && t->p.step % cfg->eval.every_steps == 0) ||
                            (cfg->eval.every_epoch && epoch_done(t)));
}

/* ---------------------------------------------------------------------------------------------------- selection */

/* The monitored metric's value in the latest periodic evaluation (fig[split][weights]). */
static double monitored(const trainer *t, const tr_monitor *m)
{
    const tr_eval_figures *f = &t->fig[m->test][m->ema];
    switch (m->metric) {
    case TR_MON_LOSS: return f->loss;
    case TR_MON_ACCURACY: return f->accuracy;
    case TR_MON_TOP_K_ACCURACY: return f->top_k_accuracy;
    case TR_MON_MICRO_F1: return f->micro_f1;
    case TR_MON_MACRO_F1: return f->macro_f1;
    case TR_MON_MSE: return f->mse;
    case TR_MON_MAE: return f->mae;
    }
    return NAN;
}

/* A monitor (config key `key`) must name a figure the periodic evaluation produces for this task. */
static int check_monitor(const trainer *t, const char *key, const char *name, tr_monitor *m, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char why[256];
    if (tr_monitor_parse(name, m, why, sizeof why)) return tr_error_set(err, TR_E_CONFIG, "%s: %s", key, why);
    const int on_test = cfg->eval.split == TR_EVAL_TEST;
    if (m->test != on_test)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s names the %s split, but the periodic evaluation runs on the %s "
                            "split (eval.split: %s)", key, name, m->test ? "test" : "val", on_test ? "test" : "val",
                            on_test ? "test" : "val");
    if (!(eval_set(t)->n > 0 && (cfg->eval.every_steps > 0 || cfg->eval.every_epoch)))
        return tr_error_set(err, TR_E_CONFIG, "%s: %s needs a periodic evaluation (eval.every_steps > 0 or "
                            "eval.every_epoch: true) on a non-empty %s set", key, name, on_test ? "test" : "validation");
    if (m->ema && cfg->eval.weights == TR_WEIGHTS_LIVE)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s needs the EMA weights evaluated (eval.weights: ema or both)",
                            key, name);
    if (!m->ema && cfg->eval.weights == TR_WEIGHTS_EMA)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s: with eval.weights: ema only the EMA weights are evaluated "
                            "(monitor %s_ema_%s)", key, name, on_test ? "test" : "val", tr_monitor_metric_name(m->metric));
    const tr_task task = t->metrics.task;
    int ok;
    switch (m->metric) {
    case TR_MON_LOSS: ok = 1; break;
    case TR_MON_ACCURACY: ok = task != TR_TASK_REGRESSION; break;
    case TR_MON_TOP_K_ACCURACY: ok = task == TR_TASK_CLASSIFY && cfg->eval.top_k > 0; break;
    case TR_MON_MICRO_F1:
    case TR_MON_MACRO_F1: ok = task == TR_TASK_MULTI_LABEL; break;
    default: ok = task == TR_TASK_REGRESSION; break;
    }
    static const char *const tasks[] = {"classification (cross_entropy)", "multi-label (bce_with_logits)",
                                        "regression (mse, smooth_l1)"};
    if (!ok)
        return tr_error_set(err, TR_E_CONFIG, "%s: %s is not reported for %s%s", key, name, tasks[task],
                            m->metric == TR_MON_TOP_K_ACCURACY ? " without eval.top_k" : "");
    return TR_OK;
}

/* The selection state of a run that has evaluated nothing yet. */
static void init_selection(const trainer *t, tr_select_state *s)
{
    const tr_config *cfg = t->cfg;
    memset(s, 0, sizeof *s);
    if (t->has_topk) {
        snprintf(s->topk_metric, sizeof s->topk_metric, "%s", cfg->checkpoint.monitor);
        s->topk_max = cfg->checkpoint.mode == TR_MODE_MAX;
    }
    if (t->has_es) {
        snprintf(s->es_metric, sizeof s->es_metric, "%s", cfg->early_stopping.monitor);
        s->es_max = cfg->early_stopping.mode == TR_MODE_MAX;
        tr_early_stop_init(&s->es, s->es_max);
    }
    if (t->has_plateau) tr_plateau_init(cfg, s);
}

/* checkpoint.monitor, early_stopping.monitor and a plateau schedule's monitor, checked against the task and the
 * evaluation; their state starts empty (a resume replaces it with the checkpoint's: reconcile_selection). */
static int setup_selection(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    int rc = TR_OK;
    t->has_topk = cfg->checkpoint.monitor[0] != '\0';
    t->has_es = cfg->early_stopping.monitor[0] != '\0';
    t->has_plateau = cfg->schedule.name == TR_SCHED_PLATEAU;
    if (t->has_topk) rc = check_monitor(t, "checkpoint.monitor", cfg->checkpoint.monitor, &t->topk_mon, err);
    if (!rc && t->has_es) rc = check_monitor(t, "early_stopping.monitor", cfg->early_stopping.monitor, &t->es_mon, err);
    if (!rc && t->has_plateau) rc = check_monitor(t, "schedule.monitor", cfg->schedule.monitor, &t->plateau_mon, err);
    if (!rc) init_selection(t, &t->p.sel);
    return rc;
}

/* After a resume: keep the checkpoint's selection state where it was kept for the same metric and mode; a part
 * whose monitor or mode changed (or that the checkpoint lacks) starts afresh, with a warning. */
static void reconcile_selection(trainer *t)
{
    tr_select_state fresh, *s = &t->p.sel;
    init_selection(t, &fresh);
    /* checkpoint.monitor turned off: the best kept so far stay kept (frozen, still protected from pruning, and
     * best.json still names them); only a different monitor starts the best afresh */
    if (t->has_topk && (strcmp(s->topk_metric, fresh.topk_metric) || s->topk_max != fresh.topk_max)) {
        if (s->topk_metric[0]) {
            tr_log_message(&t->log, "warning: checkpoint.monitor is now %s (%s); the checkpoint kept the best by %s "
                                    "(%s): the best are chosen afresh, and the earlier ones rotate with keep_last",
                           fresh.topk_metric, fresh.topk_max ? "max" : "min", s->topk_metric,
                           s->topk_max ? "max" : "min");
            char path[TR_PATH_MAX + 32]; /* it names the other metric's best: gone until this one has a best */
            snprintf(path, sizeof path, "%s/best.json", t->run_dir);
            if (tr_dist_is_main(&t->dist)) tr_io_unlink(path);
        }
        memcpy(s->topk_metric, fresh.topk_metric, sizeof s->topk_metric);
        s->topk_max = fresh.topk_max;
        s->topk = fresh.topk;
    }
    if (strcmp(s->es_metric, fresh.es_metric) || s->es_max != fresh.es_max) {
        if (t->has_es && s->es_metric[0])
            tr_log_message(&t->log, "warning: early_stopping.monitor is now %s; the checkpoint's was %s: its patience "
                                    "counts afresh", fresh.es_metric, s->es_metric);
        memcpy(s->es_metric, fresh.es_metric, sizeof s->es_metric);
        s->es_max = fresh.es_max;
        s->es = fresh.es;
    }
    if (strcmp(s->plateau_metric, fresh.plateau_metric)) {
        if (t->has_plateau && s->plateau_metric[0])
            tr_log_message(&t->log, "warning: schedule.monitor is now %s; the checkpoint's plateau schedule watched "
                                    "%s: it starts afresh at optim.lr", fresh.plateau_metric, s->plateau_metric);
        memcpy(s->plateau_metric, fresh.plateau_metric, sizeof s->plateau_metric);
        s->plateau_lr = fresh.plateau_lr;
        s->plateau_best = fresh.plateau_best;
        s->plateau_bad = fresh.plateau_bad;
        s->plateau_cooldown = fresh.plateau_cooldown;
        s->plateau_reductions = fresh.plateau_reductions;
    }
}

/* After each periodic evaluation: offer it to the top-k (a checkpoint is then due), step the plateau schedule,
 * and let early stopping decide (Lightning's order: the checkpoint of this evaluation is saved before the stop). */
static void select_after_eval(trainer *t)
{
    const tr_config *cfg = t->cfg;
    tr_select_state *s = &t->p.sel;
    if (t->has_topk && tr_topk_offer(&s->topk, cfg->checkpoint.save_top_k, s->topk_max, t->p.step,
                                     monitored(t, &t->topk_mon), NULL))
        t->best_due = 1;
    if (t->has_plateau) {
        const double before = s->plateau_lr;
        if (tr_plateau_step(cfg, s, monitored(t, &t->plateau_mon)))
            tr_log_message(&t->log, "plateau: %s has not improved for %lld evaluations: lr %.6g -> %.6g after step %lld",
                           cfg->schedule.monitor, (long long)cfg->schedule.patience + 1, before, s->plateau_lr,
                           (long long)t->p.step);
    }
    if (t->has_es && !s->es.stopped) {
        char why[256];
        if (tr_early_stop_update(&s->es, s->es_max, cfg->early_stopping.min_delta, cfg->early_stopping.patience,
                                 t->p.step, monitored(t, &t->es_mon), cfg->early_stopping.monitor, why, sizeof why)) {
            snprintf(t->stop_reason, sizeof t->stop_reason, "early stopping after step %lld: %s", (long long)t->p.step,
                     why);
            tr_log_message(&t->log, "%s", t->stop_reason);
        }
    }
}

/* The lr of the step about to be taken: the schedule's, from the plateau's current lr for schedule.name plateau. */
static double scheduled_lr(const trainer *t)
{
    const double base = t->has_plateau ? t->p.sel.plateau_lr : t->cfg->optim.lr;
    return tr_schedule_lr_from(t->cfg, base, t->p.step, t->total_steps, t->steps_per_epoch);
}

/* The run is over by its own rule: every planned step taken, or early stopping ended it. */
static int run_complete(const trainer *t) { return t->p.step >= t->total_steps || t->p.sel.es.stopped; }

/* RUN_DIR/curves.png redrawn from metrics.jsonl (plot.h): after each evaluation and at the end. A failure is
 * logged once and not retried; the run goes on. */
static void draw_curves(trainer *t)
{
    if (!tr_dist_is_main(&t->dist) || t->curves_failed || !t->log_open) return;
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/curves.png", t->run_dir);
    const char *dir = t->run_dir;
    tr_error e = {0};
    if (tr_plot_runs(&dir, 1, path, &e)) {
        t->curves_failed = 1;
        tr_log_message(&t->log, "warning: curves.png is no longer drawn: %s", e.msg);
    }
}

/* A validation pass; its time is left out of the open train window's samples/s. */
static int validate(trainer *t, tr_error *err)
{
    const double e0 = now_s(t);
    const int rc = evaluate(t, eval_set(t), t->cfg->eval.split == TR_EVAL_TEST ? "test" : "val", &t->p.val_loss, &t->p.val_accuracy, err);
    if (rc) return rc;
    t->p.has_val = 1;
    t->p.evals_done++;
    select_after_eval(t);
    draw_curves(t);
    t->win_t0 += now_s(t) - e0;
    return TR_OK;
}

/* Add one step's scalars to the run's totals and the open log window. */
static void accumulate(trainer *t, const trs_step_result *r, double lr)
{
    t->p.step++;
    if (t->trace) tr_trace_write_step(t->trace, t->p.step, r->loss, lr);
    t->p.samples_total += r->samples;
    t->p.win_loss += r->loss;
    t->p.win_correct += r->correct;
    t->p.win_samples += r->samples;
    t->p.win_steps++;
    emit(t, (tr_run_event){.kind = TR_RUN_EV_STEP, .loss = r->loss, .lr = lr, .grad_norm = r->grad_norm,
                           .samples = r->samples, .correct = r->correct,
                           .accuracy = r->samples ? (double)r->correct / (double)r->samples : 0.0});
}

/* The EMA after optimizer step p.step: a fresh copy of the weights at ema.start_step (> 0), then an update every
 * ema.every_steps steps after it. */
static int update_ema(trainer *t, tr_error *err)
{
    if (!t->ema) return TR_OK;
    const int64_t s = t->p.step, start = t->cfg->ema.start_step;
    trs_status st = TRS_OK;
    if (s == start && start > 0) st = trs_ema_reset(t->ema);
    else if (s > start && (s - start) % t->cfg->ema.every_steps == 0) st = trs_ema_update(t->ema);
    if (st != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "step %lld: ema: %s", (long long)s, trs_ema_errmsg(t->ema));
    return TR_OK;
}

/* Report a finished save: its record and event, or its error. A save's outcome is taken on the run's thread, so
 * the sinks see it in order; the record's step and epoch are the checkpoint's. */
static int checkpoint_saved(trainer *t, const tr_ckpt_saved *r, tr_error *err)
{
    if (r->rc) {
        if (err) *err = r->err;
        return r->rc;
    }
    const double seconds = t->saving.stall + r->write_seconds; /* from the snapshot to the renamed directory */
    tr_log_checkpoint(&t->log, r->step, r->reason, r->path, r->bytes, seconds, t->saving.stall, t->saving.elapsed);
    if (t->on_event) {
        tr_run_event ev = {.kind = TR_RUN_EV_CHECKPOINT, .reason = r->reason, .path = r->path, .bytes = r->bytes,
                           .seconds = seconds, .step = r->step, .epoch = t->saving.epoch};
        t->on_event(t->event_ctx, &ev);
    }
    if (r->prune_rc) {
        if (err) *err = r->err;
        return r->prune_rc; /* the checkpoint is complete; a prune that failed still ends the run (exit 1) */
    }
    if (t->has_topk) /* the run directory names its best checkpoint (the set as of this checkpoint) */
        return tr_best_write(t->run_dir, t->cfg->checkpoint.monitor, t->p.sel.topk_max, &t->saving.best, err);
    return TR_OK;
}

/* The background save's outcome: with `wait`, after waiting for it (a due save waits for the previous one; the
 * end of the run, a stop and an error wait for it); without, only once it has finished. */
static int settle_checkpoint(trainer *t, int wait, tr_error *err)
{
    tr_ckpt_saved r;
    if (!tr_ckpt_saver_take(&t->saver, wait, &r)) return TR_OK;
    return checkpoint_saved(t, &r, err);
}

/* Save a checkpoint now (unless one of this very step exists): the loop pays for a snapshot of the state; the
 * files are written and old checkpoints pruned on the saver's thread (checkpoint.async), or here. Every rank takes
 * part (its generator state is gathered); rank 0 writes. With `wait`, the save is complete (or failed) on return. */
static int save_checkpoint(trainer *t, const char *reason, int wait, tr_error *err)
{
    int rc = settle_checkpoint(t, 1, err); /* at most one save in flight */
    if (rc || t->last_ckpt_step == t->p.step) return rc;
    phase_change(t);
    const double t0 = now_s(t);
    t->p.elapsed = elapsed(t);
    rc = tr_dist_gather_rng(&t->dist, &t->p, t->device.cuda ? t->device.index : -1, err);
    int phase = TRS_PHASE_OUTSIDE;
    trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
    if (!rc && tr_dist_is_main(&t->dist)) {
        tr_ckpt_snapshot *snap = NULL;
        rc = tr_checkpoint_snapshot(t->cfg, t->model, t->opt, t->ema, &t->p, reason, &snap, err);
        t->saving.elapsed = t->p.elapsed;
        t->saving.epoch = t->p.epoch;
        t->saving.best = t->p.sel.topk; /* checkpoint.save_top_k's set as of this checkpoint: pruning and best.json */
        const tr_topk *best = t->saving.best.n > 0 ? &t->saving.best : NULL;
        if (!rc && t->cfg->checkpoint.async) {
            t->saving.stall = now_s(t) - t0;
            rc = tr_ckpt_saver_start(&t->saver, t->run_dir, t->cfg->checkpoint.keep_last, best, snap, reason, err);
        } else if (!rc) { /* written here: the loop waits for all of it, and seconds = stall */
            tr_ckpt_saved r = {.step = t->p.step, .reason = reason};
            tr_io_save_begin(); /* the fault hook counts the I/O calls of the save and its prune */
            r.rc = tr_checkpoint_write(t->run_dir, snap, r.path, &r.bytes, &r.err);
            if (!r.rc) r.prune_rc = tr_checkpoint_prune(t->run_dir, t->cfg->checkpoint.keep_last, t->p.step, best, &r.err);
            tr_io_save_end();
            tr_checkpoint_snapshot_free(snap);
            t->saving.stall = now_s(t) - t0;
            trs_memory_set_phase(phase, NULL);
            if (!r.rc) {
                t->last_ckpt_elapsed = t->p.elapsed;
                t->last_ckpt_step = t->p.step;
                t->checkpoints_done++;
                t->best_due = 0;
            }
            return checkpoint_saved(t, &r, err);
        }
    }
    trs_memory_set_phase(phase, NULL);
    if (rc) return rc;
    t->last_ckpt_elapsed = t->p.elapsed;
    t->last_ckpt_step = t->p.step;
    t->checkpoints_done++;
    t->best_due = 0;
    return wait ? settle_checkpoint(t, 1, err) : TR_OK;
}

/* Once per step, after the train step: in a multi-process run the ranks all-reduce the step's loss and counts
 * and agree on stopping (signal, caller, watchdog) and on an interval checkpoint, so all act at the same step. */
static int agree_on_step(trainer *t, trs_step_result *r, tr_error *err)
{
    t->flags = (stop_requested || t->stop ? TR_DIST_STOP : 0) | (t->wd_pending ? TR_DIST_WATCHDOG : 0) |
               (interval_due(t) ? TR_DIST_CHECKPOINT : 0);
    return tr_dist_reduce_step(&t->dist, r, &t->flags, err);
}

/* Whether the watchdog stops the run now. One process: when it fired (`fired`). Several: a rank's watchdog that
 * fires tells the others at the next step's agreement, and all stop there. */
static int watchdog_stop(trainer *t, int fired)
{
    if (!t->dist.pg) return fired;
    if (fired) t->wd_pending = 1;
    return (t->flags & TR_DIST_WATCHDOG) != 0;
}

/* A resume that continues a finished run (train.max_steps or train.epochs raised): say so, and warn when the
 * learning-rate schedule, planned for the old length, jumps (a cosine schedule that had decayed to min_lr starts
 * a new, longer decay from where the new plan stands). */
static void warn_extension(trainer *t)
{
    tr_config *old = malloc(sizeof *old);
    tr_error ignore = {0};
    if (!old || tr_checkpoint_read_config(t->resume_from, old, &ignore) != TR_OK) {
        free(old);
        return;
    }
    const int64_t spe = t->steps_per_epoch;
    const int64_t old_total = old->train.max_steps > 0 ? old->train.max_steps : old->train.epochs * spe;
    if (t->p.step >= old_total && t->total_steps > old_total) {
        const double lr_end = tr_schedule_lr(old, t->p.step - 1, old_total, spe);
        const double lr_next = tr_schedule_lr(t->cfg, t->p.step, t->total_steps, spe);
        static const char *const names[] = {"constant", "step", "cosine", "multistep", "plateau"};
        if (fabs(lr_next - lr_end) > 1e-6 * fabs(lr_end) + 1e-300)
            tr_log_message(&t->log, "warning: extending a finished run from %lld to %lld steps restarts its "
                                    "schedule: the %s schedule was planned for %lld steps and ended at lr %.3g; "
                                    "step %lld now trains at lr %.3g. For a schedule planned for the whole run, "
                                    "start a new run (another run.name) with the full train.max_steps",
                           (long long)old_total, (long long)t->total_steps, names[t->cfg->schedule.name],
                           (long long)old_total, lr_end, (long long)t->p.step + 1, lr_next);
        else
            tr_log_message(&t->log, "extending a finished run from %lld to %lld steps (lr %.3g continues)",
                           (long long)old_total, (long long)t->total_steps, lr_next);
    }
    free(old);
}

/* Resume from t->resume_from, or start from init.from weights, or from the seed's initialisation. */
static int restore(trainer *t, tr_error *err)
{
    if (t->resume_from[0]) {
        const tr_ckpt_expect x = ckpt_expect(t);
        int phase = TRS_PHASE_OUTSIDE;
        trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
        int rc = tr_checkpoint_load(t->resume_from, t->cfg, t->model, t->opt, t->ema, &x, &t->p, warn_to_log,
                                    &t->log, err);
        trs_memory_set_phase(phase, NULL);
        if (rc) return rc;
        if ((rc = tr_dist_restore_rng(&t->dist, t->resume_from, t->p.world_size, t->device.cuda ? t->device.index : -1,
                                      warn_to_log, &t->log, err)))
            return rc;
        t->last_ckpt_step = t->p.step;
        t->last_ckpt_elapsed = t->p.elapsed;
        t->p.epoch_samples = ckpt_expect(t).epoch_samples; /* this run's epoch, for the checkpoints it saves */
        reconcile_selection(t);
        if (run_complete(t)) return TR_OK; /* complete: tr_run says so and touches nothing */
        if (tr_dist_is_main(&t->dist) &&
            (rc = tr_checkpoint_set_aside_newer(t->run_dir, t->p.step, warn_to_log, &t->log, err)))
            return rc;
        tr_log_resume(&t->log, t->p.step, t->p.epoch, t->p.pos, t->resume_from);
        warn_extension(t);
        tr_error berr = {0}; /* best.json again, in case a set-aside checkpoint was the one it named */
        if (t->has_topk && tr_dist_is_main(&t->dist) &&
            tr_best_write(t->run_dir, t->cfg->checkpoint.monitor, t->p.sel.topk_max, &t->p.sel.topk, &berr))
            tr_log_message(&t->log, "warning: %s", berr.msg);
        if (t->cfg->debug.perturb_resume_rng) { /* TEST ONLY: one extra draw breaks bit-identity */
            double ignored;
            trs_rng_normal(&ignored, 1);
        }
        return TR_OK;
    }
    if (t->cfg->init.from[0]) {
        char given[TR_PATH_MAX], path[TR_PATH_MAX];
        tr_config_resolve_path(t->cfg, t->cfg->init.from, given);
        const char *which = NULL;
        int rc = tr_checkpoint_of_run(given, path, sizeof path, &which, err);
        if (rc) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return tr_error_set(err, rc, "init.from: %s", msg);
        }
        if (which) tr_log_message(&t->log, "init.from: %s is a run directory: its %s checkpoint %s", given, which, path);
        rc = tr_checkpoint_load_weights(path, t->model, t->cfg->init.strict, warn_to_log, &t->log, err);
        if (rc) return rc;
        tr_log_message(&t->log, "initialised from %s", path);
    }
    return TR_OK;
}

/* Keys a trace does not record as overrides: where the run writes, and the trace itself. */
static int not_recorded(const char *key) { return strncmp(key, "run.", 4) == 0 || strcmp(key, "log.trace") == 0; }

/* The recording's config into a fresh trace: the fingerprint, the overrides beyond the config file (the keys
 * whose values differ from the file's; none for a config given as text) and the effective config's YAML, so
 * that `verify CONFIG TRACE` can repeat the recording without its command line and refuse a different config. */
static int write_trace_config(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char fp[65] = "";
    int rc = tr_config_fingerprint(cfg, fp, err);
    if (rc) return rc;
    char **overrides = NULL;
    int n = 0;
    tr_config *base = malloc(sizeof *base);
    if (!base) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    tr_error ignore = {0};
    tr_config_defaults(base);
    if (cfg->source[0] && tr_config_load_file(base, cfg->source, &ignore) == TR_OK)
        n = tr_config_overrides_between(base, cfg, not_recorded, &overrides);
    free(base);
    char *yaml = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&yaml, &len);
    if (!mem || n < 0) {
        if (mem) fclose(mem);
        free(yaml);
        tr_config_overrides_free(overrides);
        return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    }
    tr_config_write_yaml(cfg, mem);
    fclose(mem);
    tr_trace_write_config(t->trace, fp, overrides, n, yaml);
    free(yaml);
    tr_config_overrides_free(overrides);
    return TR_OK;
}

/* Open log.trace: a fresh run starts the file, a resumed one appends a resume record. A missing directory is
 * created; one that cannot be is a config error, reported before the first step. */
static int open_trace(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    if (!cfg->log.trace[0] || !tr_dist_is_main(&t->dist)) return TR_OK;
    char dir[TR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->log.trace);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        int created;
        tr_error derr = {0};
        if (make_dirs(dir, &created, &derr))
            return tr_error_set(err, TR_E_CONFIG, "log.trace: %s", derr.msg);
    }
    t->trace = fopen(cfg->log.trace, t->resume_from[0] ? "a" : "w");
    if (!t->trace)
        return tr_error_set(err, TR_E_CONFIG, "log.trace: %s: cannot open for writing: %s", cfg->log.trace,
                            strerror(errno));
    if (t->resume_from[0] && ftell(t->trace) > 0) {
        tr_trace_write_resume(t->trace, t->p.step);
    } else {
        int intra = 0, inter = 0;
        trs_get_threads(&intra, &inter, NULL);
        tr_trace_write_header(t->trace, trs_torch_version(), intra, inter, cfg->deterministic);
        return write_trace_config(t, err);
    }
    return TR_OK;
}

/* summary.json's "status" for the run's code: any code but the four named ones is an "error". */
static const char *status_name(int rc)
{
    switch (rc) {
    case TR_OK: return "completed";
    case TR_E_WATCHDOG: return "watchdog";
    case TR_E_SIGNAL: return "interrupted";
    case TR_E_PEER: return "peer_failed";
    default: return "error";
    }
}

static void print_summary(const trainer *t, int rc, const tr_error *err, FILE *f)
{
    const tr_summary *s = &t->sum;
    fprintf(f, "{\"status\":\"%s\",\"params\":%lld,\"steps\":%lld,\"epochs\":%lld,\"epochs_completed\":",
            status_name(rc), (long long)s->params, (long long)s->steps, (long long)s->epochs);
    tr_json_number(f, s->epochs_completed);
    fputs(",\"train_seconds\":", f);
    tr_json_number(f, s->train_seconds);
    fputs(",\"samples_per_s\":", f);
    tr_json_number(f, s->samples_per_s);
    if (t->block) { /* token data: a sample is a window of block tokens */
        fputs(",\"tokens_per_s\":", f);
        tr_json_number(f, s->samples_per_s * (double)t->block);
    }
    fputs(",\"last_loss\":", f);
    tr_json_number(f, s->last_loss);
    fprintf(f, ",\"baseline_bytes\":%lld,\"baseline_step\":%lld,\"final_bytes\":%lld,\"peak_bytes\":%lld,"
               "\"peak_reserved_bytes\":%lld,\"final_rss_bytes\":%lld,\"peak_rss_bytes\":%lld,\"memory_cache\":%s,"
               "\"growth_per_step\":",
            (long long)s->baseline_bytes, (long long)s->baseline_step, (long long)s->final_bytes,
            (long long)s->peak_bytes, (long long)s->peak_reserved_bytes, (long long)s->final_rss_bytes,
            (long long)s->peak_rss_bytes, t->cfg->memory.cache ? "true" : "false");
    tr_json_number(f, s->growth_per_step);
    fputs(",\"device\":", f);
    tr_json_string(f, s->device);
    if (s->final_reserved_bytes >= 0)
        fprintf(f, ",\"final_reserved_bytes\":%lld", (long long)s->final_reserved_bytes);
    if (s->world_size > 1) {
        fprintf(f, ",\"world_size\":%d,\"allreduce_seconds\":", s->world_size);
        tr_json_number(f, s->allreduce_seconds);
        fputs(",\"allreduce_share\":", f);
        tr_json_number(f, s->allreduce_share);
    }
    if (s->has_val) {
        fputs(",\"val_loss\":", f);
        tr_json_number(f, s->val_loss);
        fputs(",\"val_accuracy\":", f);
        tr_json_number(f, s->val_accuracy);
    }
    if (s->has_test) {
        fputs(",\"test_loss\":", f);
        tr_json_number(f, s->test_loss);
        fputs(",\"test_accuracy\":", f);
        tr_json_number(f, s->test_accuracy);
        fprintf(f, ",\"test_samples\":%lld", (long long)s->test_samples);
    }
    const tr_eval_figures *figs[] = {&s->val_live, &s->val_ema, &s->test_live, &s->test_ema};
    static const char *const fig_names[] = {"val", "val_ema", "test", "test_ema"};
    for (int i = 0; i < 4; i++) {
        const tr_eval_figures *e = figs[i];
        if (!e->has) continue;
        fprintf(f, ",\"%s_metrics\":{\"samples\":%lld,\"loss\":", fig_names[i], (long long)e->samples);
        tr_json_number(f, e->loss);
        if (t->metrics.bits_name) { /* language modelling: the loss is nats per token */
            fprintf(f, ",\"%s\":", t->metrics.bits_name);
            tr_json_number(f, tr_nats_to_bits(e->loss));
            fputs(",\"perplexity\":", f);
            tr_json_number(f, tr_perplexity(e->loss));
        }
        switch (t->metrics.task) {
        case TR_TASK_CLASSIFY:
            fputs(",\"accuracy\":", f);
            tr_json_number(f, e->accuracy);
            if (t->cfg->eval.top_k > 0) {
                fprintf(f, ",\"top_%d_accuracy\":", t->cfg->eval.top_k);
                tr_json_number(f, e->top_k_accuracy);
            }
            break;
        case TR_TASK_MULTI_LABEL:
            fputs(",\"subset_accuracy\":", f);
            tr_json_number(f, e->accuracy);
            fputs(",\"micro_f1\":", f);
            tr_json_number(f, e->micro_f1);
            fputs(",\"macro_f1\":", f);
            tr_json_number(f, e->macro_f1);
            break;
        case TR_TASK_REGRESSION:
            fputs(",\"mse\":", f);
            tr_json_number(f, e->mse);
            fputs(",\"mae\":", f);
            tr_json_number(f, e->mae);
            break;
        }
        fprintf(f, ",\"step\":%lld}", (long long)e->step); /* last: tools match the members before it as text */
    }
    int intra = 0, inter = 0, blas = 0;
    trs_get_threads(&intra, &inter, &blas);
    fprintf(f, ",\"threads\":{\"intra_op\":%d,\"inter_op\":%d,\"blas\":%d},\"malloc_tuning\":%s,\"prefetch\":%s", intra,
            inter, blas, t->malloc_tuned ? "true" : "false", t->cfg->data.prefetch ? "true" : "false");
    if (s->early_stopped) {
        fputs(",\"early_stopped\":true,\"stop_reason\":", f);
        tr_json_string(f, s->stop_reason[0] ? s->stop_reason : "early stopping (in an earlier process of the run)");
    }
    if (s->best_step >= 0) {
        fprintf(f, ",\"best\":{\"monitor\":");
        tr_json_string(f, s->best_monitor);
        fprintf(f, ",\"step\":%lld,\"score\":", (long long)s->best_step);
        tr_json_number(f, s->best_score);
        fprintf(f, ",\"checkpoint\":\"checkpoints/step-%010lld\"}", (long long)s->best_step);
    }
    if (rc == TR_E_RUNTIME || rc == TR_E_CONFIG) {
        fputs(",\"error\":", f);
        tr_json_string(f, err->msg);
    }
    fputs("}\n", f);
}

/* summary.json through the atomic path: a full disk leaves the previous one intact, never a truncated file. A
 * failure is logged (the run's own status stands: the summary is its report, not its result). */
static void write_summary(const trainer *t, int rc, const tr_error *err)
{
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", t->run_dir);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_error werr = {0};
    if (!f) {
        tr_error_set(&werr, TR_E_RUNTIME, "%s: out of memory", path);
    } else {
        print_summary(t, rc, err, f);
        if (fclose(f) == 0) tr_io_write_file_atomic(path, buf, len, &werr);
        else tr_error_set(&werr, TR_E_RUNTIME, "%s: out of memory", path);
        free(buf);
    }
    if (werr.code) tr_log_message((tr_log *)&t->log, "warning: summary not written: %s", werr.msg);
}

/* ---------------------------------------------------------------------------------------------------- the run */

/* Fill the summary from where the run stands and write summary.json (once; after the loop or on an error). */
static void conclude(trainer *t, int rc, const tr_error *err)
{
    if (t->concluded) return;
    t->concluded = 1;
    if (tr_ckpt_saver_busy(&t->saver)) { /* an error ended the run while a save was in flight: let it complete */
        tr_error serr = {0};
        if (settle_checkpoint(t, 1, &serr) != TR_OK && t->log_open)
            tr_log_message(&t->log, "%s", serr.msg);
    }
    tr_summary *sum = &t->sum;
    sum->steps = t->p.step;
    sum->epochs = t->model ? t->p.epoch + 1 : 0;
    sum->epochs_completed = t->steps_per_epoch > 0 && !t->data.next_batch
                                ? (double)t->p.step / (double)t->steps_per_epoch : 0.0;
    sum->last_loss = t->p.last_loss;
    if (t->t_start > 0 && rc != TR_OK && rc != TR_E_SIGNAL && rc != TR_E_WATCHDOG) {
        /* an error ended the loop before finish_locked filled these: where the run stands, not zeros */
        sum->train_seconds = elapsed(t);
        sum->samples_per_s = t->p.step_seconds > 0 ? (double)t->p.samples_total / t->p.step_seconds : 0.0;
        if (t->p.win_steps > 0) sum->last_loss = t->p.win_loss / (double)t->p.win_steps; /* the open window */
        tr_memory m; /* the run's device's, as finish_locked reports them */
        if (tr_memory_read(&t->device, &m) == TR_OK) {
            sum->final_bytes = m.allocated;
            sum->peak_bytes = m.peak;
        }
    }
    sum->has_val = t->p.has_val;
    sum->val_loss = t->p.val_loss;
    sum->val_accuracy = t->p.val_accuracy;
    sum->val_live = t->fig[0][0];
    sum->val_ema = t->fig[0][1];
    sum->test_live = t->fig[1][0];
    sum->test_ema = t->fig[1][1];
    sum->task = (int)t->metrics.task;
    sum->top_k = t->cfg->eval.top_k;
    sum->early_stopped = t->p.sel.es.stopped;
    snprintf(sum->stop_reason, sizeof sum->stop_reason, "%s", t->stop_reason);
    sum->best_step = t->p.sel.topk.n > 0 ? t->p.sel.topk.step[0] : -1;
    sum->best_score = t->p.sel.topk.n > 0 ? t->p.sel.topk.score[0] : NAN;
    snprintf(sum->best_monitor, sizeof sum->best_monitor, "%s", t->p.sel.topk_metric);
    snprintf(sum->run_dir, sizeof sum->run_dir, "%s", t->run_dir);
    tr_device_name(&t->device, sum->device, sizeof sum->device);
    sum->rank = t->dist.rank;
    sum->world_size = t->dist.world_size;
    if (t->log_open && tr_dist_is_main(&t->dist)) write_summary(t, rc, err);
}

/* Each metrics.jsonl record, just appended, to the sinks derived from it (today: metrics.csv). */
static void on_record(void *ctx, const char *line)
{
    trainer *t = ctx;
    tr_csv_sink_record(&t->csv, line);
}

/* Allocate the batch buffers and open the log: what the loop needs once the data and model are known. */
static int setup_loop(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    const int64_t bs = cfg->train.batch_size * cfg->train.accumulate_steps; /* samples per optimizer step */
    t->step_batch = bs;
    const int64_t epoch_n = tr_dist_shard_size(&t->dist, t->train.n); /* samples per epoch on this rank */
    t->steps_per_epoch = cfg->train.drop_last ? epoch_n / bs : (epoch_n + bs - 1) / bs;
    t->total_steps = cfg->train.max_steps > 0 ? cfg->train.max_steps : cfg->train.epochs * t->steps_per_epoch;
    const size_t per = t->block ? (size_t)t->block : 1; /* targets per sample */
    for (int i = 0; i < 2; i++) {
        t->slots[i].x = malloc((size_t)bs * (size_t)t->sample_elems * sizeof *t->slots[i].x);
        t->slots[i].y = malloc((size_t)bs * per * sizeof *t->slots[i].y);
        if (t->block && !(t->slots[i].ids = malloc((size_t)bs * per * sizeof *t->slots[i].ids)))
            return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
        if (t->train.t_cols > 0) t->slots[i].t = malloc((size_t)bs * (size_t)t->train.t_cols * sizeof *t->slots[i].t);
        if (!t->slots[i].x || !t->slots[i].y || (t->train.t_cols > 0 && !t->slots[i].t))
            return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
    }
    t->xbuf = t->slots[0].x;
    t->ybuf = t->slots[0].y;
    t->tbuf = t->slots[0].t;
    t->idsbuf = t->slots[0].ids;
    if (t->block) { /* window starts of a training batch and of an evaluation batch; one evaluation batch */
        const size_t ebs = (size_t)cfg->eval.batch_size;
        t->starts = malloc(((size_t)bs + ebs) * sizeof *t->starts);
        t->eval_ids = malloc(ebs * per * sizeof *t->eval_ids);
        t->eval_y = malloc(ebs * per * sizeof *t->eval_y);
        if (!t->starts || !t->eval_ids || !t->eval_y)
            return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
    }
    /* the order and scratch for sharding it (a callback run has none) */
    t->perm = malloc(2 * (size_t)(t->train.n > 0 ? t->train.n : 1) * sizeof *t->perm);
    t->order_n = epoch_n;
    t->p.epoch_samples = t->data.next_batch ? -1 : epoch_n; /* recorded in checkpoints: the cursor's bound */
    if (!t->perm) return tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
    if (tr_dist_is_main(&t->dist)) { /* metrics.csv follows metrics.jsonl record by record */
        tr_csv_sink_open(&t->csv, t->run_dir, warn_to_log, &t->log);
        t->log.on_record = on_record;
        t->log.record_ctx = t;
    }
    int rc = tr_dist_log_open(&t->dist, &t->log, cfg, t->run_dir, t->total_steps, err);
    if (rc) return rc;
    t->log_open = 1;
    t->log.memory_device = t->device; /* records carry the memory figures of the run's device */
    trs_model_param_count(t->model, &t->sum.params);
    tr_log_message(&t->log, "trainrun %s: %lld parameters, %lld train / %lld val / %lld test samples, %lld steps -> %s",
                   TR_VERSION, (long long)t->sum.params, (long long)t->train.n, (long long)t->val.n,
                   (long long)t->test.n, (long long)t->total_steps, t->run_dir);
    int intra = 0, inter = 0, blas = 0;
    trs_get_threads(&intra, &inter, &blas);
    char device[32];
    tr_device_name(&t->device, device, sizeof device);
    tr_log_message(&t->log, "device %s; threads: %d intra-op, %d inter-op, BLAS %d%s; malloc thresholds %s; batch "
                   "prefetch %s", device, intra, inter, blas, blas < 0 ? " (unknown BLAS)" : "",
                   t->malloc_tuned ? "pinned" : "glibc's", cfg->data.prefetch ? "on" : "off");
    /* through the log, not stderr: an embedding program's log function gets it like every other line */
    if (t->malloc_warning[0]) tr_log_message(&t->log, "warning: %s", t->malloc_warning);
    if (cfg->schedule.warmup_steps > t->total_steps)
        tr_log_message(&t->log, "warning: schedule.warmup_steps (%lld) is longer than the run (%lld steps): the lr "
                                "never reaches optim.lr", (long long)cfg->schedule.warmup_steps,
                       (long long)t->total_steps);
    if (t->dist.world_size > 1)
        tr_log_message(&t->log, "%d ranks: batch %lld per rank, %lld global; %lld of %lld samples per rank and epoch",
                       t->dist.world_size, (long long)bs, (long long)bs * t->dist.world_size, (long long)epoch_n,
                       (long long)t->train.n);
    return TR_OK;
}

static int open_locked(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    int rc = tr_config_validate(cfg, err);
    if (!rc) rc = tr_dist_open(&t->dist, cfg, err);
    if (!rc) rc = tr_device_resolve(cfg, &t->device, err); /* before any data is read: refused at once */
    if (!rc) rc = tr_setup_threads(cfg, &t->malloc_tuned, t->malloc_warning, sizeof t->malloc_warning, err);
    if (!rc) rc = setup_data(t, err);
    if (!rc) rc = setup_model(t, err);
    if (!rc) rc = setup_selection(t, err);
    if (!rc && tr_dist_is_main(&t->dist)) rc = setup_run_dir(t, err);
    if (!rc && tr_dist_is_main(&t->dist)) rc = setup_vocab(t, err);
    if (!rc && tr_dist_is_main(&t->dist)) rc = write_run_files(t, 0, err);
    rc = tr_dist_agree(&t->dist, rc, err); /* one rank's set-up error stops every rank */
    if (!rc) rc = tr_dist_share_paths(&t->dist, t->run_dir, t->resume_from, err);
    if (!rc) rc = tr_watchdog_init(&t->wd, cfg, tr_device_memory_total(&t->device), err);
    if (!rc) apply_cache_limit(t);
    if (!rc) rc = setup_loop(t, err);
    if (!rc) rc = restore(t, err);
    if (!rc) rc = tr_dist_sync_model(&t->dist, t->model, err);
    if (!rc && t->dist.pg) trs_dist_stats(t->dist.pg, &t->allreduce0, NULL, NULL, NULL);
    if (rc) {
        t->ended = t->finished = 1;
        return t->rc = rc;
    }
    if (t->resume_from[0] && run_complete(t)) {
        if (t->p.sel.es.stopped)
            tr_log_message(&t->log, "the run is already complete: early stopping ended it at step %lld (%s did not "
                                    "improve). Nothing to train; continue it with early_stopping.monitor= (off) or "
                                    "another early_stopping.monitor, or set another run.name for a new run",
                           (long long)t->p.step, t->p.sel.es_metric);
        else
            tr_log_message(&t->log, "the run is already complete (step %lld of %lld): nothing to train. Raise "
                                    "train.max_steps or train.epochs to continue it, or set another run.name for a "
                                    "new run", (long long)t->p.step, (long long)t->total_steps);
        t->sum.already_complete = 1;
        t->log_open = 0; /* leave its summary.json and metrics as they are */
        tr_log_close(&t->log);
        t->ended = t->finished = 1;
        return TR_OK;
    }
    if (t->resume_from[0] && tr_dist_is_main(&t->dist)) rc = write_run_files(t, 1, err);
    if (!rc) rc = open_trace(t, err);
    if (rc) {
        t->ended = t->finished = 1;
        return t->rc = rc;
    }
    if ((rc = start_loader(t, err))) {
        t->ended = t->finished = 1;
        return t->rc = rc;
    }
    t->elapsed0 = t->p.elapsed;
    t->log.step0 = t->p.step; /* the progress line's ETA counts this process's pace */
    t->log.elapsed0 = t->p.elapsed;
    t->t_start = now_s(t);
    t->win_t0 = now_s(t);
    t->lr = scheduled_lr(t);
    return TR_OK;
}

int tr_run_open(const tr_config *cfg, const tr_run_data *data, tr_run_state **out, tr_error *err)
{
    trainer *t = calloc(1, sizeof *t);
    *out = t;
    if (!t) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    t->cfg = cfg;
    t->last_ckpt_step = -1;
    t->sum.final_reserved_bytes = -1;
    snprintf(t->sum.device, sizeof t->sum.device, "%s", cfg->device);
    if (data) t->data = *data;
    t->log.sink = t->data.log; /* before any message: set-up warnings go there too */
    t->log.clock = t->data.clock;
    tr_torch_enter(NULL, 0);
    int rc = open_locked(t, err);
    if (!rc && !t->ended) {
        /* From here on the run's generator lives in t->rng while other runs hold the lock. */
        trs_rng_state_size(&t->rng_size);
        t->rng = malloc(t->rng_size);
        if (!t->rng) rc = tr_error_set(err, TR_E_RUNTIME, "out of memory");
        else trs_rng_get_state(t->rng, t->rng_size);
        if (rc) t->ended = t->finished = 1, t->rc = rc;
    }
    tr_torch_leave(NULL, 0);
    return rc;
}

/* A stop asked for by a signal (tr_request_stop) or by the caller (tr_run_request_stop): ends the loop here. */
static int stop_wanted(trainer *t)
{
    /* several ranks stop at the step they agreed on (agree_on_step) */
    if (t->dist.pg ? !(t->flags & TR_DIST_STOP) : !stop_requested && !t->stop) return 0;
    t->sum.stopped = 1;
    tr_log_message(&t->log, "stop requested: stopping after step %lld", (long long)t->p.step);
    return 1;
}

/* One optimizer step: the batch, the scheduled lr, the train step (only scalars come back). */
static int train_one_step(trainer *t, tr_error *err)
{
    trs_batch b;
    int rc = next_batch(t, &b, err);
    if (rc) return rc;
    t->lr = scheduled_lr(t);
    if (trs_optimizer_set_lr(t->opt, t->lr) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "step %lld: lr %g: %s", (long long)t->p.step + 1, t->lr,
                            trs_optimizer_errmsg(t->opt));
    trs_step_result r;
    const double s0 = now_s(t);
    const trs_status st = trs_train_step(t->model, t->opt, &b, &t->step_opts, &r);
    if (st != TRS_OK)
        return tr_error_set(err, tr_dist_code(st), "step %lld: %s", (long long)t->p.step + 1,
                            trs_model_errmsg(t->model));
    if ((rc = agree_on_step(t, &r, err))) return rc;
    t->p.step_seconds += now_s(t) - s0;
    t->step_seconds_here += now_s(t) - s0;
    accumulate(t, &r, t->lr);
    return update_ema(t, err);
}

static int step_locked(trainer *t, tr_error *err)
{
    if (run_complete(t) || t->sum.watchdog_stopped || stop_wanted(t)) {
        t->ended = 1;
        return TR_RUN_DONE;
    }
    const tr_config *cfg = t->cfg;
    int rc = train_one_step(t, err);
    if (!rc && (t->p.step % cfg->log.every_steps == 0 || t->p.step == t->total_steps)) log_window(t, 0);
    if (!rc && eval_due(t)) rc = validate(t, err);
    if (!rc && watchdog_stop(t, watch_memory(t))) {
        t->sum.watchdog_stopped = 1;
        return TR_OK; /* no checkpoint_due save: tr_run_finish saves the watchdog's checkpoint */
    }
    if (!rc) rc = settle_checkpoint(t, 0, err); /* a background save that has finished: its record, or error */
    const char *why = rc ? NULL : t->best_due ? "best" : checkpoint_due(t);
    if (why) rc = save_checkpoint(t, why, 0, err);
    if (rc) t->ended = 1;
    else tr_io_fault_step_end(t->p.step); /* tests: TRAINRUN_TEST_KILL_AT_STEP */
    return t->rc = rc;
}

int tr_run_step(tr_run_state *t, tr_error *err)
{
    if (t->ended) return t->rc ? t->rc : TR_RUN_DONE;
    if (tr_torch_enter(t->rng, t->rng_size)) {
        t->ended = 1;
        return t->rc = tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
    }
    const int rc = step_locked(t, err);
    tr_torch_leave(t->rng, t->rng_size);
    return rc;
}

static int finish_locked(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    tr_summary *sum = &t->sum;
    const int early = sum->stopped || sum->watchdog_stopped;
    /* The checkpoint keeps the open log window, so a resumed run's records equal an uninterrupted run's; the
     * partial window is logged after it, for the people watching this process. */
    int rc = TR_OK;
    report_growth(t, sum->watchdog_stopped ? "limit" : "end", 0); /* the loop's last word on memory */
    if (cfg->checkpoint.at_end || early)
        rc = save_checkpoint(t, sum->watchdog_stopped ? "watchdog" : sum->stopped ? "signal" : "end", 1, err);
    else
        rc = settle_checkpoint(t, 1, err); /* the last interval save, still in flight */
    if (rc) goto out;
    if (early) log_window(t, 1);
    else if (t->p.sel.es.stopped) log_window(t, 0); /* early stopping ended the run here: its last window, whole */
    sum->train_seconds = elapsed(t);
    sum->samples_per_s = t->p.step_seconds > 0 ? (double)t->p.samples_total / t->p.step_seconds : 0.0;
    if (t->dist.pg) {
        trs_dist_stats(t->dist.pg, &sum->allreduce_seconds, NULL, NULL, NULL);
        sum->allreduce_seconds -= t->allreduce0; /* the loop's: set-up's agreement waits for the slowest rank */
        sum->allreduce_share = t->step_seconds_here > 0 ? sum->allreduce_seconds / t->step_seconds_here : 0.0;
    }
    tr_memory m;
    if (tr_memory_read(&t->device, &m) == TR_OK) {
        sum->final_bytes = m.allocated;
        sum->peak_bytes = m.peak;
        sum->final_reserved_bytes = m.reserved;
        sum->final_rss_bytes = m.rss;
    }
    trs_memory_stats ms; /* the process's: the CPU allocator's peak reserved, the peak resident set */
    if (trs_memory_stats_get(&ms) == TRS_OK) {
        sum->peak_reserved_bytes = t->device.cuda ? -1 : ms.peak_reserved_bytes;
        sum->peak_rss_bytes = ms.peak_rss_bytes;
    }
    if (t->trace && !early) {
        uint32_t crc = 0;
        double abs_sum = 0;
        trs_model_digest(t->model, TRS_DIGEST_PARAMS, &crc, &abs_sum, NULL);
        tr_trace_write_final(t->trace, crc, abs_sum);
    }
    if (!early && t->test.n > 0) {
        rc = evaluate(t, &t->test, "test", &sum->test_loss, &sum->test_accuracy, err);
        if (rc) goto out;
        sum->has_test = 1;
        sum->test_samples = t->test.n;
    }
    draw_curves(t);
    rc = sum->watchdog_stopped ? TR_E_WATCHDOG : sum->stopped ? TR_E_SIGNAL : TR_OK;
out:
    conclude(t, rc, err);
    return t->rc = rc;
}

int tr_run_finish(tr_run_state *t, tr_error *err)
{
    if (t->finished) return t->rc;
    t->finished = t->ended = 1;
    if (tr_torch_enter(t->rng, t->rng_size)) {
        const int rc = tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
        conclude(t, rc, err);
        return t->rc = rc;
    }
    const int rc = finish_locked(t, err);
    tr_torch_leave(t->rng, t->rng_size);
    return rc;
}

void tr_run_request_stop(tr_run_state *t) { t->stop = 1; }

void tr_run_set_event_hook(tr_run_state *t, tr_run_event_fn fn, void *ctx)
{
    t->on_event = fn;
    t->event_ctx = ctx;
}

const tr_summary *tr_run_summary(const tr_run_state *t) { return &t->sum; }

int64_t tr_run_total_steps(const tr_run_state *t) { return t->total_steps; }

int tr_run_close(tr_run_state *t, int rc, const tr_error *err, tr_summary *sum_out)
{
    if (!t) {
        if (sum_out) memset(sum_out, 0, sizeof *sum_out);
        return rc;
    }
    conclude(t, rc, err);
    tr_torch_enter(NULL, 0);
    teardown(t);
    tr_torch_leave(NULL, 0);
    if (sum_out) *sum_out = t->sum;
    free(t);
    return rc;
}

int tr_run_memory_growth(tr_run_state *t, tr_mem_growth **out, size_t *n, tr_error *err)
{
    *out = NULL;
    *n = 0;
    if (!t->mem_base.taken) return TR_OK;
    tr_memsnap cur = {0};
    const int rc = tr_memsnap_take(&cur, t->p.step, err);
    if (rc) return rc;
    int oom = 0;
    *n = tr_memsnap_diff(&t->mem_base, &cur, out, &oom);
    tr_memsnap_free(&cur);
    return oom ? tr_error_set(err, TR_E_RUNTIME, "memory growth: out of memory") : TR_OK;
}

int tr_run(const tr_config *cfg, tr_summary *sum, tr_error *err)
{
    stop_requested = 0;
    tr_run_state *run = NULL;
    int rc = tr_run_open(cfg, NULL, &run, err);
    while (rc == TR_OK) rc = tr_run_step(run, err);
    if (rc == TR_RUN_DONE) rc = tr_run_finish(run, err);
    return tr_run_close(run, rc, err, sum);
}
