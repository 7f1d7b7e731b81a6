/*
 * trainrun_trainer.c -- the embedding API's trainers (trainrun.h, trainers): the caller's own loop over the trainer
 * core (model_core.h) -- a step, a prediction, a save or load through the checkpoint code -- one call at a time,
 * and the run's guarantees as calls: the schedule (schedule.c), the EMA's rule (tr_core_ema_due), the checkpoint
 * policy's step and time intervals, model selection on the caller's figures (selection.c: top-k, plateau, early
 * stopping, as a run's). The trainer's memory and watchdog are in trainrun_trainer_memory.c, its run directory in
 * trainrun_trainer_dir.c, its log in trainrun_trainer_log.c, its data-parallel group in trainrun_trainer_dist.c.
 */
#include "trainrun_trainer_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "best.h"
#include "device.h"
#include "model_spec.h"
#include "run.h"
#include "schedule.h"
#include "sys.h"

/* Hand an event of the event path to the caller's callback as trainrun.h reports it (tr_api_event_of). Called with
 * the libtorch lock released, so the callback may call the library. */
void trainer_emit(trainrun_trainer *tr, const tr_event *e)
{
    trainrun_event ev;
    trainer_log_event(tr, e);
    if (tr->fn && tr_api_event_of(e, &ev)) tr->fn(tr->fn_ctx, &ev);
}

/* The checkpoint policy's hooks (ckpt_policy.h): the trainer's clock, its training seconds before the snapshot,
 * and the outcome of the save (the caller learns the path). */
static double trainer_ckpt_now(void *ctx) { return trainer_now(ctx); }

static int trainer_ckpt_prepare(void *ctx, tr_error *err)
{
    trainrun_trainer *tr = ctx;
    tr->p.elapsed = trainer_elapsed(tr);
    /* in a group: every rank's generator into the checkpoint (a collective: every rank saves at the same step) */
    return tr_dist_gather_rng(&tr->dist, &tr->p, tr->core.device.cuda ? tr->core.device.index : -1, err);
}

static int trainer_ckpt_saved(void *ctx, const tr_ckpt_saved *r, tr_error *err)
{
    trainrun_trainer *tr = ctx;
    const int rc = r->rc ? r->rc : r->prune_rc;
    if (rc && err) *err = r->err;
    snprintf(tr->saved_path, sizeof tr->saved_path, "%s", r->rc ? "" : r->path);
    tr->saved_bytes = r->rc ? 0 : r->bytes;
    tr->saving.announce = !r->rc; /* written: its event follows once the lock is released (trainer_announce) */
    tr->saving.step = r->step;
    if (!rc && (tr->monitors & TR_SEL_TOPK)) /* the directory names its best checkpoints (the set as of this one) */
        return tr_best_write(tr->save_dir, tr->cfg.checkpoint.monitor, tr->p.sel.topk_max, &tr->ckpt.saving.best, err);
    return rc;
}

/* The config's monitors, parsed (TRAINRUN_E_CONFIG naming the key): the figures are the caller's, so only an EMA
 * monitor without ema.enabled is refused beyond the name; the selection state starts empty (a load replaces it). */
static int trainer_monitors(trainrun_trainer *tr)
{
    const tr_config *cfg = &tr->cfg;
    const char *const keys[3] = {"checkpoint.monitor", "early_stopping.monitor", "schedule.monitor"};
    const char *const names[3] = {cfg->checkpoint.monitor, cfg->early_stopping.monitor, cfg->schedule.monitor};
    tr->monitors = tr_select_monitors(cfg);
    for (int i = 0; i < 3; i++) {
        char why[256];
        if (!(tr->monitors & (1u << i))) continue;
        if (tr_monitor_parse(names[i], &tr->mon[i], why, sizeof why))
            return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "%s: %s", keys[i], why);
        if (tr->mon[i].ema && !cfg->ema.enabled)
            return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "%s: %s needs the EMA (ema.enabled: true)", keys[i],
                                names[i]);
    }
    tr_select_init(cfg, &tr->p.sel);
    for (int i = 0; i < 3; i++) tr->offered_at[i] = -1;
    return TRAINRUN_OK;
}

/* The trainer's core (tr_core_open): model and optimizer under the libtorch lock, its generator state in
 * tr->core.rng. The device is refused first, before the model spec is read. */
