/*
 * trainrun_shim.h -- the C ABI over libtorch.
 *
 * This header is the only door between the C runtime and libtorch. It has no tensor type: persistent state
 * (parameters, buffers, optimizer state) lives behind opaque handles and is changed in place by the shim. Input
 * crosses as a host batch view (pointer + shape); output is a plain struct of scalars (a double loss and integer
 * counts). Every tensor built for a step dies at the end of that step's C++ scope.
 *
 * Conventions (after sqlite3.h):
 *  - every function returns a trs_status; TRS_OK (0) is success;
 *  - functions taking a handle keep their error message in the handle: read it with trs_model_errmsg() /
 *    trs_optimizer_errmsg(). The string is owned by the handle and valid until the next call on it;
 *  - functions without a handle (creation, global settings) keep their message in a thread-local buffer read with
 *    trs_last_error(); the caller never frees it;
 *  - no C++ exception crosses this ABI: each exported function catches everything and returns a status.
 *
 * Prefix: trs_ (trainrun shim).
 */
#ifndef TRAINRUN_SHIM_H
#define TRAINRUN_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes returned by every shim function. */
typedef enum trs_status {
    TRS_OK = 0,          /**< success */
    TRS_E_INVALID = 1,   /**< invalid argument: NULL handle, bad shape, bad option value */
    TRS_E_RUNTIME = 2,   /**< libtorch raised an error (shape mismatch in forward, ...) */
    TRS_E_NOMEM = 3,     /**< an allocation failed */
    TRS_E_NONFINITE = 4, /**< the loss was NaN or infinite (on any rank); the optimizer step was skipped */
    TRS_E_DIST = 5,      /**< a collective failed: a peer process died or closed its connection, or the process
                              group's timeout passed; the process group is unusable afterwards */
    TRS_E_STOPPED = 6    /**< the caller asked to stop (a stop callback) while the call waited: nothing was made */
} trs_status;

/** Message of the last failing handle-less call on this thread ("" if none). Never NULL; do not free. */
const char *trs_last_error(void);

/** libtorch version string the shim was compiled against, e.g. "1.13.1". Static storage. */
const char *trs_torch_version(void);

/* ------------------------------------------------------------------------------------------------ global */

/**
 * Seed libtorch's default CPU generator (torch.manual_seed). Affects parameter initialisation and dropout masks.
 * Returns TRS_OK, or TRS_E_RUNTIME (message in trs_last_error()).
 */
trs_status trs_manual_seed(uint64_t seed);

/**
 * Set thread counts before the first op.
 *  intra_op:  libtorch intra-op (OpenMP) threads, >= 1.
 *  inter_op:  libtorch inter-op threads, >= 1, or 0 to leave libtorch's default; libtorch accepts this only once
 *             per process and only before inter-op work starts: a later different value is TRS_E_RUNTIME.
 *  blas:      BLAS threads (OpenBLAS' openblas_set_num_threads when that symbol is loaded), >= 1, or 0 to leave
 *             alone. Pinning BLAS to 1 avoids OpenMP x OpenBLAS oversubscription. A libtorch with MKL inside
 *             (the PyPI wheels) gives MKL intra_op threads itself, and this value is then not used.
 * Returns TRS_OK, TRS_E_INVALID (negative / zero intra_op) or TRS_E_RUNTIME; message in trs_last_error().
 */
trs_status trs_set_threads(int intra_op, int inter_op, int blas);

/**
 * Turn torch's deterministic-algorithms mode on (1) or off (0) (torch.use_deterministic_algorithms), together with
 * cuDNN's deterministic flag (torch.backends.cudnn.deterministic); turning it on also turns cuDNN's benchmark mode
 * off (torch.backends.cudnn.benchmark = False), since autotuning may pick a different algorithm on each run. Ops
 * without a deterministic implementation then raise an error instead of running. In CUDA builds, turning it on sets
 * CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment unless it is already set (cuBLAS needs it to be deterministic,
 * and libtorch refuses cuBLAS calls in deterministic mode without it); call this before the first CUDA op.
 * Returns TRS_OK or TRS_E_RUNTIME.
 */
trs_status trs_set_deterministic(int on);

/** Read back the thread counts in effect (any pointer may be NULL). blas: OpenBLAS' count, else MKL's
 *  (mkl_get_max_threads), else -1 (unknown). */
trs_status trs_get_threads(int *intra_op, int *inter_op, int *blas);

/**
 * Pin glibc malloc's thresholds (mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD), in bytes. With glibc's defaults
 * the mmap threshold starts at 128 KiB and rises only when the process happens to free a large mmap'd block, so a
 * step's large activations and gradients may be mmap'd, zero-filled by page faults and unmapped again on every
 * step, which slows a step down by the page faults (bench/RESULTS.md, "malloc"). Pinning the
 * mmap threshold at its maximum (32 MiB on 64-bit glibc) and the trim threshold well above a step's working set
 * keeps those blocks in the heap for reuse. Both are needed: setting either one freezes glibc's dynamic threshold.
 * This is process-wide; call it once, before the first step.
 *  mmap_threshold:  bytes, 0 < x <= 32 MiB (glibc's HEAP_MAX limit for this option), or 0 to leave it alone.
 *  trim_threshold:  bytes, >= 0; 0 leaves it alone.
 * Returns TRS_OK; TRS_E_INVALID for a negative or out-of-range value; TRS_E_RUNTIME when the C library is not
 * glibc or the allocator refuses mallopt (a sanitizer's allocator does; callers carry on with a warning).
 * Message in trs_last_error().
 */
trs_status trs_set_malloc_thresholds(int64_t mmap_threshold, int64_t trim_threshold);

/* ------------------------------------------------------------------------------------------------ model */

/** Layer kinds a model spec may use. Each maps to the PyTorch nn module of the same name. */
typedef enum trs_layer_kind {
    TRS_LAYER_LINEAR = 0,          /**< nn.Linear(in, out, bias)                                  */
    TRS_LAYER_CONV2D,              /**< nn.Conv2d(in, out, kernel, stride, padding, bias)         */
    TRS_LAYER_BATCHNORM1D,         /**< nn.BatchNorm1d(features=out, eps, momentum)               */
    TRS_LAYER_BATCHNORM2D,         /**< nn.BatchNorm2d(features=out, eps, momentum)               */
    TRS_LAYER_LAYERNORM,           /**< nn.LayerNorm([out], eps)                                  */
    TRS_LAYER_RELU,                /**< nn.ReLU()                                                 */
    TRS_LAYER_GELU,                /**< nn.GELU()                                                 */
    TRS_LAYER_MAXPOOL2D,           /**< nn.MaxPool2d(kernel, stride (0 = kernel), padding)        */
    TRS_LAYER_AVGPOOL2D,           /**< nn.AvgPool2d(kernel, stride (0 = kernel), padding)        */
    TRS_LAYER_ADAPTIVE_AVGPOOL2D,  /**< nn.AdaptiveAvgPool2d((out_h, out_w))                      */
    TRS_LAYER_DROPOUT,             /**< nn.Dropout(p)                                             */
    TRS_LAYER_FLATTEN,             /**< nn.Flatten() (start_dim 1)                                */
    TRS_LAYER_COUNT_
} trs_layer_kind;

