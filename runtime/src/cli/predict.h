/*
 * predict.h -- `trainrun predict`: a trained model's predictions for the configured test data, as CSV.
 *
 *   trainrun predict RUN_DIR_OR_CHECKPOINT [key=value ...] -o PREDS.csv
 *
 * RUN_DIR is a run directory (its config.yaml and the newest checkpoint that verifies are used) or one of its
 * checkpoints (RUN_DIR/checkpoints/step-N, verified). The overrides apply to the run's config.yaml, e.g. to point
 * the test keys (data.test_images / data.test_csv / data.test_inputs, ...) at other data. The test data is read as
 * the run read it (same normalisation, same standardisation statistics from the training split) and fed in
 * eval.batch_size chunks to trainrun_trainer_predict (eval mode, no_grad, live weights). One CSV row per test
 * sample, with a header:
 *   cross_entropy:   index,target,predicted,p_0,...,p_{C-1}          (softmax probabilities)
 *   bce_with_logits: index,target_0..,predicted_0..,p_0..             (sigmoid probabilities, predicted = p > 0.5)
 *   mse, smooth_l1:  index,target_0..,output_0..                      (in the units the model was trained in)
 * Unlabeled inputs (npy: data.test_inputs without data.test_targets; image folders: --images DIR) give the same rows
 * without the target columns, and no accuracy or MSE line.
 * Floats are printed with 9 significant digits (float32 round-trips). Prints a one-line summary (samples,
 * checkpoint, accuracy or MSE) to stdout.
 * Exit codes: 0; 1 (I/O, data, libtorch, a checkpoint that does not verify or fit); 2 (usage, config, no test data,
 * outputs of [T, C] per sample, which the CSV does not hold: use trainrun_trainer_predict).
 */
#ifndef TR_PREDICT_H
#define TR_PREDICT_H

#include "error.h"

/**
 * The run directory and checkpoint that `path` names, each into [TR_PATH_MAX]: a checkpoint directory (it has a
 * MANIFEST.json; verified; its run directory is two levels up, RUN_DIR/checkpoints/step-N) or a run directory
 * (its best checkpoint by best.json when it has one, else its newest that verifies). Errors: TR_E_CONFIG (not a directory), TR_E_RUNTIME (none verifies).
 */
int tr_resolve_checkpoint(const char *path, char *run_dir, char *ckpt, tr_error *err);

/**
 * tr_resolve_checkpoint, then the run's config.yaml into config (config_size bytes): what predict, sample and
 * export open a run by. Errors: tr_resolve_checkpoint's; TR_E_CONFIG when the run directory has no readable
 * config.yaml (the message says to give a run directory or one of its checkpoints).
 */
int tr_resolve_run_config(const char *path, char *run_dir, char *ckpt, char *config, size_t config_size,
                          tr_error *err);

/** `trainrun predict ...`: argv[0] is "predict". */
int tr_cli_predict(int argc, char **argv);

#endif