static int trainer_build(trainrun_trainer *tr)
{
    char path[TR_PATH_MAX];
    const int torchscript = tr->cfg.model.torchscript[0] != '\0';
    tr_config_resolve_path(&tr->cfg, torchscript ? tr->cfg.model.torchscript : tr->cfg.model.spec, path);
    tr_model_spec spec;
    memset(&spec, 0, sizeof spec);
    /* a CUDA device on a CPU-only build: refused */
    int rc = tr_device_resolve(tr->cfg.device, &tr->core.device, &tr->err);
    if (!rc) rc = trainer_monitors(tr);
    if (rc) return rc;
    int64_t shape[TR_MAX_CHANNELS];
    int ndim = 0;
    if (torchscript) {
        /* No data set here: the caller's batches must have the shape the config gives. */
        ndim = tr->cfg.model.n_input_shape;
        for (int i = 0; i < ndim; i++) shape[i] = (int64_t)tr->cfg.model.input_shape[i];
        const int tokens = tr->cfg.data.format == TR_DATA_TEXT || tr->cfg.data.format == TR_DATA_TOKENS;
        if (ndim == 0 && tokens) { /* a window of data.block_size ids, as a run's token data give it */
            ndim = 1;
            shape[0] = tr->cfg.data.block_size;
        }
        if (ndim == 0)
            return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "model.input_shape: a trainer of a TorchScript model "
                                "needs the per-sample input shape (e.g. model.input_shape=[1, 28, 28])");
    } else if ((rc = tr_model_spec_load(path, &spec, &tr->err))) {
        return rc;
    }
    tr->input.ndim = torchscript ? ndim : spec.input_ndim;
    for (int i = 0; i < tr->input.ndim && i < 3; i++) tr->input.shape[i] = torchscript ? shape[i] : spec.input_shape[i];
    rc = tr_core_open(&tr->core, &tr->cfg, torchscript ? NULL : &spec, path, torchscript ? shape : spec.input_shape,
                      torchscript ? ndim : spec.input_ndim, TRAINRUN_E_NOMEM, &tr->err);
    tr_model_spec_free(&spec);
    if (!rc && tr->cfg.ema.enabled) { /* a copy of the weights: draws nothing from the generator */
        tr_torch_enter(NULL, 0);
        rc = tr_core_add_ema(&tr->core, &tr->cfg, &tr->err);
        tr_torch_leave(NULL, 0);
    }
    if (!rc) rc = tr_watchdog_init(&tr->wd, &tr->cfg, tr_device_memory_total(&tr->core.device), &tr->err);
    tr->clock0 = trainer_now(tr);
    tr_ckpt_policy_init(&tr->ckpt, &tr->cfg, 1, (tr_ckpt_hooks){.ctx = tr, .now = trainer_ckpt_now,
                        .prepare = trainer_ckpt_prepare, .saved = trainer_ckpt_saved});
    return rc;
}

static int trainer_open(const char *path, const char *yaml, const char *const *overrides, int n,
                        trainrun_trainer **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    trainrun_trainer *tr = calloc(1, sizeof *tr);
    if (!(*out = tr)) return TRAINRUN_E_NOMEM;
    tr->dir.resumed_at = tr->dir.set_aside_step = -1;
    int rc = tr_api_load_config(&tr->cfg, path, yaml, overrides, n, &tr->err);
    if (!rc) rc = trainer_build(tr);
    return rc;
}

int trainrun_trainer_open(const char *config_path, const char *const *overrides, int n_overrides,
                          trainrun_trainer **out)
{
    if (!config_path && out) *out = NULL;
    if (!config_path) return TRAINRUN_E_INVALID;
    return trainer_open(config_path, NULL, overrides, n_overrides, out);
}

int trainrun_trainer_open_yaml(const char *yaml, const char *const *overrides, int n_overrides,
                               trainrun_trainer **out)
{
    if (!yaml && out) *out = NULL;
    if (!yaml) return TRAINRUN_E_INVALID;
    return trainer_open(NULL, yaml, overrides, n_overrides, out);
}

/* A call's message describes that call (as sqlite3_errmsg the most recent one): cleared as each call starts -- but
 * for a trainer that failed to open, whose message keeps saying why until it is closed. */
static void trainer_fresh_message(trainrun_trainer *tr)
{
    if (tr->core.model && tr->core.opt && tr->core.rng) memset(&tr->err, 0, sizeof tr->err);
}

/* NULL checks shared by every trainer call that runs libtorch. */
static int trainer_ready(trainrun_trainer *tr)
{
    if (!tr->core.model || !tr->core.opt || !tr->core.rng)
        return tr_api_invalid(&tr->err, "the trainer failed to open: close it (its message says why)");
    return TRAINRUN_OK;
}

/* trainrun_trainer_internal.h */
int trainer_begin(trainrun_trainer *tr, const void *arg, const char *null_msg, int ready)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (null_msg && !arg) return tr_api_invalid(&tr->err, null_msg);
    return ready ? trainer_ready(tr) : TRAINRUN_OK;
}

/* tr_core_enter for a call that draws from the trainer's generator: TRAINRUN_E_RUNTIME with the shim's message when
 * the generator cannot be restored (then nothing was entered). */