/**
 * One layer of a sequential model. Unused fields are ignored for a kind. Parameter names follow PyTorch's
 * nn.Sequential: layer i's parameters are "i.weight", "i.bias", BatchNorm buffers "i.running_mean",
 * "i.running_var", "i.num_batches_tracked".
 */
typedef struct trs_layer {
    trs_layer_kind kind;
    int64_t in;        /**< linear: in_features; conv2d: in_channels                                 */
    int64_t out;       /**< linear: out_features; conv2d: out_channels; norms: num_features / size   */
    int64_t kernel;    /**< conv2d / pools: square kernel size                                       */
    int64_t stride;    /**< conv2d (>=1) / pools (0 = same as kernel)                                */
    int64_t padding;   /**< conv2d / pools: zero padding on each side                                */
    int64_t out_h;     /**< adaptive_avgpool2d: output height                                         */
    int64_t out_w;     /**< adaptive_avgpool2d: output width                                          */
    int bias;          /**< linear / conv2d: 1 = with bias                                            */
    double eps;        /**< norms: epsilon (PyTorch default 1e-5)                                     */
    double momentum;   /**< batchnorm: running-stat momentum (PyTorch default 0.1)                    */
    double p;          /**< dropout: drop probability in [0, 1)                                       */
} trs_layer;

/** Opaque model handle: an nn.Sequential or a TorchScript module, its parameters and buffers, on the CPU or a CUDA
 * device. */
typedef struct trs_model trs_model;

/**
 * Build a sequential model from `n_layers` layer specs and initialise it with PyTorch's default initialisers
 * (drawing from the default CPU generator in layer order, as PyTorch does: seed first for reproducibility).
 * `input_shape` is the per-sample shape ([D], [T, D], [C, H, W], ...; `input_ndim` 1 .. TRS_MAX_DIMS - 1): a dry
 * forward of a batch of 2 zeros under no_grad checks that the layers fit together; a mismatch fails naming the
 * layer index. The output must have rank >= 2: [N, C], or [N, T, C] (a linear layer acts on the last dim).
 * On success *out is a new handle (free with trs_model_free). On failure *out is NULL and the message is in
 * trs_last_error(). Errors: TRS_E_INVALID (NULL arguments, bad layer values, layers that don't fit),
 * TRS_E_RUNTIME, TRS_E_NOMEM.
 */
trs_status trs_model_create(const trs_layer *layers, size_t n_layers, const int64_t *input_shape, int input_ndim,
                            trs_model **out);

/**
 * Load a TorchScript module saved in PyTorch with torch.jit.save(torch.jit.script(m), path) as a model: the same
 * handle as trs_model_create's, trained by the same calls. Its parameters and buffers are the module's
 * (named_parameters / named_buffers), its state entries named and ordered as the Python module's state_dict();
 * the module starts in train mode. Every forward runs with the graph executor's optimisations off (bit-identical
 * steps across processes and resumes; see torchscript.cpp). `input_shape` is the per-sample shape of the data
 * (input_ndim 1 to TRS_MAX_DIMS - 1): a dry forward of 2 zero samples in eval mode under no_grad (no buffer
 * changes, no random draws) must give a float32 output of shape [2, K] or [2, T, K]. The samples are float32
 * zeros; a forward that fails on them and runs on int64 zeros takes token ids (e.g. [N, T] into an nn.Embedding):
 * its steps then take batch->x_ids only (trs_model_input_dtype says which).
 * On failure *out is NULL and the message, which starts with `path`, is in trs_last_error().
 * `path` is an archive as torch.jit.save writes it, or that archive gzip'd (told apart by its magic bytes).
 * Errors: TRS_E_INVALID for NULL arguments and for each refusal: not a TorchScript archive (or a gzip'd one that
 * is corrupt or inflates past 4 GiB); a forward that does not take one input and return one output (further
 * arguments need defaults); no parameters (e.g. torch.jit.freeze'd);
 * BatchNorm or dropout with a constant train/eval flag (torch.jit.trace'd); a dry
 * forward that fails or gives another shape or dtype (both shapes named). TRS_E_NOMEM, TRS_E_RUNTIME.
 */
trs_status trs_model_load_torchscript(const char *path, const int64_t *input_shape, int input_ndim,
                                      trs_model **out);

/**
 * Run the TorchScript module's method `method` (defined in the Python nn.Module, marked @torch.jit.export, taking
 * no arguments besides self) once, under no_grad, to initialise its parameters in place -- drawing from the default
 * CPU generator, so seed first (trs_manual_seed): the same seed gives the same weights as the same call in PyTorch
 * after torch.manual_seed. For archives that ship placeholder weights (zeros compress to nothing) and draw their
 * initialisation at start-up, e.g. models/gpt.py's init_weights. Call it after loading and before creating the
 * optimizer, the EMA or moving the model to a device. The method may change values only: every state_dict entry
 * keeps its name, shape and dtype, and every floating-point entry must come out finite.
 * Errors: TRS_E_INVALID (NULL or empty arguments; a sequential model; no such method; a method that takes
 * arguments without defaults; a method that raises -- its error is in the message; an entry re-bound to another
 * name, shape or dtype; non-finite values after it), TRS_E_NOMEM, TRS_E_RUNTIME. The message is in
 * trs_last_error().
 */
trs_status trs_model_run_init(trs_model *model, const char *method);

/** Free a model (NULL is a no-op). Optimizers created on it must be freed first. */
void trs_model_free(trs_model *model);

/** Message of the last failing call on `model` ("" if none). NULL handle gives a static message. */
const char *trs_model_errmsg(const trs_model *model);

/** Total number of parameter elements (trainable and not; buffers excluded) into *count. */
trs_status trs_model_param_count(trs_model *model, int64_t *count);

/** Number of output features (logits per sample) of the model, from the dry forward at creation: the size of the
 * output's last dim (C of [N, C] or of [N, T, C]). */
trs_status trs_model_output_dim(trs_model *model, int64_t *dim);

/**
 * The per-sample output shape from the dry forward at creation ([C], or [T, C] for outputs [N, T, C]): *ndim gets
 * its rank (at most TRS_MAX_DIMS - 1) and shape[0..*ndim) its sizes; shape must hold TRS_MAX_DIMS values. Either
 * pointer may be NULL. Errors: TRS_E_INVALID (NULL model).
 */
trs_status trs_model_output_shape(trs_model *model, int64_t *shape, int *ndim);

/**
 * Digest of the model's state, for tests and traces. which: TRS_DIGEST_PARAMS (parameters and buffers, in
 * state_dict order) or TRS_DIGEST_GRADS (parameter .grad; an undefined grad counts as no bytes).
 * *crc = zlib crc32 over the raw bytes, *abs_sum = sum of |x| in double, *defined = number of tensors that had data.
 * Any output pointer may be NULL.
 */
typedef enum trs_digest_kind { TRS_DIGEST_PARAMS = 0, TRS_DIGEST_GRADS = 1 } trs_digest_kind;
trs_status trs_model_digest(trs_model *model, trs_digest_kind which, uint32_t *crc, double *abs_sum,
                            int64_t *defined);

/** Element types of state entries. */
typedef enum trs_dtype { TRS_DTYPE_FLOAT32 = 0, TRS_DTYPE_INT64 = 1, TRS_DTYPE_UINT8 = 2, TRS_DTYPE_OTHER = 3 } trs_dtype;

