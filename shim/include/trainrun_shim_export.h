/*
 * trainrun_shim_export.h -- a trained TorchScript model back out as a TorchScript archive (shim/src/export.cpp).
 * Kept out of trainrun_shim.h so that adding it recompiles nothing else.
 */
#ifndef TRAINRUN_SHIM_EXPORT_H
#define TRAINRUN_SHIM_EXPORT_H

#include "trainrun_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Write the TorchScript module of `model` to `path` as torch.jit.save does (libtorch's jit Module::save): its code as
 * loaded and its parameters and buffers as they are now -- the trained values, since training changes the module's
 * own tensors in place. torch.jit.load opens the file in Python and in libtorch. Tensors on a CUDA device are
 * written from a CPU copy of the module, so the archive loads on any machine; the model itself is not moved.
 * Errors (message in trs_last_error()): TRS_E_INVALID (NULL arguments; a sequential model from a model YAML, which
 * has no TorchScript code to write), TRS_E_RUNTIME (libtorch could not write the file), TRS_E_NOMEM.
 */
trs_status trs_model_save_torchscript(trs_model *model, const char *path);

#ifdef __cplusplus
}
#endif

#endif