static int trainer_enter(trainrun_trainer *tr)
{
    if (tr_core_enter(&tr->core))
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "restoring the generator: %s", trs_last_error());
    return TRAINRUN_OK;
}

static int status_of(trs_status st)
{
    switch (st) {
    case TRS_OK: return TRAINRUN_OK;
    case TRS_E_INVALID: return TRAINRUN_E_INVALID;
    case TRS_E_NOMEM: return TRAINRUN_E_NOMEM;
    case TRS_E_NONFINITE: return TRAINRUN_E_NONFINITE;
    case TRS_E_DIST: return TRAINRUN_E_PEER;
    default: return TRAINRUN_E_RUNTIME;
    }
}

/* The caller's labeled batch as the shim's, its targets shaped by the model's output [N, ...out]: class indices
 * [N, ...out minus its class dim], float targets [N, ...out]. TRAINRUN_OK or TRAINRUN_E_INVALID. */
int trainer_batch_in(trainrun_trainer *tr, const trainrun_batch *batch, trs_batch *b)
{
    const int rc = tr_api_batch_view_in(batch, b, 1, &tr->err);
    if (rc) return rc;
    int64_t out_shape[TRS_MAX_DIMS];
    int out_ndim = 0;
    trs_model_output_shape(tr->core.model, out_shape, &out_ndim);
    if (out_ndim >= 1) {
        const int float_y = batch->y_dtype == TRAINRUN_FLOAT32, keep = float_y ? out_ndim : out_ndim - 1;
        b->y_ndim = 1 + keep;
        b->y_shape[0] = b->shape[0];
        for (int i = 0; i < keep; i++) b->y_shape[1 + i] = out_shape[i];
    }
    return TRAINRUN_OK;
}

/* A train step (train), or an evaluation with the live weights (ema NULL) or the EMA's. */
static int trainer_step(trainrun_trainer *tr, const trainrun_batch *batch, trainrun_step_result *res, int train,
                        int with_ema)
{
    int rc = trainer_begin(tr, res, "res is NULL", 1);
    if (rc) return rc;
    if (with_ema && !tr->core.ema)
        return tr_api_invalid(&tr->err, "eval_step_ema: the trainer keeps no EMA (ema.enabled: false)");
    trs_batch b;
    if ((rc = trainer_batch_in(tr, batch, &b))) return rc;
    trs_step_result r;
    memset(&r, 0, sizeof r);
    if ((rc = trainer_enter(tr))) return rc;
    trs_status st;
    double lr = 0.0; /* the lr the step used, for its event: the optimizer's own (the schedule's first until set_lr) */
    const double t0 = train ? trainer_now(tr) : 0.0; /* a train step's seconds count for samples/s */
    if (train) {
        /* in a group the step's scalars are every rank's, and so are the requests the ranks act on (alone,
         * checkpoint_due asks this process's own: trainer_agreed) */
        if (!tr_core_train_step(&tr->core, &b, &r, &st, &tr->err, "train step") && tr->dist.pg &&
            tr_dist_reduce_step(&tr->dist, &r, trainer_requests(tr, trainer_elapsed(tr)), &tr->err))
            st = TRS_E_DIST;
    } else {
        tr_core_eval_step(&tr->core, with_ema ? tr->core.ema : NULL, &b, &r, NULL, &st, &tr->err, "eval step%s",
                          with_ema ? " (EMA weights)" : "");
    }
    if (st == TRS_E_NONFINITE && train) {
        char hint[160];
        if (trs_optimizer_get_lr(tr->core.opt, &lr) != TRS_OK) lr = tr->cfg.optim.lr;
        tr_error_set(&tr->err, TRAINRUN_E_NONFINITE, "train step %lld: the loss is not finite: no step taken. %s",
                     (long long)tr->p.step + 1, tr_core_divergence_hint(&tr->cfg, lr, hint, sizeof hint));
    } else if (st == TRS_E_NONFINITE) {
        tr_error_set(&tr->err, TRAINRUN_E_NONFINITE, "eval step after step %lld: the loss is not finite",
                     (long long)tr->p.step);
    } else if (st != TRS_OK) {
        tr->err.code = status_of(st); /* the message is the core's; the status is this API's */
    }
    if (train && st == TRS_OK && (tr->fn || tr->log.open) && trs_optimizer_get_lr(tr->core.opt, &lr) != TRS_OK)
        lr = 0.0;
    tr_core_leave(&tr->core);
    if (train && st != TRS_OK) trainer_first_step_failed(tr, status_of(st), st);
    if (st == TRS_OK || st == TRS_E_NONFINITE) {
        memset(res, 0, sizeof *res);
        res->loss = r.loss;
        res->samples = r.samples;
        res->correct = r.correct;
        res->accuracy = r.targets ? (double)r.correct / (double)r.targets : 0.0;
        res->grad_norm = r.grad_norm;
    }
    if (st == TRS_OK && train) {
        const double secs = trainer_now(tr) - t0; /* time in train steps, as a run counts it */
        tr->p.step_seconds += secs;
        tr->step_seconds_here += secs;
        tr->p.step++;
        tr->save_reason = NULL; /* a new step: the last one's reasons to save are gone */
        trainer_emit(tr, &(tr_event){.kind = TR_EV_STEP, .step = tr->p.step, .epoch = tr->p.epoch, .loss = r.loss,
                                     .lr = lr, .grad_norm = r.grad_norm, .samples = r.samples, .correct = r.correct,
                                     .targets = r.targets});
        trainer_log_step(tr, &r, lr);
    }
    return status_of(st);
}