/**
 * The dtype of the model's input, into *dtype: TRS_DTYPE_FLOAT32 (batch->x), or TRS_DTYPE_INT64 (batch->x_ids:
 * token ids) for a TorchScript module whose dry forward failed on float32 zeros and ran on int64 zeros. A model
 * spec's model is always FLOAT32. Errors: TRS_E_INVALID (NULL argument).
 */
trs_status trs_model_input_dtype(trs_model *model, trs_dtype *dtype);

/** Most dimensions a state entry may have. */
#define TRS_MAX_DIMS 8

/** Number of state_dict entries (parameters and buffers) into *count. */
trs_status trs_model_state_count(trs_model *model, int64_t *count);

/**
 * Describe state_dict entry `index` (0-based, in PyTorch's state_dict order: module by module, its parameters then
 * its buffers). name: its dotted name ("3.weight", "1.num_batches_tracked"), NUL-terminated and truncated to
 * name_size; shape: up to TRS_MAX_DIMS sizes; ndim, dtype. Any output may be NULL.
 * Errors: TRS_E_INVALID (NULL model, index out of range).
 */
trs_status trs_model_state_entry(trs_model *model, int64_t index, char *name, size_t name_size, int64_t *shape,
                                 int *ndim, trs_dtype *dtype);

/** One state entry as the *_state_describe functions give it: what trs_model_state_entry gives, for every entry
 *  at once. */
typedef struct trs_state_desc {
    char name[256];              /**< dotted name ("3.weight", "state.0.exp_avg"), NUL-terminated, at most 255 bytes */
    int64_t shape[TRS_MAX_DIMS]; /**< sizes; ndim of them are set                                                   */
    int ndim;
    trs_dtype dtype;
    size_t nbytes;               /**< numel x element size (a 0-dim entry has one element)                          */
} trs_state_desc;

/**
 * Every state_dict entry at once, in trs_model_state_entry's order, from one walk of the module tree (the per-entry
 * functions walk it on each call: O(n^2) calls' worth for a checkpoint of n entries). *count gets the number of
 * entries; the first min(*count, cap) are described in out[] (out may be NULL when cap is 0). A name longer than
 * 255 bytes is an error, not truncated. Errors: TRS_E_INVALID (NULL model or count, cap < 0, out NULL with cap > 0,
 * an entry with more than TRS_MAX_DIMS dims or a longer name).
 */
trs_status trs_model_state_describe(trs_model *model, trs_state_desc *out, int64_t cap, int64_t *count);

/**
 * Copy every state_dict entry i (0 <= i < count) into dst[i], nbytes[i] bytes (which must equal the entry's:
 * numel x element size; row-major, native byte order), from one walk of the module tree: the snapshot a checkpoint
 * takes. count must equal the number of entries. Errors: TRS_E_INVALID naming the first entry whose size differs,
 * a count that differs, NULL arrays.
 */
trs_status trs_model_state_read_all(trs_model *model, void *const *dst, const size_t *nbytes, int64_t count);

/**
 * Overwrite state_dict entry `index` in place with nbytes from src (under no_grad; the parameter keeps its
 * identity, so optimizers bound to it stay valid). dtype must be the entry's. Errors: TRS_E_INVALID (NULL, index
 * out of range, dtype or size mismatch).
 */
trs_status trs_model_state_write(trs_model *model, int64_t index, const void *src, size_t nbytes, trs_dtype dtype);

/* ------------------------------------------------------------------------------------------------ optimizer */

typedef enum trs_optim_kind { TRS_OPT_SGD = 0, TRS_OPT_ADAM, TRS_OPT_ADAMW } trs_optim_kind;

/**
 * Optimizer options, named and defaulted as torch.optim. Fields not used by `kind` are ignored.
 * SGD: lr, momentum, dampening, weight_decay, nesterov (needs momentum > 0 and dampening == 0, as PyTorch).
 * Adam / AdamW: lr, beta1, beta2, eps, weight_decay (Adam: L2 added to the gradient; AdamW: decoupled), amsgrad,
 * fused.
 */
typedef struct trs_optim_options {
    trs_optim_kind kind;
    double lr;
    double momentum;
    double dampening;
    double weight_decay;
    int nesterov;
    double beta1;
    double beta2;
    double eps;
    int amsgrad;
    /* Weight-decay exclusion (timm's param_groups_weight_decay). When no_decay_1d is 1 or any pattern is given,
     * the parameters split into two param_groups: group 0 keeps weight_decay, group 1 has weight_decay 0 and holds
     * every parameter with ndim <= 1 or a name ending in ".bias" (no_decay_1d), or whose state_dict name matches
     * one of the fnmatch(3) glob patterns ("3.*", "*.weight"). An empty group is left out. */
    int no_decay_1d;
    const char *const *no_decay;   /**< [n_no_decay] glob patterns over state_dict names; may be NULL       */
    size_t n_no_decay;
    /* Adam/AdamW: 1 = step with one fused pass over each parameter's elements instead of libtorch's optimizer
     * step (about eight elementwise calls per parameter); bit for bit the same parameters and state
     * (shim/src/optim_fused.cpp), used only where that holds: a CPU model, no amsgrad, a CPU with AVX2 and FMA, and
     * a once-per-process check against libtorch's step passing (see trs_optimizer_fused). A step with any state
     * that is not contiguous float32 runs libtorch's own. 0 = always libtorch's own step. Ignored by SGD. */
    int fused;
} trs_optim_options;

/** Opaque optimizer handle bound to one model. */
typedef struct trs_optimizer trs_optimizer;

/**
 * Create an optimizer over all of `model`'s parameters: one param group, or two when weight decay is excluded
 * (no_decay_1d / no_decay). On failure *out is NULL, the status is TRS_E_INVALID (NULL, negative lr, nesterov
 * without momentum, ...) and the message is in trs_model_errmsg(model).
 */
trs_status trs_optimizer_create(trs_model *model, const trs_optim_options *opts, trs_optimizer **out);

/** Free an optimizer (NULL is a no-op). */
void trs_optimizer_free(trs_optimizer *opt);

/** Message of the last failing call on `opt` ("" if none). */
const char *trs_optimizer_errmsg(const trs_optimizer *opt);

/**
 * Describe param group `group` (0-based): its parameter count, its weight_decay, and its parameters' names into
 * `names` (comma-separated state_dict names, truncated to names_size; may be NULL). *count gets the number of
 * groups when group is -1 (then the other outputs are untouched). Errors: TRS_E_INVALID (group out of range).
 */
trs_status trs_optimizer_param_group(trs_optimizer *opt, int64_t group, int64_t *count, double *weight_decay,
                                     char *names, size_t names_size);

/** Set the learning rate of every param group (lr >= 0). */
trs_status trs_optimizer_set_lr(trs_optimizer *opt, double lr);

/** Read the learning rate of the first param group. */
trs_status trs_optimizer_get_lr(trs_optimizer *opt, double *lr);

