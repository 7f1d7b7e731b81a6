/*
 * best.h -- RUN_DIR/best.json, the run directory's record of its best checkpoints by checkpoint.monitor, and
 * what a run directory given to init.from or predict means (its best checkpoint).
 */
#ifndef TR_BEST_H
#define TR_BEST_H

#include <stddef.h>

#include "error.h"
#include "monitor.h"

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

#endif