int trainrun_trainer_train_step(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res)
{
    return trainer_step(trainer, batch, res, 1, 0);
}

int trainrun_trainer_eval_step(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res)
{
    return trainer_step(trainer, batch, res, 0, 0);
}

int trainrun_trainer_eval_step_ema(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res)
{
    return trainer_step(trainer, batch, res, 0, 1);
}

/* The metrics' arrays for the model's outputs and the config's loss, at the first evaluation. */
static int trainer_metrics(trainrun_trainer *tr)
{
    if (tr->metrics.k) return TRAINRUN_OK;
    int64_t k = 0;
    if (trs_model_output_dim(tr->core.model, &k) != TRS_OK)
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "evaluate: %s", trs_model_errmsg(tr->core.model));
    if (tr->cfg.eval.top_k > k)
        return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "eval.top_k: %d is more than the model's %lld outputs",
                            tr->cfg.eval.top_k, (long long)k);
    if (tr_metrics_init(&tr->metrics, tr_task_of_loss(tr->core.step_opts.loss), k, &tr->err)) /* k stays 0 */
        return tr->err.code = TRAINRUN_E_NOMEM;
    return TRAINRUN_OK;
}

int trainrun_trainer_evaluate(trainrun_trainer *tr, const trainrun_data *data, int split, int weights,
                              trainrun_eval_result *out)
{
    int rc = trainer_begin(tr, out, "evaluate: out is NULL", 1);
    if (rc) return rc;
    if (!data) return tr_api_invalid(&tr->err, "evaluate: data is NULL");
    if (split != TRAINRUN_VAL && split != TRAINRUN_TEST)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "evaluate: split %d is not TRAINRUN_VAL (%d) or "
                            "TRAINRUN_TEST (%d)", split, TRAINRUN_VAL, TRAINRUN_TEST);
    if (weights != TRAINRUN_WEIGHTS_LIVE && weights != TRAINRUN_WEIGHTS_EMA)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "evaluate: weights %d is not TRAINRUN_WEIGHTS_LIVE (%d) or "
                            "TRAINRUN_WEIGHTS_EMA (%d)", weights, TRAINRUN_WEIGHTS_LIVE, TRAINRUN_WEIGHTS_EMA);
    if (weights == TRAINRUN_WEIGHTS_EMA && !tr->core.ema)
        return tr_api_invalid(&tr->err, "evaluate: the trainer keeps no EMA (ema.enabled: false)");
    if ((rc = trainer_data_evaluable(tr, data))) return rc;
    if ((rc = trainer_metrics(tr))) return rc;
    const char *name = split == TRAINRUN_VAL ? "val" : "test";
    trs_ema *ema = weights == TRAINRUN_WEIGHTS_EMA ? tr->core.ema : NULL;
    const double t0 = trainer_now(tr);
    if ((rc = trainer_enter(tr))) return rc;
    /* Phase changes, train to eval and back, as a run's evaluation: the step's cached blocks go back before the
     * pass, the pass's after it. */
    trs_memory_empty_cache(NULL);
    trainer_eval_source src = {tr, data};
    trs_status st = TRS_OK;
    rc = tr_core_evaluate(&tr->core, ema, data->ds.n, tr->cfg.eval.batch_size, trainer_eval_batch, &src, &tr->metrics,
                          name, &st, &tr->err);
    if (rc && st != TRS_OK) rc = tr->err.code = status_of(st); /* the shim's status in this API's codes */
    tr_core_phase_change(&tr->core);
    tr_core_leave(&tr->core);
    if (rc) {
        tr_metrics_reset(&tr->metrics); /* no half-counted confusion matrix for trainrun_trainer_confusion */
        return rc;
    }
    const tr_metrics *m = &tr->metrics;
    const tr_eval_figures f = tr_metrics_figures(m, tr->p.step);
    *out = tr_api_eval_result(&f);
    tr->figs[split == TRAINRUN_TEST][ema != NULL] = f;
    trainer_emit(tr, &(tr_event){.kind = TR_EV_EVAL, .step = tr->p.step, .epoch = tr->p.epoch, .split = name,
                                 .weights = ema ? "ema" : "live", .metrics = m, .top_k = tr->cfg.eval.top_k,
                                 .loss = f.loss, .accuracy = f.accuracy, .correct = m->correct, .samples = m->samples,
                                 .seconds = trainer_now(tr) - t0, .reported = 1});
    /* the run directory's files of an evaluation, as a run's: the latest confusion matrix of this split and
     * weights, and curves.png redrawn with this record */
    if (!tr->dir.path[0] || !tr_dist_is_main(&tr->dist)) return TRAINRUN_OK;
    if (m->confusion && (rc = tr_run_dir_write_confusion(tr->dir.path, name, ema != NULL, m, &tr->err))) return rc;
    if (tr->log.open) tr_run_dir_draw_curves(tr->dir.path, &tr->log.curves_failed, &tr->log.log);
    return TRAINRUN_OK;
}