/**
 * The optimizer's per-parameter state as named entries, as torch.optim's state_dict names them:
 * "state.<i>.momentum_buffer" (SGD with momentum), "state.<i>.step" (Adam/AdamW: int64, 0-dim), "state.<i>.exp_avg",
 * "state.<i>.exp_avg_sq", "state.<i>.max_exp_avg_sq" (amsgrad), where i is the parameter's index in the model's
 * parameter order. Parameters that have no state yet (before the first step) have no entries.
 * Describe / copy every entry at once, as trs_model_state_describe / trs_model_state_read_all do for the model (the
 * entry-by-entry count, entry and read are test-only: trainrun_shim_test.h).
 */
trs_status trs_optimizer_state_describe(trs_optimizer *opt, trs_state_desc *out, int64_t cap, int64_t *count);
trs_status trs_optimizer_state_read_all(trs_optimizer *opt, void *const *dst, const size_t *nbytes, int64_t count);

/**
 * Set one state entry by name from bytes (creating the parameter's state if it has none). The shape must equal
 * the parameter's (a step is a single int64). Errors: TRS_E_INVALID naming the entry (unknown name or field for
 * this optimizer, parameter index out of range, shape/dtype/size mismatch).
 */
trs_status trs_optimizer_state_load(trs_optimizer *opt, const char *name, const void *src, size_t nbytes,
                                    trs_dtype dtype, const int64_t *shape, int ndim);

/* ------------------------------------------------------------------------------------------------ RNG */

/** Size in bytes of the default CPU generator's state (5056 for libtorch's mt19937 + normal cache). */
trs_status trs_rng_state_size(size_t *nbytes);

/** Copy the default CPU generator's full state into dst (nbytes must equal trs_rng_state_size). */
trs_status trs_rng_get_state(void *dst, size_t nbytes);

/**
 * Restore the default CPU generator's state. A state of the wrong size is refused with TRS_E_INVALID and a message
 * naming both sizes (trs_last_error()).
 */
trs_status trs_rng_set_state(const void *src, size_t nbytes);

/**
 * Draw n standard-normal doubles from the default CPU generator, one at a time (ATen's normal_distribution, which
 * caches the second Box-Muller value inside the generator state). For tests and diagnostics of generator state.
 */
trs_status trs_rng_normal(double *out, size_t n);

/* ------------------------------------------------------------------------------------------------ steps */

/**
 * A host batch view. Nothing is copied until the step; the memory must stay valid during the call. Every array is
 * C-contiguous (row-major) in native byte order.
 *  x:       float32 input, shape [shape[0], ..., shape[ndim-1]] = [N, ...]: any rank 2 .. TRS_MAX_DIMS, e.g.
 *           [N, D], [N, T, D], [N, C, H, W]. A model spec's `input` must equal shape[1..ndim).
 *  x_ids:   int64 input instead of x (token ids, e.g. [N, T]); exactly one of x and x_ids is set. A sequential
 *           (model.spec) model has no embedding layer and refuses it (TRS_E_RUNTIME from the forward); a
 *           TorchScript model takes the one its trs_model_input_dtype says (TRS_E_INVALID for the other).
 *  y:       int64 class indices (cross_entropy only). y_ndim 0: shape [N]. Otherwise shape
 *           [y_shape[0] = N, ..., y_shape[y_ndim-1]], and it must equal the output's shape without its last (class)
 *           dim: [N] for outputs [N, C], [N, T] for outputs [N, T, C]. Each index is in [0, C) or equals
 *           TRS_IGNORE_INDEX (-100), which PyTorch's F.cross_entropy leaves out of the loss's mean and trainrun
 *           leaves out of the counts.
 *  target:  float32 targets (bce_with_logits: multi-hot 0/1 per class; mse, smooth_l1: regression values).
 *           y_ndim 0: shape [N, K], K = the model's output dim. Otherwise its shape is y_shape[0..y_ndim) and must
 *           equal the output's shape (e.g. [N, T, K]). NULL for cross_entropy.
 *  y_ndim, y_shape: the targets' shape (y or target), 0 = the [N] / [N, K] defaults above; at most TRS_MAX_DIMS.
 * The fields after `target` were added after the first version of this view; zero-initialise the struct
 * ((trs_batch){...} or memset) and old code keeps its meaning.
 */
typedef struct trs_batch {
    const float *x;
    int64_t shape[TRS_MAX_DIMS];
    int ndim;
    const int64_t *y;
    const float *target;
    const int64_t *x_ids;
    int y_ndim;
    int64_t y_shape[TRS_MAX_DIMS];
} trs_batch;

/** The class index cross_entropy ignores (PyTorch's default ignore_index of F.cross_entropy). */
#define TRS_IGNORE_INDEX (-100)

/**
 * Loss kinds, each the mean over the batch as torch.nn.functional computes it (reduction 'mean'):
 *  TRS_LOSS_CROSS_ENTROPY:   F.cross_entropy(logits.reshape(-1, C), y.reshape(-1), ignore_index=-100,
 *                            label_smoothing) for logits [N, C] with y [N], or [N, T, C] with y [N, T] (the class
 *                            dim is the last); mean over the targets that are not -100 (NaN when every one is).
 *  TRS_LOSS_BCE_WITH_LOGITS: F.binary_cross_entropy_with_logits(logits [N, K], target [N, K]); mean over N*K.
 *  TRS_LOSS_MSE:             F.mse_loss(outputs [N, K], target [N, K]); mean over N*K.
 *  TRS_LOSS_SMOOTH_L1:       F.smooth_l1_loss(outputs [N, K], target [N, K], beta=1.0); mean over N*K.
 *  The last three take outputs of any rank with targets of the same shape ([N, T, K]); the mean is over all.
 */
typedef enum trs_loss_kind {
    TRS_LOSS_CROSS_ENTROPY = 0,
    TRS_LOSS_BCE_WITH_LOGITS = 1,
    TRS_LOSS_MSE = 2,
    TRS_LOSS_SMOOTH_L1 = 3
} trs_loss_kind;

/** A process group (see "distributed" below). */
typedef struct trs_dist trs_dist;

/**
 * Numeric precision of a step (Lightning's `precision` names). TRS_PRECISION_BF16_MIXED: the forward pass runs
 * under CPU autocast to bfloat16 (torch.autocast("cpu", dtype=torch.bfloat16): matmuls and convolutions in
 * bfloat16, the ops autocast keeps in float32 in float32); parameters, gradients, optimizer state and EMA stay
 * float32, and the loss is reduced in float32 from the output cast to float32. trs_eval_batch runs under the same
 * autocast when given it. On a CUDA device the same runs under CUDA autocast (torch.autocast("cuda",
 * dtype=torch.bfloat16)).
 */
typedef enum trs_precision {
    TRS_PRECISION_32 = 0,        /**< float32 throughout                                          */
    TRS_PRECISION_BF16_MIXED = 1 /**< bfloat16 autocast of the forward pass, float32 master weights */
} trs_precision;

