/*
 * model_spec.h -- models/NAME.yaml: a sequential layer list, parsed strictly into the shim's trs_layer array.
 *
 * Format:
 *   input: [1, 28, 28]          # per-sample shape: [D] or [C, H, W]
 *   layers:
 *     - flatten
 *     - linear: {in: 784, out: 256}          # bias: true
 *     - relu
 *     - conv2d: {in: 1, out: 32, kernel: 3, stride: 1, padding: 1, bias: true}
 *     - batchnorm2d: {features: 32, eps: 1.0e-5, momentum: 0.1}
 *     - maxpool2d: {kernel: 2}               # stride defaults to kernel, padding 0
 *     - dropout: {p: 0.25}
 *     - adaptive_avgpool2d: {out: [1, 1]}
 *     - layernorm: {features: 256, eps: 1.0e-5}
 * A layer with no options is a plain scalar (`- relu`); one with options is a one-key mapping. Unknown layer
 * kinds and option names (with did-you-mean), duplicates, wrong types and out-of-range values are errors naming
 * FILE:LINE:COL and the key path (e.g. "layers[3].linear.out").
 * Layer i gets PyTorch nn.Sequential parameter names "i.weight", "i.bias", ...
 */
#ifndef TR_MODEL_SPEC_H
#define TR_MODEL_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "trainrun_shim.h"

typedef struct tr_model_spec {
    int64_t input_shape[3];   /**< per-sample input shape                  */
    int input_ndim;           /**< 1 ([D]), 2 ([T, D]) or 3 ([C, H, W])    */
    trs_layer *layers;        /**< n_layers entries, malloc'd              */
    size_t n_layers;
} tr_model_spec;

/** Parse a model YAML file. Returns TR_OK, or TR_E_CONFIG with "FILE:LINE:COL: path: message" in err. */
int tr_model_spec_load(const char *path, tr_model_spec *out, tr_error *err);

/** Same for YAML text; `name` stands in for the file name in messages. */
int tr_model_spec_load_string(const char *yaml, const char *name, tr_model_spec *out, tr_error *err);

/** Free what a successful load allocated (safe on a zeroed struct). */
void tr_model_spec_free(tr_model_spec *spec);

#endif
