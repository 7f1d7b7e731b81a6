/*
 * model_core.h -- the model core (tr_core): a model, its optimizer, the EMA of its weights, the step options, the
 * device and the default generator's state, and the process-wide libtorch lock they are used under. A run
 * (run_internal.h: tr_run_state.core) and the embedding API's trainer (trainrun_trainer.c: trainrun_trainer.core)
 * each hold one tr_core and build, lock and free it with these calls only, and both reach the shim's steps through
 * the core's step calls (tr_core_set_lr, tr_core_train_step, tr_core_eval_step, tr_core_update_ema), as ggml-opt's
 * ggml_opt_fit is written over its public calls: one wording and one code for a failed step, whoever takes it.
 *
 * The embedding API's trainer opens its core in one call (tr_core_open). A run's set-up reads its data and checks the model against
 * it, all under one hold of the lock, between the steps tr_core_open takes together: it calls them one by one
 * (tr_setup_threads, tr_core_build, tr_core_add_ema, tr_core_keep_rng) in the same order.
 */
#ifndef TR_MODEL_CORE_H
#define TR_MODEL_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "device.h"
#include "error.h"
#include "metrics.h"
#include "model_spec.h"
#include "trainrun_shim.h"

typedef struct tr_core {
    trs_model *model;
    trs_optimizer *opt;
    trs_ema *ema;               /**< ema.enabled, where the holder keeps one (a run): the moving average, or NULL */
    trs_step_options step_opts; /**< loss, clipping, accumulation, precision (from the config), dist (a run's)   */
    tr_device device;           /**< where the model lives (the config's `device`)                            */
    void *rng;                  /**< this holder's default-generator state while others hold the lock       */
    size_t rng_size;            /**< bytes of rng (trs_rng_state_size)                                       */
    int malloc_tuned;           /**< tr_core_open pinned glibc's malloc thresholds (tr_setup_threads)         */
} tr_core;

/**
 * Process-wide settings from the config: glibc malloc thresholds (malloc_tuning; *malloc_tuned = 1 when pinned,
 * may be NULL), libtorch's threads from cfg->threads / interop_threads (0 = auto: 1, BLAS pinned to 1),
 * deterministic mode. An allocator that refuses mallopt (a sanitizer's, not glibc) is not an error: the reason goes
 * to warning[warning_size] for the caller's log (to stderr when warning is NULL), "" when there was none.
 */
int tr_setup_threads(const tr_config *cfg, int *malloc_tuned, char *warning, size_t warning_size, tr_error *err);

/**
 * The process-wide libtorch lock. libtorch's default CPU generator and thread settings belong to the process, so
 * whatever runs libtorch for a run or trainer holds this lock with its own generator state swapped in:
 * tr_torch_enter locks and restores `rng_state` (nbytes from trs_rng_state_size; NULL: leave the generator),
 * tr_torch_leave saves the generator into `rng_state` (NULL: don't) and unlocks. Runs in several threads then
 * interleave a step at a time and each draws what it would alone. enter returns TR_E_RUNTIME (unlocked) when the
 * state is refused.
 */
int tr_torch_enter(const void *rng_state, size_t nbytes);
void tr_torch_leave(void *rng_state, size_t nbytes);

/**
 * Open a core in one call, as the embedding API's trainer does: under the torch lock, tr_setup_threads (no malloc
 * flag, a refused mallopt warned on stderr), tr_core_build, tr_core_keep_rng, and the generator as the build left
 * it saved into c->rng. No EMA (a run and a trainer add it with tr_core_add_ema under ema.enabled). c is zeroed by the
 * caller except c->device, which the caller has resolved (tr_device_resolve) before reading anything. `nomem` is
 * the status an allocation failure returns (the caller's code space). TR_OK, or the failing step's status with the
 * message in *err; on failure c holds what was built (tr_core_close frees it). Takes the torch lock itself: not for
 * a caller that holds it (a run's set-up calls the steps one by one).
 */
int tr_core_open(tr_core *c, const tr_config *cfg, const tr_model_spec *spec, const char *path,
                 const int64_t *input_shape, int input_ndim, int nomem, tr_error *err);

/**
 * Seed libtorch's default generator with cfg->seed, build the model -- `spec` (read from `path`) or, with spec
 * NULL, the TorchScript archive at `path` fed per-sample inputs of `input_shape` ([input_ndim]) -- moved to
 * cfg->device, its optimizer from cfg->optim (c->opt) and the step options from cfg->train and cfg->optim
 * (c->step_opts). Messages name `path`. On failure c->model may be set (tr_core_close frees it). TR_OK or
 * TR_E_CONFIG, TR_E_RUNTIME. Call it holding the torch lock.
 */
int tr_core_build(tr_core *c, const tr_config *cfg, const tr_model_spec *spec, const char *path,
                  const int64_t *input_shape, int input_ndim, tr_error *err);

/**
 * When cfg->ema.enabled: c->ema, the moving average of c->model's weights (ema.decay, ema.warmup, ema.buffers).
 * TR_OK or TR_E_CONFIG ("ema: ..."). Call it holding the torch lock.
 */
int tr_core_add_ema(tr_core *c, const tr_config *cfg, tr_error *err);

/**
 * Allocate c->rng (c->rng_size bytes: trs_rng_state_size) for the generator state the core keeps between holds of
 * the lock; it holds nothing yet (tr_torch_leave(c->rng, c->rng_size) or trs_rng_get_state fills it). 0, or -1 when
 * out of memory (the caller words the error). Call it holding the torch lock.
 */
int tr_core_keep_rng(tr_core *c);

