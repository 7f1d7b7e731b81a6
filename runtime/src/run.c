/*
 * run.c -- the training loop. tr_run() reads top to bottom: set up, then for each step take a batch, set the
 * scheduled lr, take one train step (only scalars come back), log, and evaluate when due; finally test and report.
 */
#include "run.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "log.h"
#include "model_spec.h"
#include "schedule.h"
#include "trainrun_shim.h"
#include "watchdog.h"

static volatile sig_atomic_t stop_requested;

void tr_request_stop(void) { stop_requested = 1; }

/** Everything a run holds; allocated in setup, freed in teardown. */
typedef struct trainer {
    const tr_config *cfg;
    tr_dataset train, val, test;
    trs_model *model;
    trs_optimizer *opt;
    trs_step_options step_opts;
    int batch_ndim;             /* 2 for a [D]-input model, 4 for [C, H, W]                 */
    int64_t sample_elems;       /* floats per sample                                         */
    float *xbuf;                /* [batch_size, ...] host batch, allocated once              */
    int64_t *ybuf;              /* [batch_size]                                              */
    int64_t *perm;              /* the current epoch's order                                 */
    int64_t steps_per_epoch, total_steps;
    int64_t step, epoch, pos;   /* steps done, current epoch (0-based), position in its order */
    int64_t evals_done;         /* validation passes so far                                  */
    char run_dir[TR_PATH_MAX];
    tr_log log;
    tr_watchdog wd;
} trainer;

/* ---------------------------------------------------------------------------------------------------- set-up */

/* Threads: 0 = auto = 1 intra-op thread with BLAS pinned to 1. Measured on 2-core machines, libtorch with 2 OpenMP
 * threads plus multithreaded OpenBLAS ran a small MLP 2.7x slower than 1 thread (DESIGN.md). */
static int setup_threads(const tr_config *cfg, tr_error *err)
{
    const int intra = cfg->threads > 0 ? cfg->threads : 1;
    if (trs_set_threads(intra, cfg->interop_threads, 1) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "setting threads: %s", trs_last_error());
    if (cfg->deterministic && trs_set_deterministic(1) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "deterministic mode: %s", trs_last_error());
    return TR_OK;
}

static int setup_data(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char root[TR_PATH_MAX], img[2 * TR_PATH_MAX], lbl[2 * TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->data.root, root);
    snprintf(img, sizeof img, "%s/%s", root, cfg->data.train_images);
    snprintf(lbl, sizeof lbl, "%s/%s", root, cfg->data.train_labels);
    int rc = tr_idx_load(img, lbl, cfg->data.train_subset, &t->train, err);
    if (rc) return rc;
    if (cfg->eval.test_at_end) {
        snprintf(img, sizeof img, "%s/%s", root, cfg->data.test_images);
        snprintf(lbl, sizeof lbl, "%s/%s", root, cfg->data.test_labels);
        if ((rc = tr_idx_load(img, lbl, cfg->data.test_subset, &t->test, err))) return rc;
        if ((rc = tr_dataset_normalize(&t->test, cfg->data.mean, cfg->data.std, cfg->data.n_mean, err))) return rc;
    }
    if ((rc = tr_dataset_normalize(&t->train, cfg->data.mean, cfg->data.std, cfg->data.n_mean, err))) return rc;
    if (cfg->data.val_size > 0 && (rc = tr_dataset_split(&t->train, cfg->data.val_size, cfg->seed, &t->val, err)))
        return rc == TR_E_RUNTIME ? tr_error_set(err, TR_E_CONFIG, "data.val_size: %s", err->msg) : rc;
    if (t->train.n < cfg->train.batch_size)
        return tr_error_set(err, TR_E_CONFIG, "train.batch_size: %lld is larger than the %lld training samples",
                            (long long)cfg->train.batch_size, (long long)t->train.n);
    return TR_OK;
}

