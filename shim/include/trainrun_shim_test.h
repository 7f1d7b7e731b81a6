/*
 * trainrun_shim_test.h -- test-only entry points of the shim: the one place they are declared.
 *
 * Nothing in runtime/src calls these (tests/hooks_check.sh fails if a runtime file includes this header); the test
 * suite uses them to look inside a handle: a model's mode, one state entry at a time, the EMA's next decay, whether
 * the fused optimizer step ran. They read state and inject nothing, and libtrainrun.so does not export them (its
 * version script exports trainrun_* only). The runtime's own calls are in trainrun_shim.h.
 */
#ifndef TRAINRUN_SHIM_TEST_H
#define TRAINRUN_SHIM_TEST_H

#include "trainrun_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- process-wide settings ---- */

/** Read back cuDNN's deterministic and benchmark flags (0 / 1; either pointer may be NULL). */
trs_status trs_get_cudnn_flags(int *deterministic, int *benchmark);

/* ---- models ---- */

/** 1 if the model is in train mode, 0 in eval mode, into *training. */
trs_status trs_model_is_training(trs_model *model, int *training);

/**
 * Copy state_dict entry `index` into dst (nbytes must equal numel x element size; row-major, native byte order).
 * Errors: TRS_E_INVALID (NULL, index out of range, size mismatch). (The runtime reads every entry at once:
 * trs_model_state_read_all.)
 */
trs_status trs_model_state_read(trs_model *model, int64_t index, void *dst, size_t nbytes);

/* ---- optimizers ---- */

/**
 * *fused = 1 when the optimizer's last step ran the fused Adam/AdamW pass (trs_optim_options.fused) over every
 * parameter; 0 when libtorch's own step ran (fused off, not usable here, or state it does not cover) or no step
 * has run yet. Errors: TRS_E_INVALID (NULL).
 */
trs_status trs_optimizer_fused(trs_optimizer *opt, int *fused);

/** The optimizer's state entries one at a time (names as trs_optimizer_state_describe gives them), as
 *  trs_model_state_count / _entry / trs_model_state_read do for the model. */
trs_status trs_optimizer_state_count(trs_optimizer *opt, int64_t *count);
trs_status trs_optimizer_state_entry(trs_optimizer *opt, int64_t index, char *name, size_t name_size,
                                     int64_t *shape, int *ndim, trs_dtype *dtype);
trs_status trs_optimizer_state_read(trs_optimizer *opt, int64_t index, void *dst, size_t nbytes);

/* ---- steps ---- */

/**
 * Evaluate one batch under NoGradGuard with the model in eval() mode, restoring the previous mode afterwards.
 * Never touches gradients. `opts` may be NULL (plain cross-entropy). Errors as trs_train_step.
 * Same as trs_eval_batch(model, NULL, batch, opts, res, NULL), which the runtime calls.
 */
trs_status trs_eval_step(trs_model *model, const trs_batch *batch, const trs_step_options *opts,
                         trs_step_result *res);

/* ---- kernels ---- */

/**
 * max_pool2d's forward as the runtime's models get it (trainrun's kernel where pool.cpp covers the case, ATen's
 * otherwise) against ATen's own kernel, on a seeded input of `shape` (3 or 4 dims; small integers, so many ties,
 * with NaN, +inf, -inf and a NaN with a payload), float32 or (bfloat16 != 0) bfloat16, square `kernel` and
 * `stride`, no padding. *fast = 1 when trainrun's kernel computed it; *equal = 1 when values (bit for bit, NaNs
 * included), indices, shape and strides are ATen's. Errors: TRS_E_INVALID (NULL, ndim), TRS_E_RUNTIME (ATen's).
 */
trs_status trs_max_pool2d_check(int bfloat16, const int64_t *shape, int ndim, int kernel, int stride, uint64_t seed,
                                int *fast, int *equal);

/* ---- EMA ---- */

/** The decay_t the next update will use, into *decay. */
trs_status trs_ema_next_decay(trs_ema *ema, double *decay);

/** Number of EMA tensors with requires_grad set (0 by construction), into *count. */
trs_status trs_ema_requires_grad_count(trs_ema *ema, int64_t *count);

/** Copy EMA entry `index` into dst, as trs_model_state_read does for the model. */
trs_status trs_ema_state_read(trs_ema *ema, int64_t index, void *dst, size_t nbytes);

/* ---- process groups ---- */

/** 1 if this shim was built with c10d (ProcessGroupGloo); 0 if trs_dist_create_from_env always fails. */
int trs_dist_available(void);

/** Wait until every rank has called this (torch.distributed.barrier). Collective. */
trs_status trs_dist_barrier(trs_dist *dist);

#ifdef __cplusplus
}
#endif
#endif /* TRAINRUN_SHIM_TEST_H */