/*
 * The step calls: the one way a run and the embedding API's trainer reach the shim's steps. Each runs under the
 * torch lock (the holder's tr_core_enter). On failure each fills *err with "<what>: <the shim's message>", where
 * `what`, ... is printf-style, the caller's name for the call ("step 12", "train step"), formatted only then, and
 * returns the runtime's code for it: TR_E_PEER when a collective failed (TRS_E_DIST: another rank failed or hung;
 * only a train step with step_opts.dist runs one), TR_E_RUNTIME for anything else. *st (may be NULL) gets the
 * shim's own status, for a holder whose codes say more (the embedding API's TRAINRUN_E_NONFINITE, _INVALID,
 * _NOMEM): TRS_OK, TRS_E_NONFINITE, TRS_E_INVALID, TRS_E_NOMEM, TRS_E_RUNTIME or TRS_E_DIST. Nothing is allocated
 * or copied on the way.
 */

/** The learning rate of every param group of c->opt (trs_optimizer_set_lr), >= 0. Errors as above. */
int tr_core_set_lr(tr_core *c, double lr, trs_status *st, tr_error *err, const char *what, ...)
    __attribute__((format(printf, 5, 6)));

/**
 * One optimizer step on batch b (trs_batch: x [N, ...] float32 or x_ids [N, T] int64, and its targets) with
 * c->model, c->opt and c->step_opts (trs_train_step: zero_grad, forward, loss, backward, gradient averaging over
 * step_opts.dist, clipping, the optimizer's step). *r gets the batch's loss and counts, also when the loss is not
 * finite (then no step was taken: TRS_E_NONFINITE in *st). Errors as above.
 */
int tr_core_train_step(tr_core *c, const trs_batch *b, trs_step_result *r, trs_status *st, tr_error *err,
                       const char *what, ...) __attribute__((format(printf, 6, 7)));

/**
 * Evaluate batch b with the live weights (ema NULL) or c->ema's (trs_eval_batch: eval mode, no_grad, the step
 * options' loss and precision): *r gets the loss and counts, *counts (may be NULL) the per-class counts of the
 * batch. Errors as above.
 */
int tr_core_eval_step(tr_core *c, trs_ema *ema, const trs_batch *b, trs_step_result *r, trs_class_counts *counts,
                      trs_status *st, tr_error *err, const char *what, ...) __attribute__((format(printf, 8, 9)));

/** Samples i .. i + n - 1 of a data set as a batch for tr_core_evaluate: *b filled, valid until the next call.
 *  Returns TR_OK or the error (set in *err). */
typedef int (*tr_core_batch_fn)(void *ctx, int64_t i, int64_t n, trs_batch *b, tr_error *err);

/**
 * One evaluation pass -- the run's (run_eval.c) and the trainer's (trainrun_trainer_evaluate) alike: the samples
 * 0 .. samples - 1 in order, `batch` at a time (the last batch the rest), each through tr_core_eval_step with the
 * live weights (ema NULL) or the EMA's, its scalars and per-class counts added to m (reset first: tr_metrics_add,
 * so the figures are metrics.c's sums in batch order). An error names the pass "<split> evaluation" (with " (EMA
 * weights)"); *st as tr_core_eval_step's, TRS_OK when a batch of fn failed. The caller holds the lock.
 */
int tr_core_evaluate(tr_core *c, trs_ema *ema, int64_t samples, int64_t batch, tr_core_batch_fn fn, void *ctx,
                     tr_metrics *m, const char *split, trs_status *st, tr_error *err);

/**
 * The EMA's update after an optimizer step (trs_ema_update: ema = decay_t * ema + (1 - decay_t) * live, decay_t
 * with TensorFlow's num_updates warm-up under ema.warmup), or with `reset` a fresh copy of the live weights
 * (trs_ema_reset). c->ema must exist. Errors as above, with the EMA's message.
 */
int tr_core_update_ema(tr_core *c, int reset, tr_error *err, const char *what, ...)
    __attribute__((format(printf, 4, 5)));

/* What to try when the loss stopped being finite at lr `lr` (the run's and the trainer's message end with it):
 * "Try a lower optim.lr (LR now) or gradient clipping, optim.grad_clip_norm (...)". Returns buf. */
const char *tr_core_divergence_hint(const tr_config *cfg, double lr, char *buf, size_t n);

/**
 * Whether the EMA is due after optimizer step `step` (the run's and the trainer's one rule): a fresh copy of the
 * weights at ema.start_step when it is > 0 (*fresh = 1), then an update every ema.every_steps steps after it.
 * 0 when c keeps no EMA.
 */
int tr_core_ema_due(const tr_core *c, const tr_config *cfg, int64_t step, int *fresh);

/**
 * A phase change (after an evaluation pass, before a checkpoint's snapshot): the caching allocators release the
 * blocks no tensor uses -- the CPU one's (trs_memory_empty_cache) and, on a CUDA device, the CUDA one's
 * (torch.cuda.empty_cache) -- so `reserved` shows what the next phase needs. Never per step: a released block must
 * be obtained again when it is needed (on CUDA a synchronising cudaMalloc).
 */
void tr_core_phase_change(const tr_core *c);

/** Take the torch lock with this core's generator state restored (tr_torch_enter). */
static inline int tr_core_enter(const tr_core *c) { return tr_torch_enter(c->rng, c->rng_size); }

/** Save the generator into this core and release the lock (tr_torch_leave). */
static inline void tr_core_leave(tr_core *c) { tr_torch_leave(c->rng, c->rng_size); }

/** Free the EMA, the optimizer, the model and the generator state; c is zeroed. NULL: a no-op. Call it holding the
 * torch lock. */
void tr_core_close(tr_core *c);

#endif