/** Options for a training step. */
typedef struct trs_step_options {
    trs_loss_kind loss;
    double label_smoothing;   /**< cross_entropy label smoothing in [0, 1) (torch.nn.CrossEntropyLoss)          */
    double grad_clip_norm;    /**< clip the global L2 norm of all gradients to this (<= 0: off; clip_grad_norm_) */
    int top_k;                /**< cross_entropy: also count samples whose label is among the k largest logits
                                   (torch.topk); 0 = off; must be <= K                                            */
    int64_t accumulate_steps; /**< train step: split the batch into this many micro-batches of ceil(N / A)
                                   samples, each forward/backward with its loss scaled by n_i / N so the gradients
                                   sum to those of the whole batch (gradient accumulation); 0 or 1 = one pass    */
    trs_dist *dist;           /**< NULL: one process. Otherwise gradients are averaged over this process group
                                   right after backward, in buckets of dist_bucket_bytes, before clipping and the
                                   optimizer step, as DistributedDataParallel does                               */
    size_t dist_bucket_bytes; /**< with dist: gradient bucket size in bytes (0: 25 MiB, DDP's bucket_cap_mb)     */
    trs_precision precision;  /**< TRS_PRECISION_32 (0, the default) or TRS_PRECISION_BF16_MIXED, for train steps
                                   and trs_eval_batch alike (trs_predict always runs in float32)                 */
} trs_step_options;

/** What leaves a step: scalars only. */
typedef struct trs_step_result {
    double loss;          /**< mean loss over the batch (double of the float32 value)                         */
    int64_t samples;      /**< N                                                                              */
    int64_t correct;      /**< cross_entropy: targets whose argmax logit equals the label (positions, for [N, T]
                               labels; -100 positions excluded); bce_with_logits:
                               samples whose every class is predicted right (logit > 0 <=> target > 0.5);
                               regression: 0                                                                   */
    double grad_norm;     /**< global L2 gradient norm before clipping (train step with clipping on), else 0 */
    int64_t topk_correct; /**< cross_entropy with top_k > 0: samples whose label is among the top_k logits     */
    double sse;           /**< mse / smooth_l1: sum over N*K of (output - target)^2, in double                */
    double sae;           /**< mse / smooth_l1: sum over N*K of |output - target|, in double                  */
    int64_t elements;     /**< mse / smooth_l1: N*K (the count behind sse and sae); else 0                     */
    int64_t targets;      /**< cross_entropy: class targets counted in correct and topk_correct -- those not
                               TRS_IGNORE_INDEX (N for [N] labels without -100; the unmasked positions of [N, T]
                               labels); other losses: N. Accuracy is correct / targets                          */
} trs_step_result;

/**
 * Per-class counts of one evaluated batch, written into caller arrays (overwritten, not added to: the runtime
 * accumulates). K = num_classes must equal the model's output dim. Any array may be NULL.
 *  confusion: [K, K] int64, row = true class, column = argmax prediction (cross_entropy).
 *  tp, fp, fn: [K] int64 each (bce_with_logits): predicted positive = logit > 0 (sigmoid > 0.5), true positive
 *              = target > 0.5.
 */
typedef struct trs_class_counts {
    int64_t num_classes;
    int64_t *confusion;
    int64_t *tp, *fp, *fn;
} trs_class_counts;

/** Opaque handle of an exponential moving average of a model's weights (see the EMA section below). */
typedef struct trs_ema trs_ema;

/**
 * One optimisation step: zero_grad, forward in train mode, loss, backward (per micro-batch when
 * opts->accumulate_steps > 1), [gradient averaging over opts->dist], optional global-norm clipping, optimizer
 * step. The loss and counts (this process's batch only) are written to *res. If the loss is not finite, no step is
 * taken and TRS_E_NONFINITE is returned (res is still filled); with a process group, a non-finite loss on any rank
 * makes every rank skip the step and return TRS_E_NONFINITE. Errors: TRS_E_INVALID (NULL, shape/ndim, label out
 * of range, missing target), TRS_E_RUNTIME (forward failed; the model stays usable), TRS_E_DIST (the gradient
 * all-reduce failed). Message in trs_model_errmsg(model).
 */
trs_status trs_train_step(trs_model *model, trs_optimizer *opt, const trs_batch *batch,
                          const trs_step_options *opts, trs_step_result *res);

/**
 * Evaluate one batch with the live weights (ema NULL) or with the EMA weights of `ema` (made on this model),
 * under NoGradGuard with the model in eval() mode; the previous mode is restored afterwards. With an EMA, the
 * parameters' and buffers' storage is swapped with the EMA's for the forward pass and swapped back before
 * returning (set_data, as assigning `.data` in PyTorch: no copy, no allocation), so the live weights, their
 * gradients and requires_grad flags are exactly as before, however the call ends. `counts` may be NULL. Errors as trs_train_step;
 * TRS_E_INVALID also for an EMA of another model or counts of the wrong K.
 */
trs_status trs_eval_batch(trs_model *model, trs_ema *ema, const trs_batch *batch, const trs_step_options *opts,
                          trs_step_result *res, trs_class_counts *counts);

/**
 * Predict: the model's outputs for a batch, copied into caller memory. Runs the forward under NoGradGuard with the
 * model in eval() mode (the previous mode is restored afterwards), with the live weights (ema NULL) or the EMA's
 * (swapped in and out as in trs_eval_batch). Only batch->x or batch->x_ids and the input shape are read (no
 * targets). The output (float32, raw logits or regression values, no softmax) is written row-major to
 * out[0 .. numel), and nothing is kept: every tensor of the call dies before it returns.
 *  out, out_count:      caller buffer of out_count floats; out_count must be >= the output's numel (N x C, or
 *                       N x T x C). out may be NULL with out_count 0 to ask for the shape only.
 *  out_shape, out_ndim: (may be NULL) the output's shape [N, ...] (room for TRS_MAX_DIMS values) and rank.
 * Errors: TRS_E_INVALID (NULL model or batch, bad batch shape, out_count too small: the message names the count
 * needed, and out_shape / out_ndim are still filled), TRS_E_RUNTIME (the forward failed), TRS_E_NOMEM.
 */
trs_status trs_predict(trs_model *model, trs_ema *ema, const trs_batch *batch, float *out, size_t out_count,
                       int64_t *out_shape, int *out_ndim);

/** Sampling options of trs_generate. */
typedef struct trs_sample_options {
    double temperature; /**< > 0: the logits are divided by it (1: the model's distribution; small: near argmax) */
    int64_t top_k;      /**< > 0: only the top_k most likely tokens can be drawn (1 = greedy argmax); 0 = all   */
    uint64_t seed;      /**< seed of the sampling generator (its own: the default generator is untouched)     */
} trs_sample_options;

/**
 * Generate n_new token ids after prompt[0..n_prompt) into out[0..n_new) (caller memory), one at a time: the
 * model (in eval() mode under no_grad, live weights or the EMA's) maps the last min(length, T) ids -- T = the
 * per-sample input length the model was loaded with -- to logits [1, t, V]; the last position's logits / temperature,
 * cut to the top_k largest, go through a softmax and one multinomial draw from a CPU generator seeded with
 * opts->seed (nanoGPT's sample.py). The same weights, prompt, options and seed give the same ids; top_k 1 gives the
 * argmax (greedy) continuation. Nothing is kept. Errors: TRS_E_INVALID (NULL, an empty prompt, a prompt id outside
 * [0, V), temperature <= 0, a model that does not take int64 ids [N, T] to [N, T, V] logits), TRS_E_RUNTIME (the
 * forward failed), TRS_E_NOMEM.
 */
trs_status trs_generate(trs_model *model, trs_ema *ema, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                        const trs_sample_options *opts, int64_t *out);