static int setup_model(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char path[TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->model.spec, path);
    tr_model_spec spec = {0};
    int rc = tr_model_spec_load(path, &spec, err);
    if (rc) return rc;

    const tr_dataset *d = &t->train;
    t->sample_elems = d->c * d->h * d->w;
    if (spec.input_ndim == 1) {
        t->batch_ndim = 2;
        if (spec.input_shape[0] != t->sample_elems)
            rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld] does not match the data's %lld features per sample",
                              path, (long long)spec.input_shape[0], (long long)t->sample_elems);
    } else {
        t->batch_ndim = 4;
        if (spec.input_shape[0] != d->c || spec.input_shape[1] != d->h || spec.input_shape[2] != d->w)
            rc = tr_error_set(err, TR_E_CONFIG, "%s: input: [%lld, %lld, %lld] does not match the data's [%lld, %lld, %lld]",
                              path, (long long)spec.input_shape[0], (long long)spec.input_shape[1],
                              (long long)spec.input_shape[2], (long long)d->c, (long long)d->h, (long long)d->w);
    }
    /* Seed right before the parameters are initialised, as a PyTorch script does before building its model. */
    if (!rc && trs_manual_seed(cfg->seed) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "seeding: %s", trs_last_error());
    if (!rc && trs_model_create(spec.layers, spec.n_layers, spec.input_shape, spec.input_ndim, &t->model) != TRS_OK)
        rc = tr_error_set(err, TR_E_CONFIG, "%s: %s", path, trs_last_error());
    tr_model_spec_free(&spec);
    if (rc) return rc;

    int64_t out_dim = 0;
    trs_model_output_dim(t->model, &out_dim);
    if (out_dim < t->train.num_classes)
        return tr_error_set(err, TR_E_CONFIG, "%s: the model has %lld outputs but the data has %lld classes", path,
                            (long long)out_dim, (long long)t->train.num_classes);

    static const trs_optim_kind kinds[] = {[TR_OPTIM_SGD] = TRS_OPT_SGD, [TR_OPTIM_ADAM] = TRS_OPT_ADAM,
                                           [TR_OPTIM_ADAMW] = TRS_OPT_ADAMW};
    const trs_optim_options o = {
        .kind = kinds[cfg->optim.name],
        .lr = tr_schedule_lr(cfg, 0, 1),
        .momentum = cfg->optim.momentum,
        .dampening = cfg->optim.dampening,
        .weight_decay = cfg->optim.weight_decay,
        .nesterov = cfg->optim.nesterov,
        .beta1 = cfg->optim.beta1,
        .beta2 = cfg->optim.beta2,
        .eps = cfg->optim.eps,
        .amsgrad = cfg->optim.amsgrad,
    };
    if (trs_optimizer_create(t->model, &o, &t->opt) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "optim: %s", trs_model_errmsg(t->model));
    if (cfg->debug.leak_bytes_per_step > 0 && trs_debug_set_leak(t->model, cfg->debug.leak_bytes_per_step) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "debug.leak_bytes_per_step: %s", trs_model_errmsg(t->model));
    t->step_opts = (trs_step_options){.loss = TRS_LOSS_CROSS_ENTROPY,
                                      .label_smoothing = cfg->train.label_smoothing,
                                      .grad_clip_norm = cfg->optim.grad_clip_norm};
    return TR_OK;
}

/* mkdir -p */
static int make_dirs(const char *path, tr_error *err)
{
    char buf[TR_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        const char c = *p;
        if (c == '/' || c == '\0') {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create directory: %s", buf, strerror(errno));
            *p = c;
        }
        if (c == '\0') break;
    }
    return TR_OK;
}

/* run.dir/run.name, or run.dir/<config stem>-<UTC timestamp>[-k] for a fresh directory; then config.yaml. */
static int setup_run_dir(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char dir[TR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->run.dir);
    if (cfg->run.name[0]) {
        snprintf(t->run_dir, sizeof t->run_dir, "%.*s/%s", 700, dir, cfg->run.name);
    } else {
        const char *base = strrchr(cfg->source, '/');
        base = base ? base + 1 : (cfg->source[0] ? cfg->source : "run");
        const char *dot = strrchr(base, '.');
        const int stem_len = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
        char stamp[32];
        const time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(t->run_dir, sizeof t->run_dir, "%.*s/%.*s-%s", 700, dir, stem_len > 200 ? 200 : stem_len, base, stamp);
        struct stat st;
        for (int k = 2; stat(t->run_dir, &st) == 0 && k < 1000; k++)
            snprintf(t->run_dir, sizeof t->run_dir, "%.*s/%.*s-%s-%d", 700, dir, stem_len > 200 ? 200 : stem_len, base,
                     stamp, k);
    }
    int rc = make_dirs(t->run_dir, err);
    if (rc) return rc;

    /* The effective config, written under a temporary name and renamed into place. */
    char path[TR_PATH_MAX + 32], tmp[TR_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/config.yaml", t->run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open for writing: %s", tmp, strerror(errno));
    rc = tr_config_write_yaml(cfg, f);
    if (fclose(f) != 0 || rc != TR_OK || rename(tmp, path) != 0) {
        remove(tmp);
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot write the effective config", path);
    }
    return TR_OK;
}

