/*
 * model_core.c -- the model core (model_core.h): the libtorch lock, the process-wide settings, the model, its
 * optimizer and EMA, and the generator state, for a run and for the embedding API's trainer alike.
 */
#include "model_core.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dist.h"
#include "schedule.h"

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

/* Threads: 0 = auto = 1 intra-op thread with BLAS pinned to 1: libtorch's OpenMP threads and a multithreaded
 * OpenBLAS each start their own threads, which then contend for the same cores (bench/threads.md, bench/HISTORY.md).
 * malloc: glibc's thresholds pinned (trs_set_malloc_thresholds) unless the user set malloc tunables in
 * GLIBC_TUNABLES, so a step's large blocks are reused instead of mapped and faulted in anew on every step
 * (bench/RESULTS.md, "malloc"). */
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

/* The body of tr_core_build (model_core.h). */
static int build_model(const tr_config *cfg, const tr_model_spec *spec, const char *path, const int64_t *input_shape,
                       int input_ndim, trs_model **model, trs_optimizer **opt, trs_step_options *step_opts,
                       tr_error *err)
{
    /* Seed right before the parameters are initialised, as a PyTorch script does before building its model (a
     * TorchScript archive draws nothing unless model.init_method draws its weights). */
    if (trs_manual_seed(cfg->seed) != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "seeding: %s", trs_last_error());
    if (!spec) {
        struct stat st;
        if (stat(path, &st) != 0) /* said as it is, before the shim's reading of what is not there */
            return tr_error_set(err, TR_E_CONFIG, "model.torchscript: %s: %s", path, strerror(errno));
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
    int rc = tr_device_resolve(cfg->device, &dev, err);
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
        /* Adam/AdamW: one fused pass per parameter, bit for bit torch::optim's step (the shim uses it only where
         * that holds, and falls back to torch::optim's own step otherwise) */
        .fused = 1,
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

int tr_core_build(tr_core *c, const tr_config *cfg, const tr_model_spec *spec, const char *path,
                  const int64_t *input_shape, int input_ndim, tr_error *err)
{
    return build_model(cfg, spec, path, input_shape, input_ndim, &c->model, &c->opt, &c->step_opts, err);
}

int tr_core_add_ema(tr_core *c, const tr_config *cfg, tr_error *err)
{
    if (!cfg->ema.enabled) return TR_OK;
    const trs_ema_options eo = {.decay = cfg->ema.decay, .warmup = cfg->ema.warmup,
                                .buffers_average = cfg->ema.buffers == TR_EMA_BUFFERS_AVERAGE};
    if (trs_ema_create(c->model, &eo, &c->ema) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "ema: %s", trs_model_errmsg(c->model));
    return TR_OK;
}

int tr_core_keep_rng(tr_core *c)
{
    trs_rng_state_size(&c->rng_size);
    c->rng = malloc(c->rng_size);
    return c->rng ? 0 : -1;
}

int tr_core_open(tr_core *c, const tr_config *cfg, const tr_model_spec *spec, const char *path,
                 const int64_t *input_shape, int input_ndim, int nomem, tr_error *err)
{
    tr_torch_enter(NULL, 0);
    int rc = tr_setup_threads(cfg, &c->malloc_tuned, NULL, 0, err);
    if (!rc) rc = tr_core_build(c, cfg, spec, path, input_shape, input_ndim, err);
    if (!rc && tr_core_keep_rng(c)) rc = tr_error_set(err, nomem, "out of memory");
    tr_torch_leave(c->rng, c->rng_size);
    return rc;
}

/* A step call's failure (model_core.h, "The step calls"): "<what>: <shim message>" with the runtime's code. */
static int step_failed(trs_status st, const char *shim_msg, tr_error *err, const char *what, va_list ap)
{
    char name[512];
    vsnprintf(name, sizeof name, what, ap);
    return tr_error_set(err, tr_dist_code(st), "%s: %s", name, shim_msg);
}

/* The end of every step call: TR_OK, or the failure worded from the call's `what`, ... (formatted only then). */
#define STEP_RETURN(s, shim_msg)                                      \
    do {                                                              \
        if ((s) == TRS_OK) return TR_OK;                              \
        va_list ap_;                                                  \
        va_start(ap_, what);                                          \
        const int rc_ = step_failed((s), (shim_msg), err, what, ap_); \
        va_end(ap_);                                                  \
        return rc_;                                                   \
    } while (0)

int tr_core_set_lr(tr_core *c, double lr, trs_status *st, tr_error *err, const char *what, ...)
{
    const trs_status s = trs_optimizer_set_lr(c->opt, lr);
    if (st) *st = s;
    STEP_RETURN(s, trs_optimizer_errmsg(c->opt));
}

int tr_core_train_step(tr_core *c, const trs_batch *b, trs_step_result *r, trs_status *st, tr_error *err,
                       const char *what, ...)
{
    const trs_status s = trs_train_step(c->model, c->opt, b, &c->step_opts, r);
    if (st) *st = s;
    STEP_RETURN(s, trs_model_errmsg(c->model));
}

int tr_core_eval_step(tr_core *c, trs_ema *ema, const trs_batch *b, trs_step_result *r, trs_class_counts *counts,
                      trs_status *st, tr_error *err, const char *what, ...)
{
    const trs_status s = trs_eval_batch(c->model, ema, b, &c->step_opts, r, counts);
    if (st) *st = s;
    STEP_RETURN(s, trs_model_errmsg(c->model));
}

int tr_core_evaluate(tr_core *c, trs_ema *ema, int64_t samples, int64_t batch, tr_core_batch_fn fn, void *ctx,
                     tr_metrics *m, const char *split, trs_status *st, tr_error *err)
{
    if (st) *st = TRS_OK;
    tr_metrics_reset(m);
    for (int64_t i = 0; i < samples; i += batch) {
        const int64_t n = i + batch <= samples ? batch : samples - i;
        trs_batch b;
        trs_step_result r;
        int rc = fn(ctx, i, n, &b, err);
        if (!rc) rc = tr_core_eval_step(c, ema, &b, &r, &m->batch, st, err, "%s evaluation%s", split,
                                        ema ? " (EMA weights)" : "");
        if (rc) return rc;
        tr_metrics_add(m, &r);
    }
    return TR_OK;
}

int tr_core_update_ema(tr_core *c, int reset, tr_error *err, const char *what, ...)
{
    const trs_status s = reset ? trs_ema_reset(c->ema) : trs_ema_update(c->ema);
    STEP_RETURN(s, trs_ema_errmsg(c->ema));
}

int tr_core_ema_due(const tr_core *c, const tr_config *cfg, int64_t step, int *fresh)
{
    const int64_t start = cfg->ema.start_step;
    if (fresh) *fresh = step == start && start > 0;
    return c->ema && ((step == start && start > 0) || (step > start && (step - start) % cfg->ema.every_steps == 0));
}

void tr_core_phase_change(const tr_core *c)
{
    trs_memory_empty_cache(NULL);
    if (c->device.cuda) trs_cuda_empty_cache();
}

void tr_core_close(tr_core *c)
{
    if (!c) return;
    trs_ema_free(c->ema);
    trs_optimizer_free(c->opt);
    trs_model_free(c->model);
    free(c->rng);
    memset(c, 0, sizeof *c);
}

const char *tr_core_divergence_hint(const tr_config *cfg, double lr, char *buf, size_t n)
{
    snprintf(buf, n, "Try a lower optim.lr (%g now) or gradient clipping, optim.grad_clip_norm (%s)", lr,
             cfg->optim.grad_clip_norm > 0 ? "already on: lower it" : "e.g. 1.0");
    return buf;
}