int trainrun_trainer_confusion(trainrun_trainer *tr, int64_t *out, size_t cap, int64_t *classes)
{
    int rc = trainer_begin(tr, classes, "confusion: classes is NULL", 0);
    if (rc) return rc;
    if (!out && cap) return tr_api_invalid(&tr->err, "confusion: out is NULL with cap > 0");
    if (!tr->metrics.confusion)
        return tr_api_invalid(&tr->err, tr->metrics.k ? "confusion: the config's train.loss is not cross_entropy, so "
                                                        "there are no classes to confuse"
                                                      : "confusion: no evaluation yet (trainrun_trainer_evaluate)");
    const int64_t k = tr->metrics.k;
    *classes = k;
    const size_t kk = (size_t)k * (size_t)k;
    if (cap < kk)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "confusion: cap %zu is less than the %lld x %lld = %zu "
                            "counts", cap, (long long)k, (long long)k, kk);
    memcpy(out, tr->metrics.confusion, kk * sizeof *out);
    return TRAINRUN_OK;
}

int trainrun_trainer_predict(trainrun_trainer *tr, const trainrun_batch *batch, float *out, size_t out_count)
{
    int rc = trainer_begin(tr, out, "predict: out is NULL", 1);
    trs_batch b;
    if (!rc) rc = tr_api_batch_view_in(batch, &b, 0, &tr->err);
    if (rc) return rc;
    b.y = NULL;
    b.target = NULL;
    tr_torch_enter(NULL, 0); /* eval mode draws nothing from the generator */
    const trs_status st = trs_predict(tr->core.model, NULL, &b, out, out_count, NULL, NULL);
    if (st != TRS_OK) tr_error_set(&tr->err, status_of(st), "predict: %s", trs_model_errmsg(tr->core.model));
    tr_torch_leave(NULL, 0);
    return status_of(st);
}

int trainrun_trainer_generate(trainrun_trainer *tr, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                              double temperature, int64_t top_k, uint64_t seed, int64_t *out)
{
    int rc = trainer_begin(tr, prompt, "generate: prompt is NULL", 0);
    if (!rc && !out) rc = tr_api_invalid(&tr->err, "generate: out is NULL");
    if (!rc) rc = trainer_ready(tr);
    if (rc) return rc;
    const trs_sample_options o = {.temperature = temperature, .top_k = top_k, .seed = seed};
    tr_torch_enter(NULL, 0); /* its own generator: the default one is not drawn from */
    const trs_status st = trs_generate(tr->core.model, NULL, prompt, n_prompt, n_new, &o, out);
    if (st != TRS_OK) tr_error_set(&tr->err, status_of(st), "generate: %s", trs_model_errmsg(tr->core.model));
    tr_torch_leave(NULL, 0);
    return status_of(st);
}

int trainrun_trainer_output_shape(trainrun_trainer *tr, int64_t *shape, int *ndim)
{
    const int rc = trainer_begin(tr, NULL, NULL, 1);
    if (rc) return rc;
    int64_t s[TRS_MAX_DIMS];
    int n = 0;
    trs_model_output_shape(tr->core.model, s, &n);
    if (ndim) *ndim = n;
    if (shape) memcpy(shape, s, (size_t)n * sizeof *s);
    return TRAINRUN_OK;
}

int trainrun_trainer_output_size(trainrun_trainer *tr, int64_t *count)
{
    int rc = trainer_begin(tr, count, "output_size: count is NULL", 0);
    if (rc) return rc;
    int64_t s[TRS_MAX_DIMS];
    int n = 0;
    if ((rc = trainrun_trainer_output_shape(tr, s, &n))) return rc;
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    *count = p;
    return TRAINRUN_OK;
}

