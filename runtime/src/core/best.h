/*
 * best.h -- RUN_DIR/best.json, the run directory's record of its best checkpoints by checkpoint.monitor, and
 * what a run directory given to init.from or predict means (its best checkpoint).
 */
#ifndef TR_BEST_H
#define TR_BEST_H

#include <stddef.h>

#include "checkpoint.h"
#include "config.h"
#include "error.h"
#include "monitor.h"
#include "trainrun_shim.h"

/**
 * Write RUN_DIR/best.json (cJSON, atomically): {"monitor","mode","best":{"step","score","checkpoint"},
 * "top_k":[{"step","score","checkpoint"}, ...]} with checkpoint = "checkpoints/step-NNNNNNNNNN". TR_OK or
 * TR_E_RUNTIME naming the file.
 */
int tr_best_write(const char *run_dir, const char *monitor, int mode_max, const tr_topk *t, tr_error *err);

/**
 * The checkpoint RUN_DIR names for init.from and predict: its best.json's best checkpoint when there is a
 * best.json, else (*used_best = 0) path_out = "" and the caller takes the newest. best.json is untrusted input:
 * a JSON object whose monitor parses, mode is "min" or "max", best.step is an integer in [0, 2^40], best.score a
 * finite number and best.checkpoint exactly "checkpoints/step-%010lld" of that step; the checkpoint must verify
 * (manifest) and its trainer.json's top-k set must hold that step with that score. Errors: TR_E_RUNTIME
 * "RUN_DIR/best.json: field F: ..." naming the field.
 */
int tr_best_resolve(const char *run_dir, char *path_out, size_t size, int *used_best, tr_error *err);

/**
 * The checkpoint a path given to init.from or predict means: a run directory (a directory holding checkpoints/)
 * means its best checkpoint by best.json (*which = "best") or, without a best.json, its newest checkpoint that
 * verifies (*which = "newest"); anything else (a checkpoint directory, a .safetensors file) is itself (*which =
 * NULL). out[n]. Errors: best.json's (tr_best_resolve), TR_E_RUNTIME "RUN_DIR: no checkpoint that verifies".
 */
int tr_checkpoint_of_run(const char *path, char *out, size_t n, const char **which, tr_error *err);

/**
 * init.from's weights into `model` (a fresh start's; a resume ignores init.from): the path, resolved against the
 * config's directory, is a checkpoint directory, a .safetensors file or a run directory (its best checkpoint, else
 * its newest: tr_checkpoint_of_run, which says so in *which, NULL otherwise). Parameters and buffers by state_dict
 * name; init.strict refuses a file that lacks one. `loaded` (TR_PATH_MAX bytes) gets the file read. Runs and
 * trainers (trainrun_trainer_open_dir) call it. TR_OK with loaded "" when init.from is unset; TR_E_CONFIG (no such
 * path; a name, shape or dtype that does not match, named), TR_E_RUNTIME (a corrupt file), each prefixed
 * "init.from:" where the path is at fault.
 */
int tr_init_from_load(const tr_config *cfg, trs_model *model, tr_ckpt_warn_fn warn, void *ctx, char *loaded,
                      const char **which, tr_error *err);

#endif