static void teardown(trainer *t)
{
    tr_log_close(&t->log);
    tr_watchdog_free(&t->wd);
    trs_optimizer_free(t->opt);
    trs_model_free(t->model);
    tr_dataset_free(&t->train);
    tr_dataset_free(&t->val);
    tr_dataset_free(&t->test);
    free(t->xbuf);
    free(t->ybuf);
    free(t->perm);
}

/* ---------------------------------------------------------------------------------------------------- steps */

static trs_batch batch_view(const trainer *t, int64_t n)
{
    trs_batch b = {.x = t->xbuf, .y = t->ybuf, .ndim = t->batch_ndim};
    b.shape[0] = n;
    if (t->batch_ndim == 2) {
        b.shape[1] = t->sample_elems;
    } else {
        b.shape[1] = t->train.c;
        b.shape[2] = t->train.h;
        b.shape[3] = t->train.w;
    }
    return b;
}

/* Fill the batch buffers with the next training batch; starts a new epoch (new order) when one is used up. */
static int64_t next_batch(trainer *t)
{
    const int64_t bs = t->cfg->train.batch_size;
    if (t->pos >= t->steps_per_epoch * bs || t->pos >= t->train.n) {
        t->epoch++;
        t->pos = 0;
    }
    if (t->pos == 0) {
        if (t->cfg->data.shuffle) tr_permutation(t->cfg->seed, (uint64_t)t->epoch, t->train.n, t->perm);
        else for (int64_t i = 0; i < t->train.n; i++) t->perm[i] = i;
    }
    const int64_t n = t->pos + bs <= t->train.n ? bs : t->train.n - t->pos;
    tr_dataset_gather(&t->train, t->perm + t->pos, n, t->xbuf, t->ybuf);
    t->pos += n;
    return n;
}

static int epoch_done(const trainer *t)
{
    return t->pos >= t->steps_per_epoch * t->cfg->train.batch_size || t->pos >= t->train.n;
}

/* Evaluate a whole data set in order, in eval-batch-sized chunks; counts are accumulated here in C. */
static int evaluate(trainer *t, const tr_dataset *ds, const char *split, double *loss_out, double *acc_out,
                    tr_error *err)
{
    const double t0 = tr_now();
    const int64_t ebs = t->cfg->eval.batch_size;
    const size_t feat = (size_t)t->sample_elems;
    double loss_sum = 0.0;
    int64_t correct = 0, samples = 0;
    for (int64_t i = 0; i < ds->n; i += ebs) {
        const int64_t n = i + ebs <= ds->n ? ebs : ds->n - i;
        trs_batch b = batch_view(t, n);
        b.x = ds->x + (size_t)i * feat; /* contiguous rows: no gather needed */
        b.y = ds->y + i;
        trs_step_result r;
        if (trs_eval_step(t->model, &b, NULL, &r) != TRS_OK)
            return tr_error_set(err, TR_E_RUNTIME, "%s evaluation: %s", split, trs_model_errmsg(t->model));
        loss_sum += r.loss * (double)r.samples;
        correct += r.correct;
        samples += r.samples;
    }
    const double loss = samples ? loss_sum / (double)samples : 0.0;
    tr_log_eval(&t->log, split, t->step, t->epoch, loss, correct, samples, tr_now() - t0);
    if (loss_out) *loss_out = loss;
    if (acc_out) *acc_out = samples ? (double)correct / (double)samples : 0.0;
    return TR_OK;
}

/* Warm-up is over once the lazily allocated state exists: optimizer state (first step), evaluation buffers (first
 * validation pass, when one is configured) -- and the configured number of steps has passed. */
static int warmed_up(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    const int val_configured = t->val.n > 0 && (cfg->eval.every_steps > 0 || cfg->eval.every_epoch);
    return t->step >= 1 && t->step >= cfg->watchdog.warmup_steps && (!val_configured || t->evals_done > 0);
}