int trainrun_trainer_set_lr(trainrun_trainer *tr, double lr)
{
    const int rc = trainer_begin(tr, NULL, NULL, 1);
    if (rc) return rc;
    if (!(lr >= 0.0) || !isfinite(lr))
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "set_lr: lr %g must be finite and >= 0", lr);
    trs_status st;
    tr_torch_enter(NULL, 0);
    if (tr_core_set_lr(&tr->core, lr, &st, &tr->err, "set_lr")) tr->err.code = status_of(st);
    tr_torch_leave(NULL, 0);
    return status_of(st);
}

int trainrun_trainer_steps(trainrun_trainer *tr, int64_t *steps)
{
    const int rc = trainer_begin(tr, steps, "steps: steps is NULL", 0);
    if (rc) return rc;
    *steps = tr->p.step;
    return TRAINRUN_OK;
}

int trainrun_trainer_scheduled_lr(trainrun_trainer *tr, int64_t total_steps, int64_t steps_per_epoch, double *lr)
{
    const int rc = trainer_begin(tr, lr, "scheduled_lr: lr is NULL", 0);
    if (rc) return rc;
    if (total_steps < 1 || steps_per_epoch < 0)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "scheduled_lr: total_steps %lld must be >= 1 and "
                            "steps_per_epoch %lld >= 0", (long long)total_steps, (long long)steps_per_epoch);
    if (tr->cfg.schedule.interval == TR_INTERVAL_EPOCH && steps_per_epoch < 1)
        return tr_api_invalid(&tr->err, "scheduled_lr: schedule.interval epoch needs steps_per_epoch >= 1");
    /* the plateau's current lr as the base, as a run's step takes it (run_scheduled_lr) */
    const double base = (tr->monitors & TR_SEL_PLATEAU) ? tr->p.sel.plateau.lr : tr->cfg.optim.lr;
    *lr = tr_schedule_lr_from(&tr->cfg, base, tr->p.step, total_steps, steps_per_epoch > 0 ? steps_per_epoch : 1);
    return TRAINRUN_OK;
}

int trainrun_trainer_update_ema(trainrun_trainer *tr)
{
    int rc = trainer_begin(tr, NULL, NULL, 1);
    int fresh = 0;
    if (rc || !tr_core_ema_due(&tr->core, &tr->cfg, tr->p.step, &fresh)) return rc;
    if ((rc = trainer_enter(tr))) return rc;
    rc = tr_core_update_ema(&tr->core, fresh, &tr->err, "step %lld: ema", (long long)tr->p.step);
    tr_core_leave(&tr->core);
    if (rc) tr->err.code = rc = TRAINRUN_E_RUNTIME;
    return rc;
}

/* The CHECKPOINT event of a save whose outcome was taken and was written (the lock released: the callback may call
 * the library). */
static void trainer_announce(trainrun_trainer *tr)
{
    if (!tr->saving.announce) return;
    tr->saving.announce = 0;
    trainer_emit(tr, &(tr_event){.kind = TR_EV_CHECKPOINT, .step = tr->saving.step, .reason = tr->saving.reason,
                                 .path = tr->saved_path, .bytes = tr->saved_bytes, .elapsed = tr->p.elapsed,
                                 .seconds = trainer_now(tr) - tr->saving.t0});
}

/* The background save's outcome: with `wait` after waiting for it, else only if it has finished; its event. */
static int trainer_settle(trainrun_trainer *tr, int wait)
{
    const int rc = tr_ckpt_policy_settle(&tr->ckpt, wait, &tr->err);
    trainer_announce(tr);
    return rc;
}

int trainrun_trainer_checkpoint_due(trainrun_trainer *tr, int *due)
{
    int rc = trainer_begin(tr, due, "checkpoint_due: due is NULL", 0);
    if (rc) return rc;
    *due = 0;
    if ((rc = trainer_settle(tr, 0))) return rc; /* a background save that failed: its error, now */
    const double elapsed = trainer_elapsed(tr);
    if (trainer_agreed(tr, TR_DIST_STOP, elapsed)) { /* trainrun_trainer_request_stop: save this step and stop */
        *due = tr->ckpt.last_step != tr->p.step; /* once: not when this step's checkpoint is taken */
        tr->save_reason = "signal";
        return tr_error_set(&tr->err, TRAINRUN_E_STOPPED, "stop requested at step %lld: save and stop",
                            (long long)tr->p.step);
    }
    const int interval = trainer_agreed(tr, TR_DIST_CHECKPOINT, elapsed);
    const char *why = tr_ckpt_policy_due(&tr->ckpt, tr->p.step, interval);
    *due = why != NULL;
    if (why && !tr->save_reason) tr->save_reason = why;
    return TRAINRUN_OK;
}