/* ------------------------------------------------------------------------------------------------ EMA */

/**
 * EMA options.
 *  decay:  in [0, 1]. Each update does, under no_grad and in place, ema = decay_t * ema + (1 - decay_t) * live
 *          (ema.mul_(decay_t).add_(live, alpha=1 - decay_t)), for every parameter and -- buffers_average 1 --
 *          every floating-point buffer; otherwise buffers are copied. Integer buffers (BatchNorm's
 *          num_batches_tracked) are always copied.
 *  warmup: 1: decay_t = min(decay, (1 + t) / (10 + t)) with t = updates done before this one -- the num_updates
 *          warm-up of TensorFlow's tf.train.ExponentialMovingAverage (also timm's ModelEma lineage); 0: decay_t =
 *          decay.
 */
typedef struct trs_ema_options {
    double decay;
    int warmup;
    int buffers_average;
} trs_ema_options;

/**
 * Make an EMA of `model`: an fp32 copy of every state_dict entry (integer buffers keep their dtype), made once,
 * never requiring grad; update count 0. On failure *out is NULL and the message is in trs_model_errmsg(model).
 * Errors: TRS_E_INVALID (NULL, decay outside [0, 1]), TRS_E_NOMEM. Free it before its model.
 */
trs_status trs_ema_create(trs_model *model, const trs_ema_options *opts, trs_ema **out);

/** Free an EMA (NULL is a no-op). */
void trs_ema_free(trs_ema *ema);

/** Message of the last failing call on `ema` ("" if none). */
const char *trs_ema_errmsg(const trs_ema *ema);

/** One update from the model's current weights (formula above); the update count goes up by one. */
trs_status trs_ema_update(trs_ema *ema);

/** Copy the model's current weights into the EMA and set the update count to 0 (a fresh start). */
trs_status trs_ema_reset(trs_ema *ema);

/** Read / set the number of updates done (t in the warm-up formula; a checkpoint carries it). t >= 0. */
trs_status trs_ema_get_updates(trs_ema *ema, int64_t *updates);
trs_status trs_ema_set_updates(trs_ema *ema, int64_t updates);

/**
 * The EMA's state entries: the same names, order, shapes and dtypes as the model's state_dict
 * (trs_model_state_*). Write overwrites in place under no_grad. Errors: TRS_E_INVALID (index, size, dtype).
 */
trs_status trs_ema_state_count(trs_ema *ema, int64_t *count);
trs_status trs_ema_state_entry(trs_ema *ema, int64_t index, char *name, size_t name_size, int64_t *shape,
                               int *ndim, trs_dtype *dtype);
trs_status trs_ema_state_write(trs_ema *ema, int64_t index, const void *src, size_t nbytes, trs_dtype dtype);
/** Describe / copy every EMA entry at once, as trs_model_state_describe / trs_model_state_read_all do. */
trs_status trs_ema_state_describe(trs_ema *ema, trs_state_desc *out, int64_t cap, int64_t *count);
trs_status trs_ema_state_read_all(trs_ema *ema, void *const *dst, const size_t *nbytes, int64_t count);

/* ------------------------------------------------------------------------------------------------ memory */

#define TRS_MAX_CUDA_DEVICES 16

/**
 * Memory statistics, all in bytes or counts.
 * CPU: kept by a caching allocator over libtorch's default CPU allocator (installed on the first shim call that
 * can allocate: trs_manual_seed, trs_set_threads, trs_model_create, trs_memory_stats_get).
 *  allocated_bytes is the sum of the sizes requested by live tensor storages -- the CPU analogue of
 *  torch.cuda.memory_allocated(); memory that libraries allocate outside libtorch's allocator (BLAS and oneDNN
 *  scratch buffers, malloc) is not in it. Tensors wrapped around caller memory (the batch view) are not counted.
 *  reserved_bytes is what the allocator holds from the system: live blocks and cached (freed, kept for reuse)
 *  blocks, each with its 64-byte header and its rounding (trs_memory_configure) -- torch.cuda.memory_reserved().
 *  reserved_bytes - allocated_bytes is what the cache and the rounding cost; reserved / allocated is the
 *  fragmentation figure the watchdog reports. rss_bytes is the process's resident set (/proc/self/statm), which
 *  also counts code, BLAS buffers, the data set and malloc'd memory; peak_rss_bytes is getrusage's ru_maxrss.
 * CUDA (builds against a CUDA-enabled libtorch only; cuda_devices is 0 otherwise): the caching allocator's
 * per-device allocated and reserved bytes (torch.cuda.memory_allocated / memory_reserved).
 */
typedef struct trs_memory_stats {
    int64_t allocated_bytes;     /**< live bytes in CPU tensor storages                           */
    int64_t peak_bytes;          /**< highest allocated_bytes since start                       */
    int64_t live_allocations;    /**< live CPU allocations                                         */
    int64_t total_allocations;   /**< CPU allocations ever made                                    */
    int64_t reserved_bytes;      /**< bytes held from the system: live + cached blocks             */
    int64_t peak_reserved_bytes; /**< highest reserved_bytes since start                        */
    int64_t cached_bytes;        /**< reserved bytes in freed blocks kept for reuse                */
    int64_t cache_hits;          /**< allocations served from the cache                            */
    int64_t cache_releases;      /**< times the cache was given back (empty_cache, limit)          */
    int cache_enabled;           /**< 1 when freed blocks are cached                               */
    int64_t rss_bytes;           /**< the process's resident set size now                          */
    int64_t peak_rss_bytes;      /**< the process's peak resident set size (ru_maxrss)             */
    int cuda_devices;            /**< devices filled in below                                      */
    int64_t cuda_allocated_bytes[TRS_MAX_CUDA_DEVICES];
    int64_t cuda_reserved_bytes[TRS_MAX_CUDA_DEVICES];
    int64_t cuda_peak_allocated_bytes[TRS_MAX_CUDA_DEVICES];
} trs_memory_stats;

/**
 * Read the process-wide memory statistics into *stats. The CUDA figures are the caching allocator's device
 * statistics (the aggregate pool of its per-device statistics): allocated = bytes of live blocks
 * handed to tensors (torch.cuda.memory_allocated), reserved = bytes obtained from cudaMalloc and not yet released
 * (torch.cuda.memory_reserved). Errors: TRS_E_INVALID (NULL).
 */
trs_status trs_memory_stats_get(trs_memory_stats *stats);

/**
 * Configure the CPU allocator (process-wide: the last call wins when several runs share a process).
 *  cache:   1 keeps freed blocks in free lists bucketed by rounded size and reuses them for requests of the same
 *           rounded size (sizes round up to 512 B, as c10's CUDA caching allocator's kMinBlockSize; from 10 MiB on
 *           to whole 2 MiB pages, kRoundLarge, mapped 2 MiB-aligned with MADV_HUGEPAGE); blocks are never split.
 *           0 frees every block at once (and gives back what is cached now): libtorch's own behaviour.
 *  cache_limit_bytes: > 0 gives the cache back whenever reserved bytes would exceed it; 0 = no limit.
 *  backtrace: 1 records the call stack of every allocation from now on (costly: bench/MEMORY.md), so that
 *           trs_memory_key_backtrace can name where a growing (phase, size) key was allocated.
 * Returns TRS_OK; TRS_E_INVALID for a negative limit.
 */