/* Sample allocated bytes when due and report what the watchdog sees. Returns 1 when the run must stop. */
static int watch_memory(trainer *t, tr_summary *sum)
{
    const tr_config *cfg = t->cfg;
    if (!cfg->watchdog.enabled || t->step % cfg->watchdog.every_steps != 0) return 0;
    trs_memory_stats m;
    if (trs_memory_stats_get(&m) != TRS_OK) return 0;
    tr_watchdog_report r;
    const tr_watchdog_event ev = tr_watchdog_sample(&t->wd, t->step, m.allocated_bytes, warmed_up(t), &r);
    sum->growth_per_step = r.growth_per_step;
    if (ev == TR_WD_EV_NONE) return 0;
    if (ev == TR_WD_EV_BASELINE) {
        sum->baseline_bytes = r.baseline;
        sum->baseline_step = r.step;
    }
    tr_log_watchdog(&t->log, &r);
    if (ev == TR_WD_EV_LIMIT && cfg->watchdog.action == TR_WD_CHECKPOINT_EXIT) {
        tr_log_message(&t->log, "watchdog: stopping at step %lld (watchdog.action = checkpoint_exit)",
                       (long long)t->step);
        return 1;
    }
    return 0;
}

static int write_summary(const tr_summary *s, tr_error *err)
{
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", s->run_dir);
    FILE *f = fopen(path, "w");
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open for writing: %s", path, strerror(errno));
    fprintf(f,
            "{\"params\":%lld,\"steps\":%lld,\"epochs\":%lld,\"train_seconds\":%.6g,\"samples_per_s\":%.6g,"
            "\"last_loss\":%.17g,\"stopped\":%s,\"watchdog_stopped\":%s,\"baseline_bytes\":%lld,"
            "\"baseline_step\":%lld,\"final_bytes\":%lld,\"peak_bytes\":%lld,\"growth_per_step\":%.6g",
            (long long)s->params, (long long)s->steps, (long long)s->epochs, s->train_seconds, s->samples_per_s,
            s->last_loss, s->stopped ? "true" : "false", s->watchdog_stopped ? "true" : "false",
            (long long)s->baseline_bytes, (long long)s->baseline_step, (long long)s->final_bytes,
            (long long)s->peak_bytes, s->growth_per_step);
    if (s->has_val) fprintf(f, ",\"val_loss\":%.17g,\"val_accuracy\":%.17g", s->val_loss, s->val_accuracy);
    if (s->has_test)
        fprintf(f, ",\"test_loss\":%.17g,\"test_accuracy\":%.17g,\"test_samples\":%lld", s->test_loss,
                s->test_accuracy, (long long)s->test_samples);
    fputs("}\n", f);
    return fclose(f) == 0 ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "%s: write failed", path);
}

/* ---------------------------------------------------------------------------------------------------- the run */