/* A save into dir: snapshot here, files on the saver's thread; with `wait` complete on return. */
static int trainer_save(trainrun_trainer *tr, const char *dir, int wait)
{
    int rc = trainer_begin(tr, NULL, NULL, 1);
    if (rc) return rc;
    const double t0 = trainer_now(tr);
    if (!dir && !tr->dir.path[0])
        return tr_api_invalid(&tr->err, "save: dir is NULL and the trainer has no run directory (open_dir)");
    if (!dir) dir = tr->dir.path;
    if (tr->dir.set_aside_step == tr->p.step) /* saving it again would bring back what the next start must skip */
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "save: step %lld's checkpoint was set aside "
                            "(set_aside_resumed): close the trainer and open a new one", (long long)tr->p.step);
    if (strlen(dir) >= sizeof tr->save_dir)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "save: dir is %zu bytes long, over the %zu a path may have",
                            strlen(dir), sizeof tr->save_dir - 1);
    if ((rc = trainer_settle(tr, 1))) return rc; /* the save before: its outcome and its event first */
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "%s: cannot create directory: %s", dir, strerror(errno));
    if ((rc = trainer_enter(tr))) return rc;
    const tr_ckpt_source src = {.cfg = &tr->cfg, .core = &tr->core, .p = &tr->p,
                                .write = tr_dist_is_main(&tr->dist), .same_step = 1,
                                .best = (tr->monitors & TR_SEL_TOPK) ? &tr->p.sel.topk : NULL};
    tr->saved_path[0] = '\0';
    snprintf(tr->save_dir, sizeof tr->save_dir, "%s", dir);
    tr->saving.reason = tr->save_reason ? tr->save_reason : "manual";
    tr->saving.t0 = t0;
    rc = tr_ckpt_policy_save(&tr->ckpt, dir, &src, "trainer", wait, &tr->err);
    tr_torch_leave(NULL, 0);
    trainer_announce(tr);
    if (!rc) tr->save_reason = NULL;
    return rc;
}

int trainrun_trainer_save(trainrun_trainer *tr, const char *dir, char *path_out, size_t path_size)
{
    const int rc = trainer_save(tr, dir, 1);
    if (!rc && path_out && path_size) snprintf(path_out, path_size, "%s", tr->saved_path);
    return rc;
}

int trainrun_trainer_save_background(trainrun_trainer *tr, const char *dir)
{
    return trainer_save(tr, dir, 0);
}

int trainrun_trainer_save_wait(trainrun_trainer *tr, char *path_out, size_t path_size)
{
    int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    const int busy = tr_ckpt_policy_busy(&tr->ckpt);
    if (path_out && path_size) path_out[0] = '\0';
    rc = trainer_settle(tr, 1);
    if (!rc && busy && path_out && path_size) snprintf(path_out, path_size, "%s", tr->saved_path);
    return rc;
}

int trainrun_trainer_load_weights(trainrun_trainer *tr, const char *path)
{
    int rc = trainer_begin(tr, path, "load_weights: path is NULL", 1);
    if (rc) return rc;
    tr_torch_enter(NULL, 0);
    rc = tr_checkpoint_load_weights(path, tr->core.model, false, NULL, NULL, &tr->err);
    tr_torch_leave(NULL, 0);
    return rc;
}

int trainrun_trainer_load(trainrun_trainer *tr, const char *path)
{
    int rc = trainer_begin(tr, path, "load: path is NULL", 1);
    if (rc) return rc;
    if ((rc = trainer_settle(tr, 1))) return rc; /* a save in flight is finished before the state changes */
    char ckpt[TR_PATH_MAX + 32], manifest[TR_PATH_MAX + 64];
    snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", path);
    struct stat st;
    if (stat(manifest, &st) == 0) {
        snprintf(ckpt, sizeof ckpt, "%s", path);
    } else {
        if ((rc = trainer_find_resumable(tr, path, ckpt, NULL, NULL))) return rc;
        if (!ckpt[0]) return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "%s: no valid checkpoint", path);
    }
    return trainer_load_checkpoint(tr, ckpt);
}

int trainer_find_resumable(trainrun_trainer *tr, const char *dir, char *ckpt, tr_ckpt_warn_fn warn, void *ctx)
{
    tr_torch_enter(NULL, 0);
    const int rc = tr_checkpoint_find_resumable(dir, &tr->cfg, tr->core.model, tr->core.opt, tr->core.ema, NULL,
                                                ckpt, warn, ctx, &tr->err);
    tr_torch_leave(NULL, 0);
    return rc;
}