trs_status trs_memory_configure(int cache, int64_t cache_limit_bytes, int backtrace);

/**
 * Give every cached block back to the system (torch.cuda.empty_cache()); live tensors are untouched. Meant for
 * phase changes (after an evaluation pass, before a checkpoint), never for every step. *released_bytes (may be
 * NULL) gets the reserved bytes given back. Returns TRS_OK.
 */
trs_status trs_memory_empty_cache(int64_t *released_bytes);

/** The step phase a live block was allocated in. The shim sets it around each part of a step. */
typedef enum trs_mem_phase {
    TRS_PHASE_OUTSIDE = 0,   /**< outside any step (the caller, set-up, loading)                     */
    TRS_PHASE_FORWARD,       /**< train step: forward pass and loss                                  */
    TRS_PHASE_BACKWARD,      /**< train step: backward, gradient all-reduce                          */
    TRS_PHASE_OPTIMIZER,     /**< train step: gradient clipping and the optimizer step               */
    TRS_PHASE_METRICS,       /**< train step: counting correct predictions                           */
    TRS_PHASE_EVAL,          /**< evaluation batches                                                  */
    TRS_PHASE_EMA,           /**< EMA reset and update                                                */
    TRS_PHASE_CHECKPOINT,    /**< state reads and writes of a checkpoint (trs_memory_set_phase)      */
    TRS_PHASE_COUNT
} trs_mem_phase;

/** "train forward", "eval", ...: the phase's name for reports; "unknown phase" outside the enum. */
const char *trs_memory_phase_name(int phase);

/**
 * Tag this thread's allocations from now on with `phase` (the runtime marks its checkpoint code this way);
 * *previous (may be NULL) gets the phase in effect before. Errors: TRS_E_INVALID (phase outside the enum).
 */
trs_status trs_memory_set_phase(int phase, int *previous);

/** Live CPU blocks of one (phase, requested size): a line of a memory snapshot. */
typedef struct trs_memory_key {
    int phase;          /**< trs_mem_phase that allocated them            */
    int64_t size;       /**< bytes each block's storage requested         */
    int64_t blocks;     /**< live blocks of this phase and size           */
    int64_t bytes;      /**< their bytes (blocks * size)                  */
} trs_memory_key;

/**
 * Snapshot of the live blocks grouped by (phase, size), sorted by phase then size. Up to `cap` keys go to out;
 * *count gets the number of keys there are (call again with a larger buffer when *count > cap).
 * Errors: TRS_E_INVALID (count NULL, out NULL with cap > 0).
 */
trs_status trs_memory_live_keys(trs_memory_key *out, size_t cap, size_t *count);

/**
 * The call stack of the newest live block of (phase, size) that was allocated while backtraces were on
 * (trs_memory_configure), one frame a line, innermost first: "function (library+0xoffset)", C++ names demangled.
 * buf gets "" (and *frames 0) when no such block has a stack. Errors: TRS_E_INVALID (buf NULL, cap 0).
 */
trs_status trs_memory_key_backtrace(int phase, int64_t size, char *buf, size_t cap, int *frames);

/**
 * TEST ONLY (config key debug.leak_bytes_per_step): after every successful train step, keep a new tensor of
 * `bytes_per_step` bytes alive inside the model handle until it is freed -- a deliberate leak that the watchdog
 * must detect. 0 turns it off (what is already kept stays). Errors: TRS_E_INVALID (NULL, negative).
 */
trs_status trs_debug_set_leak(trs_model *model, int64_t bytes_per_step);

/**
 * TEST ONLY (config key debug.leak_bytes_per_eval_batch): every evaluation batch keeps a new tensor of `bytes`
 * bytes alive inside the model handle -- a leak in the eval pass, which the leak report must attribute to eval.
 * 0 turns it off. Errors: TRS_E_INVALID (NULL, negative).
 */
trs_status trs_debug_set_eval_leak(trs_model *model, int64_t bytes_per_batch);
/* ------------------------------------------------------------------------------------------------ devices */

/*
 * Where a model's tensors live: the CPU (the default) or one CUDA device. A model is built on the CPU (its
 * initialisation draws from the CPU generator, as PyTorch's modules do, so a seed gives the same initial weights on
 * every device) and moved once with trs_model_to_device, before optimizers and EMAs are created on it; from then on
 * its parameters, buffers, gradients, optimizer state and EMA copy stay on that device. Batches still cross the ABI
 * as host views: on a CUDA device the step copies them into pinned (page-locked) host memory and on to the device
 * with non_blocking copies, and the scalars of trs_step_result come back together in one device-to-host copy --
 * the step's one synchronisation with the device, after backward and before the optimizer step (the finiteness of
 * the loss decides whether the step is taken). Checkpoint reads and writes (trs_*_state_*) copy through the host.
 * CUDA needs a build against a CUDA-enabled libtorch (TRAINRUN_CUDA in CMake): elsewhere trs_cuda_built() is 0,
 * trs_cuda_device_count() gives 0 and every CUDA request fails with TRS_E_INVALID.
 */

/** Kinds of devices. */
typedef enum trs_device_type { TRS_DEVICE_CPU = 0, TRS_DEVICE_CUDA = 1 } trs_device_type;

/** 1 if the shim was compiled against a CUDA-enabled libtorch (TRAINRUN_CUDA), else 0. */
int trs_cuda_built(void);

/**
 * Number of CUDA devices this process can use (torch.cuda.device_count()) into *count: 0 in CPU-only builds, or
 * without a driver or device. Errors: TRS_E_INVALID (NULL).
 */
trs_status trs_cuda_device_count(int *count);

/**
 * Move the model's parameters and buffers to `type` / `index` (CUDA: 0 <= index < trs_cuda_device_count(); CPU:
 * index ignored), in place: the parameters keep their identity (nn.Module.to). Call it before creating optimizers
 * or EMAs on the model: state they already hold does not move. Errors: TRS_E_INVALID (NULL, unknown type, no such
 * CUDA device, or a CPU-only build), TRS_E_RUNTIME, TRS_E_NOMEM (the device ran out of memory); message in
 * trs_model_errmsg(model).
 */
trs_status trs_model_to_device(trs_model *model, trs_device_type type, int index);

/** The device the model lives on into *type and *index (CPU: index -1); either pointer may be NULL. */
trs_status trs_model_device(trs_model *model, trs_device_type *type, int *index);

/**
 * The state of CUDA device `index`'s default generator (torch.cuda.get_rng_state(index)), as bytes: its size, a
 * copy into dst (nbytes must equal the size), or a new state from src (torch.cuda.set_rng_state). A checkpoint
 * keeps every visible device's (torch.cuda.get_rng_state_all). Errors: TRS_E_INVALID (NULL, no such device, a
 * size that differs: a state saved by another libtorch), TRS_E_RUNTIME; message in trs_last_error().
 */
trs_status trs_cuda_rng_state_size(int index, size_t *nbytes);
trs_status trs_cuda_rng_get_state(int index, void *dst, size_t nbytes);
trs_status trs_cuda_rng_set_state(int index, const void *src, size_t nbytes);