int tr_run(const tr_config *cfg, tr_summary *sum_out, tr_error *err)
{
    trainer t = {.cfg = cfg};
    tr_summary sum = {0};
    int rc = tr_config_validate(cfg, err);
    if (!rc) rc = setup_threads(cfg, err);
    if (!rc) rc = setup_data(&t, err);
    if (!rc) rc = setup_model(&t, err);
    if (!rc) rc = setup_run_dir(&t, err);
    if (!rc) rc = tr_watchdog_init(&t.wd, cfg, tr_memory_available(), err);
    if (rc) goto out;

    const int64_t bs = cfg->train.batch_size;
    t.steps_per_epoch = cfg->train.drop_last ? t.train.n / bs : (t.train.n + bs - 1) / bs;
    t.total_steps = cfg->train.max_steps > 0 ? cfg->train.max_steps : cfg->train.epochs * t.steps_per_epoch;
    t.xbuf = malloc((size_t)bs * (size_t)t.sample_elems * sizeof *t.xbuf);
    t.ybuf = malloc((size_t)bs * sizeof *t.ybuf);
    t.perm = malloc((size_t)t.train.n * sizeof *t.perm);
    if (!t.xbuf || !t.ybuf || !t.perm) {
        rc = tr_error_set(err, TR_E_RUNTIME, "out of memory allocating batch buffers");
        goto out;
    }
    if ((rc = tr_log_open(&t.log, cfg, t.run_dir, t.total_steps, err))) goto out;
    trs_model_param_count(t.model, &sum.params);
    tr_log_message(&t.log, "trainrun %s: %lld parameters, %lld train / %lld val / %lld test samples, %lld steps -> %s",
                   TR_VERSION, (long long)sum.params, (long long)t.train.n, (long long)t.val.n, (long long)t.test.n,
                   (long long)t.total_steps, t.run_dir);

    const double t_start = tr_now();
    double step_seconds = 0.0, win_loss = 0.0, win_t0 = tr_now();
    int64_t win_correct = 0, win_samples = 0, win_steps = 0, samples_total = 0;
    t.epoch = 0;
    t.pos = 0;
    stop_requested = 0;
    for (t.step = 0; t.step < t.total_steps;) {
        const int64_t n = next_batch(&t);
        const double lr = tr_schedule_lr(cfg, t.step, t.total_steps);
        trs_optimizer_set_lr(t.opt, lr);
        const trs_batch b = batch_view(&t, n);
        trs_step_result r;
        const double s0 = tr_now();
        const trs_status st = trs_train_step(t.model, t.opt, &b, &t.step_opts, &r);
        step_seconds += tr_now() - s0;
        if (st != TRS_OK) {
            rc = tr_error_set(err, TR_E_RUNTIME, "step %lld: %s", (long long)t.step + 1, trs_model_errmsg(t.model));
            goto out;
        }
        t.step++;
        samples_total += r.samples;
        win_loss += r.loss;
        win_correct += r.correct;
        win_samples += r.samples;
        win_steps++;

        if (t.step % cfg->log.every_steps == 0 || t.step == t.total_steps) {
            const double now = tr_now();
            sum.last_loss = win_loss / (double)win_steps;
            tr_log_train(&t.log, t.step, t.epoch, sum.last_loss, (double)win_correct / (double)win_samples, lr,
                         (double)win_samples / (now - win_t0 > 0 ? now - win_t0 : 1e-9));
            win_loss = 0.0;
            win_correct = win_samples = win_steps = 0;
            win_t0 = tr_now();
        }
        const int eval_due = (cfg->eval.every_steps > 0 && t.step % cfg->eval.every_steps == 0) ||
                             (cfg->eval.every_epoch && epoch_done(&t));
        if (t.val.n > 0 && eval_due) {
            const double e0 = tr_now();
            if ((rc = evaluate(&t, &t.val, "val", &sum.val_loss, &sum.val_accuracy, err))) goto out;
            sum.has_val = 1;
            t.evals_done++;
            win_t0 += tr_now() - e0; /* the train window's rate leaves evaluation time out */
        }
        if (watch_memory(&t, &sum)) {
            sum.watchdog_stopped = 1;
            break;
        }
        if (stop_requested) {
            sum.stopped = 1;
            tr_log_message(&t.log, "stop requested: stopping after step %lld", (long long)t.step);
            break;
        }
    }
    sum.train_seconds = tr_now() - t_start;
    {
        trs_memory_stats m;
        if (trs_memory_stats_get(&m) == TRS_OK) {
            sum.final_bytes = m.allocated_bytes;
            sum.peak_bytes = m.peak_bytes;
        }
    }
    sum.samples_per_s = step_seconds > 0 ? (double)samples_total / step_seconds : 0.0;
    if (!sum.stopped && !sum.watchdog_stopped && t.test.n > 0) {
        if ((rc = evaluate(&t, &t.test, "test", &sum.test_loss, &sum.test_accuracy, err))) goto out;
        sum.has_test = 1;
        sum.test_samples = t.test.n;
    }
    rc = sum.watchdog_stopped ? TR_E_WATCHDOG : sum.stopped ? TR_E_SIGNAL : TR_OK;

out:
    sum.steps = t.step;
    sum.epochs = t.model ? t.epoch + 1 : 0;
    snprintf(sum.run_dir, sizeof sum.run_dir, "%s", t.run_dir);
    if (t.run_dir[0] && t.log.jsonl) {
        tr_error werr = {0};
        if (write_summary(&sum, &werr) && rc == TR_OK) {
            *err = werr;
            rc = werr.code;
        }
    }
    teardown(&t);
    if (sum_out) *sum_out = sum;
    return rc;
}
