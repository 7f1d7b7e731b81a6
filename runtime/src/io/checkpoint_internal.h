/*
 * checkpoint_internal.h -- what the files of the checkpoint protocol share (checkpoint.c): checkpoint_save.c,
 * checkpoint_list.c and checkpoint_load.c. Not for callers outside them: their calls are checkpoint.h's.
 */
#ifndef TR_CHECKPOINT_INTERNAL_H
#define TR_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "safetensors.h"

/** The files every checkpoint holds, as MANIFEST.json must list them (ema.safetensors and vocab.json are optional). */
#define TR_CKPT_N_FILES 4
extern const char *const tr_ckpt_files[TR_CKPT_N_FILES];

/** snprintf into an array that reports truncation: nonzero when `out` could not hold the whole result. */
#define TR_CKPT_PATHF(out, ...) (snprintf((out), sizeof(out), __VA_ARGS__) >= (int)sizeof(out))

/** One formatted line to `warn` (NULL: dropped), at most 2047 bytes. */
void tr_ckpt_warnf(tr_ckpt_warn_fn warn, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/** A checkpoint's JSON file (manifest, trainer.json, vocab.json) read whole, NUL-terminated (malloc'd), refusing more
 *  than 64 MiB before allocating; NULL with TR_E_RUNTIME naming `path` when it cannot be read. */
char *tr_ckpt_read_text(const char *path, tr_error *err);

/** The safetensors dtype of a shim dtype; TR_ST_DTYPE_COUNT_ when a checkpoint cannot store it. */
tr_st_dtype tr_ckpt_st_dtype(trs_dtype d);

/** The CUDA devices whose generators a checkpoint of `model` holds: every visible one when the model is on a CUDA
 *  device (torch.cuda.get_rng_state_all), none on the CPU (which never touches CUDA) or for a NULL model. */
int tr_ckpt_cuda_generators(trs_model *model);

/** The model's device as the `device` key names it ("cpu", "cuda:N") into buf[n]; "cpu" for a NULL model. */
void tr_ckpt_device_name(trs_model *model, char *buf, size_t n);

/** Steps of the complete checkpoints under run_dir/checkpoints (step-N directories), newest first (malloc'd; count
 *  in *n; NULL with *n 0 when there is no such directory). */
int64_t *tr_ckpt_list_steps(const char *run_dir, size_t *n);

#endif