/**
 * Release the blocks the CUDA caching allocator holds but no tensor uses (torch.cuda.empty_cache()), on every
 * device: `reserved` falls to what is allocated. The runtime calls it only at phase changes (after an evaluation
 * pass, before a checkpoint), never per step: a released block must be cudaMalloc'd again, which synchronises the
 * device. A no-op returning TRS_OK in CPU-only builds. Errors: TRS_E_RUNTIME.
 */
trs_status trs_cuda_empty_cache(void);

/**
 * Free and total bytes of CUDA device `index` (cudaMemGetInfo; torch.cuda.mem_get_info). Errors: TRS_E_INVALID
 * (NULL, no such device, a CPU-only build), TRS_E_RUNTIME; message in trs_last_error().
 */
trs_status trs_cuda_memory_info(int index, int64_t *free_bytes, int64_t *total_bytes);

/** 1 if this shim can record the CUDA caching allocator's history and write its snapshot (a CUDA build against
 *  libtorch 2.1 or later), else 0: the two calls below then fail with TRS_E_INVALID. */
int trs_cuda_memory_snapshot_built(void);

/**
 * Start (enable 1) or stop (0) recording the CUDA caching allocator's history: every allocation and free, with
 * its C++ stack, the newest max_entries (>= 1) kept (torch.cuda.memory._record_memory_history(enabled="all",
 * context="all", stacks="all", max_entries=...)). Recording costs a stack walk per allocation: meant for a run
 * that asked for snapshots, from the warm-up on. Errors: TRS_E_INVALID (max_entries < 1, no CUDA device, or
 * !trs_cuda_memory_snapshot_built()), TRS_E_RUNTIME; message in trs_last_error().
 */
trs_status trs_cuda_memory_record_history(int enable, int64_t max_entries);

/**
 * The caching allocator's snapshot -- segments, blocks, and the recorded history with stacks -- pickled as
 * torch.cuda.memory._snapshot() would be dumped (the file PyTorch's memory_viz opens,
 * https://pytorch.org/memory_viz), into a malloc'd buffer: *data (free() it) and *nbytes. Errors: TRS_E_INVALID
 * (NULL, no CUDA device, or !trs_cuda_memory_snapshot_built()), TRS_E_NOMEM, TRS_E_RUNTIME.
 */
trs_status trs_cuda_memory_snapshot(void **data, size_t *nbytes);

/* ------------------------------------------------------------------------------------------------ distributed */

/*
 * Data-parallel training on PyTorch's own c10d, as torch.distributed with init_method "env://": a TCPStore
 * rendezvous (rank 0 serves it at MASTER_ADDR:MASTER_PORT) and a ProcessGroupGloo over TCP. Builds against a
 * CUDA-enabled libtorch also create a ProcessGroupNCCL (its store keys under the prefix "nccl/"), which serves the
 * collectives on CUDA tensors -- the model broadcast and the gradient buckets of a model on a CUDA device (each rank
 * on its own device: trs_model_to_device(model, TRS_DEVICE_CUDA, local_rank)); host values (scalar all-reduces,
 * all-gathers of bytes, barriers) always go through Gloo. Collectives must be called by every rank in the same order. Every collective
 * waits at most the group's timeout; a peer that dies closes its sockets and fails the collective at once.
 * All functions return TRS_OK, TRS_E_INVALID (NULL or bad argument), TRS_E_DIST (the collective failed: the group
 * is unusable afterwards) or TRS_E_RUNTIME; the message is in trs_dist_errmsg().
 */

/**
 * Join a process group from the environment variables torchrun sets: RANK (0 .. WORLD_SIZE-1), WORLD_SIZE (>= 1),
 * LOCAL_RANK (optional, default RANK), MASTER_ADDR (host or address of rank 0), MASTER_PORT (its TCP port).
 * Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) every rank is a client of the agent's store, under the key
 * prefix /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, as PyTorch's env:// rendezvous does.
 * GLOO_SOCKET_IFNAME, when set, names the network interface Gloo binds (as in PyTorch); otherwise Gloo binds the
 * address MASTER_ADDR resolves to when that is a loopback address, else this host's name.
 * timeout_seconds (> 0) bounds the rendezvous and every later collective: reaching the store (a client retries
 * until rank 0 serves it), then every rank joining ("trainrun/joined", counted in the store: all WORLD_SIZE within
 * timeout_seconds of this call, or none goes on), then Gloo's connections among the joined ranks.
 * should_stop (may be NULL) is polled while the rendezvous waits, at least every second: when it returns nonzero
 * (a signal's stop request) the call gives up at once with TRS_E_STOPPED.
 * On success *out is a new handle (free with trs_dist_free). On failure *out is NULL and the message is in
 * trs_last_error(): TRS_E_INVALID names the missing or malformed variable; TRS_E_DIST says the rendezvous failed
 * (nobody answered at MASTER_ADDR:MASTER_PORT within the timeout, the port is taken, or only J of WORLD_SIZE ranks
 * joined within it: a rank that never started or died); TRS_E_STOPPED: should_stop asked to stop.
 */
trs_status trs_dist_create_from_env(double timeout_seconds, int (*should_stop)(void *ctx), void *ctx, trs_dist **out);

/** Leave the group and free the handle (NULL is a no-op). Not a collective: peers are not waited for. */
void trs_dist_free(trs_dist *dist);

/** Message of the last failing call on `dist` ("" if none). */
const char *trs_dist_errmsg(const trs_dist *dist);

/** This process's rank, the group's size and the rank on this machine (LOCAL_RANK); any pointer may be NULL. */
trs_status trs_dist_info(const trs_dist *dist, int *rank, int *world_size, int *local_rank);

/**
 * Copy rank 0's parameters and buffers (every state_dict entry) into every rank's model, in place under no_grad
 * (torch.distributed.broadcast of each entry, as DistributedDataParallel does at construction). Collective.
 */
trs_status trs_dist_broadcast_model(trs_dist *dist, trs_model *model);

/** Sum n doubles / int64 values over the group in place (all-reduce, sum). Collective. */
trs_status trs_dist_allreduce_double(trs_dist *dist, double *values, size_t n);
trs_status trs_dist_allreduce_int64(trs_dist *dist, int64_t *values, size_t n);

/**
 * Gather a fixed-size byte blob from every rank: dst[r * nbytes .. (r+1) * nbytes) = rank r's src, on every rank
 * (torch.distributed.all_gather). nbytes must be equal on every rank; dst holds world_size * nbytes. Collective.
 */
trs_status trs_dist_allgather_bytes(trs_dist *dist, const void *src, size_t nbytes, void *dst);

/**
 * Where the group's time went, since creation (any pointer may be NULL):
 *  allreduce_seconds:  wall seconds waiting for all-reduce collectives (gradient buckets and scalars);
 *  grad_sync_seconds:  wall seconds averaging the gradients in train steps, flattening and copying back included;
 *  allreduce_calls:    all-reduce collectives issued;
 *  allreduce_bytes:    bytes this rank contributed to them.
 */
trs_status trs_dist_stats(const trs_dist *dist, double *allreduce_seconds, double *grad_sync_seconds,
                          int64_t *allreduce_calls, int64_t *allreduce_bytes);

#ifdef __cplusplus
}
#endif
#endif /* TRAINRUN_SHIM_H */
