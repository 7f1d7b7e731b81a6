/*
 * export.h -- `trainrun export`: a trained TorchScript run back out as a TorchScript archive for PyTorch.
 *
 *   trainrun export RUN_DIR_OR_CHECKPOINT [-o MODEL.pt] [--weights live|ema] [key=value ...]
 *
 * The run's config.yaml names the model (its copy of the archive, RUN_DIR/model.pt) and the data that gives its
 * per-sample input shape (or model.input_shape); the checkpoint (a run directory's best by best.json, else its
 * newest that verifies, or the one given) gives the weights: the live ones, or with --weights ema the EMA's
 * (ema.safetensors; its buffers too when ema.buffers averaged them, the live ones otherwise). The archive is written
 * as torch.jit.save writes it (default MODEL.pt: RUN_DIR/export.pt), through a temporary name and a rename;
 * torch.jit.load opens it in Python and in libtorch, and its outputs are trainrun predict's.
 * A run of a model YAML has no TorchScript code to write: export says so and where its state_dict is (the
 * checkpoint's model.safetensors) and docs/torchscript.md has the PyTorch loader.
 * Exit codes: 0; 2 (usage, config, a model YAML run, a checkpoint without EMA weights for --weights ema); 1 (I/O,
 * libtorch).
 */
#ifndef TR_EXPORT_H
#define TR_EXPORT_H

/** `trainrun export ...`: argv[0] is "export". */
int tr_cli_export(int argc, char **argv);

#endif