int trainer_load_checkpoint(trainrun_trainer *tr, const char *ckpt)
{
    int rc = trainer_settle(tr, 1); /* a save in flight is finished before the state changes */
    if (rc || (rc = tr_checkpoint_verify(ckpt, &tr->err))) return rc;
    tr_ckpt_progress p;
    memset(&p, 0, sizeof p);
    tr_torch_enter(NULL, 0);
    rc = tr_checkpoint_load(ckpt, &tr->cfg, tr->core.model, tr->core.opt, tr->core.ema, NULL, &p, NULL, NULL,
                            &tr->err);
    if (!rc) /* in a group: this rank's own saved generator (the load restored rank 0's) */
        rc = tr_dist_restore_rng(&tr->dist, ckpt, p.world_size, tr->core.device.cuda ? tr->core.device.index : -1,
                                 NULL, NULL, &tr->err);
    tr_torch_leave(rc ? NULL : tr->core.rng, tr->core.rng_size); /* the checkpoint's generator becomes the trainer's */
    if (!rc) {
        tr->p = p;
        tr->clock0 = trainer_now(tr); /* training time goes on from the checkpoint's */
        tr->elapsed0 = p.elapsed;
        tr->clock_step = p.step;
        tr->save_reason = NULL; /* the reasons to save were the state's before the load */
        tr_ckpt_policy_resumed(&tr->ckpt, p.step, p.elapsed);
        tr_select_reconcile(&tr->cfg, &tr->p.sel); /* a monitor or mode it did not keep starts afresh */
        for (int i = 0; i < 3; i++) tr->offered_at[i] = p.step; /* its evaluation of that step was counted */
    }
    return rc;
}

int trainrun_trainer_monitor(trainrun_trainer *tr, const char *metric, double value, trainrun_selection *out)
{
    int rc = trainer_begin(tr, metric, "monitor: metric is NULL", 0);
    if (rc) return rc;
    if (out) memset(out, 0, sizeof *out);
    if (out) out->evicted_step = -1;
    tr_monitor m;
    char why[256];
    if (tr_monitor_parse(metric, &m, why, sizeof why))
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "monitor: %s", why);
    unsigned which = 0; /* the monitors that name this figure */
    for (int i = 0; i < 3; i++)
        if ((tr->monitors & (1u << i)) && tr->mon[i].test == m.test && tr->mon[i].ema == m.ema &&
            tr->mon[i].metric == m.metric)
            which |= 1u << i;
    if (!which) return TRAINRUN_OK;
    int counted = 0; /* this step's evaluation was counted already */
    for (int i = 0; i < 3; i++) {
        counted |= tr->offered_at[i] == tr->p.step;
        if ((which & (1u << i)) && tr->offered_at[i] == tr->p.step)
            return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "monitor: %s was offered after step %lld already (one "
                                "figure per evaluation, one evaluation per step)", metric, (long long)tr->p.step);
    }
    for (int i = 0; i < 3; i++)
        if (which & (1u << i)) tr->offered_at[i] = tr->p.step;
    if (!counted) tr->p.evals_done++;
    const double v[3] = {value, value, value};
    tr_select_outcome o;
    tr_select_offer(&tr->cfg, &tr->p.sel, which, tr->p.step, v, &o);
    if (o.best) tr->ckpt.best_due = 1;
    if (out) {
        out->best = o.best;
        out->evicted_step = o.evicted;
        out->lr_reduced = o.lr_reduced;
        out->lr = (tr->monitors & TR_SEL_PLATEAU) ? tr->p.sel.plateau.lr : 0.0;
        out->stop = o.stop;
    }
    if (o.stop) {
        snprintf(tr->stop_reason, sizeof tr->stop_reason, "early stopping after step %lld: %s", (long long)tr->p.step,
                 o.why);
        if (out) snprintf(out->reason, sizeof out->reason, "%s", tr->stop_reason);
    }
    return TRAINRUN_OK;
}

int trainrun_trainer_set_callback(trainrun_trainer *tr, trainrun_event_fn fn, void *ctx)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    tr->fn = fn;
    tr->fn_ctx = ctx;
    return TRAINRUN_OK;
}

const char *trainrun_trainer_errmsg(const trainrun_trainer *tr) { return tr ? tr->err.msg : tr_api_null_handle; }

int trainrun_trainer_close(trainrun_trainer *tr)
{
    if (!tr) return TRAINRUN_OK;
    trainer_settle(tr, 1); /* a save in flight is written (or fails) before the trainer goes */
    if (tr->log.open) trainer_memory_report(tr, "end"); /* the loop's last word on memory, as a run's */
    trainer_log_close(tr);
    tr_torch_enter(NULL, 0);
    tr_core_close(&tr->core);
    tr_torch_leave(NULL, 0);
    trainer_data_close(tr);
    tr_memsnap_free(&tr->mem_base);
    tr_watchdog_free(&tr->wd);
    tr_metrics_free(&tr->metrics);
    tr_vocab_free(&tr->dir.vocab);
    tr_run_lock_release(&tr->dir.lock);
    tr_dist_free_rng(&tr->p);
    tr_dist_close(&tr->dist);
    free(tr);
    return TRAINRUN_OK;
}
