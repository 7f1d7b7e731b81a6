/*
 * config_schema.c -- the config's schema (config_internal.h): one tr_yf_field row per key -- dotted path, type,
 * offset into tr_config, default, range, one-line doc -- in the order of config files and of the reference.
 */
#include "config_internal.h"

#include <stddef.h>

#include "device.h"
#include "monitor.h"

/* Enum fields are stored through int-sized writes. */
_Static_assert(sizeof(tr_optim_name) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_schedule_name) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_loss_name) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_progress_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_data_format) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_image_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_vocab_cfg) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_token_dtype) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_watchdog_action) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_schedule_interval) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_eval_weights) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_ema_buffers) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_target_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_monitor_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(tr_threshold_mode) == sizeof(int), "enum size");

/* Enum names, index = enum value. */
const char *const tr_config_formats[] = {"idx", "csv", "npy", "text", "tokens", "image_folder", NULL};
static const char *const k_image_modes[] = {"L", "RGB", "RGBA", NULL};
static const char *const k_image_caches[] = {"auto", "memory", "none", "disk", NULL};
static const char *const k_vocabs[] = {"bytes", "chars", NULL};
static const char *const k_token_dtypes[] = {"uint16", "uint32", NULL};
static const char *const k_optims[] = {"sgd", "adam", "adamw", NULL};
static const char *const k_precisions[] = {"32", "bf16-mixed", NULL};
static const char *const k_schedules[] = {"constant", "step", "cosine", "multistep", "plateau", NULL};
static const char *const k_modes[] = {"min", "max", NULL};
static const char *const k_threshold_modes[] = {"rel", "abs", NULL};
static const char *const k_intervals[] = {"step", "epoch", NULL};
const char *const tr_config_weights[] = {"live", "ema", "both", NULL};
static const char *const k_ema_buffers[] = {"copy", "average", NULL};
static const char *const k_targets[] = {"class", "multi_hot", "regression", NULL};
const char *const tr_config_losses[] = {"cross_entropy", "bce_with_logits", "mse", "smooth_l1", NULL};
static const char *const k_progress[] = {"auto", "always", "never", NULL};
static const char *const k_wd_actions[] = {"warn", "checkpoint_exit", NULL};
static const char *const k_eval_splits[] = {"val", "test", NULL};

static const double k_default_mean[] = {0.2860};
static const double k_default_std[] = {0.3530};
static const double k_default_milestones[] = {0.0};

/* Rows by type. */
#define OFF(m) offsetof(tr_config, m)
#define K_INT(path, m, def, rng, doc_) \
    {.name = path, .type = TR_YF_INT, .offset = OFF(m), .def_int = (def), .range = rng, .doc = doc_}
#define K_I64(path, m, def, rng, doc_) \
    {.name = path, .type = TR_YF_INT64, .offset = OFF(m), .def_int = (def), .range = rng, .doc = doc_}
#define K_U64(path, m, def, rng, doc_) \
    {.name = path, .type = TR_YF_UINT64, .offset = OFF(m), .def_int = (def), .range = rng, .doc = doc_}
#define K_F64(path, m, def, rng, doc_) \
    {.name = path, .type = TR_YF_FLOAT, .offset = OFF(m), .def_float = (def), .range = rng, .doc = doc_}
#define K_BOOL(path, m, def, doc_) {.name = path, .type = TR_YF_BOOL, .offset = OFF(m), .def_int = (def), .doc = doc_}
#define K_STR(path, m, def, doc_)                                                                     \
    {.name = path, .type = TR_YF_STRING, .offset = OFF(m), .size = sizeof(((tr_config *)0)->m), \
     .def_str = (def), .doc = doc_}
#define K_ENUM(path, m, names, def, doc_) \
    {.name = path, .type = TR_YF_ENUM, .offset = OFF(m), .enum_names = (names), .def_int = (def), .doc = doc_}
#define K_FLIST(path, m, n_m, def, rng, doc_)                                                              \
    {.name = path, .type = TR_YF_FLOAT_LIST, .offset = OFF(m), .size = TR_MAX_CHANNELS, .aux_offset = OFF(n_m), \
     .def_list = (def), .def_n = (int)(sizeof(def) / sizeof((def)[0])), .range = rng, .doc = doc_}

/** The `device` key's syntax (device.h). */
static int check_device(const char *text, char *why, size_t n) { return tr_device_parse(text, NULL, why, n); }

/** A monitored metric's name (monitor.h): val_loss, val_accuracy, val_ema_micro_f1, ... */
static int check_monitor(const char *text, char *why, size_t n) { return tr_monitor_parse(text, NULL, why, n); }
/** The same, or "" for off. */
static int check_monitor_or_off(const char *text, char *why, size_t n)
{
    return text[0] ? tr_monitor_parse(text, NULL, why, n) : 0;
}

/** The schema: one row per key, in the order of config files and of the reference. */
const tr_yf_field tr_config_schema[] = {
    K_U64("seed", seed, 0, TR_YF_GE(0), "seed of parameter init, dropout and data order"),
    {.name = "device",
     .type = TR_YF_STRING,
     .offset = OFF(device),
     .size = sizeof(((tr_config *)0)->device),
     .def_str = "cpu",
     .check_string = check_device,
     .doc = "where the model, optimizer state and EMA live: cpu, cuda (cuda:LOCAL_RANK in a multi-process run, "
            "else cuda:0) or cuda:N; CUDA needs a build against a CUDA-enabled libtorch"},
    K_INT("threads", threads, 0, TR_YF_CC(0, 1024), "intra-op threads (BLAS pinned to 1); 0 = auto = 1"),
    K_INT("interop_threads", interop_threads, 1, TR_YF_CC(0, 1024), "inter-op threads; 0 = libtorch's default"),
    K_BOOL("deterministic", deterministic, false, "use torch deterministic algorithms"),
    K_BOOL("malloc_tuning", malloc_tuning, true,
           "pin glibc malloc's mmap (32 MiB) and trim (256 MiB) thresholds; off when GLIBC_TUNABLES sets malloc"),
    K_ENUM("precision", precision, k_precisions, TR_PRECISION_32,
           "32: float32 throughout; bf16-mixed: the forward pass (train and eval) under autocast to bfloat16 on the "
           "run's device (CPU or CUDA), float32 weights, optimizer state, EMA, checkpoints and loss reduction"),

    K_ENUM("data.format", data.format, tr_config_formats, TR_DATA_IDX,
           "data set file format: idx (MNIST-style), csv (numeric tables), npy (NumPy .npy / .npz arrays), text "
           "(UTF-8 text files, language modelling), tokens (flat uint16 / uint32 token ids, nanoGPT's train.bin), "
           "image_folder (PNG / JPEG files in one folder per class, torchvision's ImageFolder layout)"),
    K_STR("data.root", data.root, "/usr/share/datasets/fashion-mnist",
          "directory of the data files (relative: to the config file's directory)"),
    K_STR("data.train_images", data.train_images, "train-images-idx3-ubyte.gz", "training images, under data.root"),
    K_STR("data.train_labels", data.train_labels, "train-labels-idx1-ubyte.gz", "training labels, under data.root"),
    K_STR("data.test_images", data.test_images, "t10k-images-idx3-ubyte.gz", "test images, under data.root"),
    K_STR("data.test_labels", data.test_labels, "t10k-labels-idx1-ubyte.gz",
          "test labels, under data.root; empty = the test images alone (unlabeled), which trainrun predict reads and "
          "training does not evaluate"),
    K_I64("data.val_size", data.val_size, 5000, TR_YF_GE(0), "samples carved from the training set for validation"),
    K_I64("data.train_subset", data.train_subset, 0, TR_YF_GE(0),
          "use only the first N training samples (data.val_size is carved from these); 0 = all"),
    K_I64("data.test_subset", data.test_subset, 0, TR_YF_GE(0), "use only the first N test samples; 0 = all"),
    K_FLIST("data.mean", data.mean, data.n_mean, k_default_mean, TR_YF_ANY,
            "per-channel mean subtracted after scaling pixels to [0, 1]"),
    K_FLIST("data.std", data.std, data.n_std, k_default_std, TR_YF_GT(0), "per-channel std divided by after the mean"),
    K_BOOL("data.shuffle", data.shuffle, true, "shuffle the training order every epoch"),
    K_STR("data.train_csv", data.train_csv, "",
          "csv format: training table (.csv or .csv.gz), under data.root (a path starting with ./ or ../: relative "
          "to the config file)"),
    K_STR("data.train_targets", data.train_targets, "",
          "csv format: a second table holding the target columns, row for row; empty = data.train_csv. npy format: "
          "the targets array (.npy, or FILE.npz:NAME), [N] class indices or [N, K] multi_hot / regression values"),
    K_STR("data.test_csv", data.test_csv, "", "csv format: test table; empty = carve data.test_size from training"),
    K_STR("data.test_targets", data.test_targets, "",
          "csv format: test targets table; empty = data.test_csv (a test table without the target columns: "
          "unlabeled inputs, which trainrun predict reads and training does not evaluate). npy format: the test targets array; empty with "
          "data.test_inputs set = unlabeled inputs, which trainrun predict reads and training does not evaluate"),
    K_STR("data.train_inputs", data.train_inputs, "",
          "npy format: the training inputs array [N, ...] (.npy, or FILE.npz:NAME; float32, float64, uint8, int32 or "
          "int64, converted to float32 as they are), under data.root (./ or ../: relative to the config file)"),
    K_STR("data.test_inputs", data.test_inputs, "", "npy format: the test inputs array; empty = no test set"),
    K_I64("data.header_lines", data.header_lines, 0, TR_YF_GE(0), "csv format: lines skipped at the top of each table"),
    K_STR("data.feature_columns", data.feature_columns, "",
          "csv format: feature columns, 0-based, e.g. \"0-29\" or \"0,2,5-7\" (negative counts from the end); "
          "empty = every column that is not a target (all columns when the targets have their own table)"),
    K_STR("data.target_columns", data.target_columns, "-1",
          "csv format: target columns of the targets table, same syntax"),
    K_ENUM("data.target", data.target, k_targets, TR_TARGET_CLASS,
           "csv format: class (one column of class indices), multi_hot (one 0/1 column per class), regression"),
    K_I64("data.test_size", data.test_size, 0, TR_YF_GE(0),
          "csv format: samples carved from training for the test set (before validation); with data.test_csv "
          "they are held out all the same and the test set is that table"),
    K_BOOL("data.standardize", data.standardize, false,
           "z-score every feature (and regression target) with the training split's mean and std"),
    K_BOOL("data.prefetch", data.prefetch, true, "prepare the next batch on a worker thread while the step runs"),
    K_I64("data.augment.crop_padding", data.augment.crop_padding, 0, TR_YF_CC(0, 64),
          "training images: pad every side by N pixels (black) and cut a random window of the original size "
          "(torchvision RandomCrop(size, padding=N)); 0 = off"),
    K_F64("data.augment.hflip", data.augment.hflip, 0.0, TR_YF_CC(0, 1),
          "training images: probability of a horizontal flip (torchvision RandomHorizontalFlip(p)); 0 = off"),
    K_STR("data.train_text", data.train_text, "",
          "text format: comma-separated UTF-8 text files, under data.root (./ or ../: relative to the config file), "
          "read in order as one text; the last data.val_fraction of it is the validation split"),
    K_ENUM("data.vocab", data.vocab, k_vocabs, TR_VOCAB_CFG_BYTES,
           "text format: bytes (256 tokens, one per byte value) or chars (the Unicode characters of the training "
           "split, sorted; stored in RUN_DIR/vocab.json and in checkpoints)"),
    K_STR("data.train_tokens", data.train_tokens, "",
          "tokens format: the training token ids, a flat little-endian file of data.token_dtype (nanoGPT's train.bin)"),
    K_STR("data.val_tokens", data.val_tokens, "",
          "tokens format: the validation token ids (val.bin); empty = the last data.val_fraction of train_tokens"),
    K_ENUM("data.token_dtype", data.token_dtype, k_token_dtypes, TR_TOKEN_UINT16, "tokens format: uint16 or uint32"),
    K_I64("data.block_size", data.block_size, 64, TR_YF_CC(1, 1048576),
          "text / tokens: tokens per window (the model's input [N, block_size] int64 ids; targets shifted by one)"),
    K_F64("data.val_fraction", data.val_fraction, 0.1, TR_YF_CO(0, 1),
          "text / tokens: the held-out contiguous tail of the tokens used for validation; 0 = none"),
    K_I64("data.val_windows", data.val_windows, 0, TR_YF_GE(0),
          "text / tokens: most validation windows (consecutive, non-overlapping, from the tail's start); 0 = all"),
    K_STR("data.train_root", data.train_root, "",
          "image_folder: the training folder, ROOT/CLASS/.../FILE.png or .jpg; the classes are its sorted sub-folder "
          "names (as ImageFolder); under data.root unless absolute or starting with ./ or ../ (the config file's)"),
    K_STR("data.val_root", data.val_root, "",
          "image_folder: the validation folder (sub-folders named as the training classes); empty = data.val_size "
          "samples carved from training"),
    K_STR("data.test_root", data.test_root, "", "image_folder: the test folder; empty = no test set"),
    K_ENUM("data.image_mode", data.image_mode, k_image_modes, TR_IMAGE_RGB,
           "image_folder: what every image is converted to, PIL's modes: L (1 channel), RGB (3; ImageFolder's "
           "default loader), RGBA (4)"),
    {.name = "data.image_size",
     .type = TR_YF_FLOAT_LIST,
     .offset = OFF(data.image_size),
     .size = TR_MAX_CHANNELS,
     .aux_offset = OFF(data.n_image_size),
     .def_list = k_default_milestones,
     .def_n = 0,
     .range = TR_YF_CC(1, 65536),
     .doc = "image_folder: [H, W] of every sample: images of another size are resized to it (PIL's bilinear, as "
            "torchvision's Resize((H, W))); [] = the first training image's size, which every image must have"},
    K_I64(
        "data.resize_shorter", data.resize_shorter, 0, TR_YF_CC(0, 65536),
        "image_folder: S > 0 = torchvision's Resize(S) (shorter side to S, bilinear) then CenterCrop(data.image_size)"),
    K_I64("data.max_image_pixels", data.max_image_pixels, 89478485, TR_YF_CC(1, (double)((int64_t)1 << 32)),
          "image_folder: an image whose header claims more than W x H pixels is refused (PIL's MAX_IMAGE_PIXELS)"),
    K_BOOL("data.skip_bad_files", data.skip_bad_files, false,
           "image_folder: decode every file once at load and skip (and count) those that fail, instead of stopping "
           "with an error naming the file"),
    K_ENUM("data.cache", data.cache, k_image_caches, TR_IMAGE_CACHE_AUTO,
           "image_folder: keep each sample's decoded (and resized) 8-bit pixels in memory after its first decode, so "
           "later epochs and evaluations read no file: memory (always), none (decode every time), auto (when all "
           "splits together take at most a quarter of the memory available), disk (as memory, and kept across runs in "
           "a file under data.cache_dir, keyed by the files' names, sizes, times and the decode settings: later runs "
           "read no image file at all)"),
    K_STR("data.cache_dir", data.cache_dir, "",
          "image_folder, data.cache: disk: the folder of the decoded-image files (relative: to the config file's "
          "directory); empty = $XDG_CACHE_HOME/trainrun/decoded, else $HOME/.cache/trainrun/decoded"),

    K_STR("model.spec", model.spec, "",
          "model YAML (models/NAME.yaml format), relative to the config file's directory; "
          "exactly one of model.spec and model.torchscript"),
    K_STR("model.torchscript", model.torchscript, "",
          "TorchScript module saved by torch.jit.save(torch.jit.script(m), FILE), relative to the config file's "
          "directory; exactly one of model.spec and model.torchscript. The archive is code: loading it runs it "
          "(load only archives you trust: docs/model_archives.md)"),
    K_STR("model.init_method", model.init_method, "",
          "model.torchscript: a method of the module (@torch.jit.export, no arguments) run once under no_grad "
          "right after the seed, to draw the initial weights (e.g. init_weights); empty = the archive's weights"),
    {.name = "model.input_shape",
     .type = TR_YF_FLOAT_LIST,
     .offset = OFF(model.input_shape),
     .size = TR_MAX_CHANNELS,
     .aux_offset = OFF(model.n_input_shape),
     .def_list = NULL,
     .def_n = 0,
     .range = TR_YF_CC(1, 1e9),
     .doc = "model.torchscript: the per-sample input shape (e.g. [1, 28, 28]) where no data set gives it (the "
            "trainer API); [] = the data's (a trainer of data.format text or tokens: [data.block_size]); given with "
            "data, it must match"},

    K_ENUM("optim.name", optim.name, k_optims, TR_OPTIM_ADAMW, "optimizer"),
    K_F64("optim.lr", optim.lr, 1e-3, TR_YF_GT(0), "base learning rate"),
    K_F64("optim.momentum", optim.momentum, 0.0, TR_YF_CO(0, 1), "SGD momentum"),
    K_F64("optim.dampening", optim.dampening, 0.0, TR_YF_CC(0, 1), "SGD dampening"),
    K_BOOL("optim.nesterov", optim.nesterov, false, "SGD Nesterov momentum (needs momentum > 0, dampening 0)"),
    K_F64("optim.weight_decay", optim.weight_decay, 0.0, TR_YF_GE(0),
          "weight decay (L2 for sgd/adam, decoupled for adamw)"),
    K_F64("optim.beta1", optim.beta1, 0.9, TR_YF_CO(0, 1), "Adam/AdamW first-moment decay"),
    K_F64("optim.beta2", optim.beta2, 0.999, TR_YF_CO(0, 1), "Adam/AdamW second-moment decay"),
    K_F64("optim.eps", optim.eps, 1e-8, TR_YF_GT(0), "Adam/AdamW denominator epsilon"),
    K_BOOL("optim.amsgrad", optim.amsgrad, false, "Adam/AdamW AMSGrad variant"),
    K_STR("optim.no_decay", optim.no_decay, "",
          "parameters without weight decay (a second param group): \"auto\" = ndim <= 1 or *.bias (timm's "
          "param_groups_weight_decay), and/or comma-separated fnmatch globs over state_dict names; empty = none"),
    K_F64("optim.grad_clip_norm", optim.grad_clip_norm, 0.0, TR_YF_GE(0),
          "clip the global gradient L2 norm to this; 0 = off"),

    K_ENUM("schedule.name", schedule.name, k_schedules, TR_SCHED_CONSTANT, "learning-rate schedule"),
    K_I64("schedule.warmup_steps", schedule.warmup_steps, 0, TR_YF_GE(0),
          "linear warm-up steps: lr = optim.lr * (step + 1) / warmup_steps"),
    K_I64("schedule.step_size", schedule.step_size, 1000, TR_YF_GE(1), "step schedule: steps between decays"),
    K_F64("schedule.gamma", schedule.gamma, 0.1, TR_YF_OC(0, 1), "step schedule: lr factor at each decay"),
    K_F64("schedule.min_lr", schedule.min_lr, 0.0, TR_YF_GE(0),
          "cosine schedule: final learning rate; plateau: the lr is never reduced below it"),
    K_ENUM("schedule.interval", schedule.interval, k_intervals, TR_INTERVAL_STEP,
           "what step_size, milestones and the cosine period count: optimizer steps or epochs (warm-up is always "
           "in steps)"),
    {.name = "schedule.milestones",
     .type = TR_YF_FLOAT_LIST,
     .offset = OFF(schedule.milestones),
     .size = TR_MAX_MILESTONES,
     .aux_offset = OFF(schedule.n_milestones),
     .def_list = k_default_milestones,
     .def_n = 0,
     .range = TR_YF_GE(0),
     .doc = "multistep schedule: lr *= gamma at each of these steps (or epochs)"},
    {.name = "schedule.monitor",
     .type = TR_YF_STRING,
     .offset = OFF(schedule.monitor),
     .size = sizeof(((tr_config *)0)->schedule.monitor),
     .def_str = "val_loss",
     .check_string = check_monitor,
     .doc = "plateau schedule: the evaluation metric it watches (<split>[_ema]_<metric>, as checkpoint.monitor)"},
    K_ENUM("schedule.mode", schedule.mode, k_modes, TR_MODE_MIN,
           "plateau schedule: min (the metric should fall) or max (rise)"),
    K_F64("schedule.factor", schedule.factor, 0.1, TR_YF_OO(0, 1),
          "plateau schedule: lr = max(lr * factor, min_lr) after more than patience evaluations without improvement"),
    K_I64("schedule.patience", schedule.patience, 10, TR_YF_GE(0),
          "plateau schedule: evaluations without improvement tolerated before the lr drops"),
    K_F64(
        "schedule.threshold", schedule.threshold, 1e-4, TR_YF_GE(0),
        "plateau schedule: an improvement must beat best * (1 - threshold) (rel, mode min) or best - threshold (abs)"),
    K_ENUM("schedule.threshold_mode", schedule.threshold_mode, k_threshold_modes, TR_THRESHOLD_REL,
           "plateau schedule: rel or abs threshold (torch's threshold_mode)"),
    K_I64("schedule.cooldown", schedule.cooldown, 0, TR_YF_GE(0),
          "plateau schedule: evaluations after a drop during which bad evaluations are not counted"),

    K_I64("train.epochs", train.epochs, 10, TR_YF_CC(1, 1000000), "training epochs"),
    K_I64("train.max_steps", train.max_steps, 0, TR_YF_CC(0, 1000000000000LL),
          "train exactly this many optimizer steps (epochs then ignored); 0 = train.epochs"),
    K_I64("train.batch_size", train.batch_size, 64, TR_YF_GE(1), "training batch size"),
    K_ENUM("train.loss", train.loss, tr_config_losses, TR_LOSS_CROSS_ENTROPY, "loss function"),
    K_F64("train.label_smoothing", train.label_smoothing, 0.0, TR_YF_CO(0, 1), "cross-entropy label smoothing"),
    K_BOOL("train.drop_last", train.drop_last, true, "drop the last incomplete training batch of an epoch"),
    K_I64("train.accumulate_steps", train.accumulate_steps, 1, TR_YF_CC(1, 1000000),
          "gradient accumulation: each optimizer step takes batch_size * accumulate_steps samples in "
          "accumulate_steps micro-batches of batch_size, losses scaled so the gradients equal one big batch's"),

    K_I64("eval.every_steps", eval.every_steps, 0, TR_YF_GE(0), "validate every N steps; 0 = off"),
    K_BOOL("eval.every_epoch", eval.every_epoch, true, "validate at the end of each epoch"),
    K_I64("eval.batch_size", eval.batch_size, 1000, TR_YF_GE(1), "evaluation batch size"),
    K_BOOL("eval.test_at_end", eval.test_at_end, true, "evaluate the test set at the end of training"),
    K_ENUM("eval.weights", eval.weights, tr_config_weights, TR_WEIGHTS_LIVE,
           "evaluate the live weights, the EMA weights (needs ema.enabled), or both"),
    K_INT("eval.top_k", eval.top_k, 0, TR_YF_CC(0, 1000), "cross_entropy: also report top-k accuracy; 0 = off"),
    K_ENUM("eval.split", eval.split, k_eval_splits, TR_EVAL_VAL,
           "set the periodic evaluation uses; test only for time-to-accuracy benchmarks, never model selection"),

    K_I64("log.every_steps", log.every_steps, 50, TR_YF_GE(1), "write a training record every N steps"),
    K_STR("log.trace", log.trace, "",
          "write a trace (exact per-step loss and lr, eval counts, final parameter checksum) to this file; "
          "relative to the current directory; empty = none"),
    K_BOOL("log.tensorboard", log.tensorboard, false,
           "also write the train and eval records as TensorBoard scalars, RUN_DIR/tensorboard/events.out.tfevents.*"),
    K_ENUM("log.progress", log.progress, k_progress, TR_PROGRESS_AUTO,
           "progress line: auto (in place on a terminal, else a plain line every 10 s), always (in place), "
           "never (none)"),

    K_BOOL("watchdog.enabled", watchdog.enabled, true, "watch allocated memory against the post-warm-up baseline"),
    K_I64("watchdog.warmup_steps", watchdog.warmup_steps, 200, TR_YF_GE(1),
          "steps before the baseline (also waits for the first eval)"),
    K_I64("watchdog.every_steps", watchdog.every_steps, 50, TR_YF_GE(1), "sample allocated bytes every N steps"),
    K_I64("watchdog.window", watchdog.window, 20, TR_YF_CC(2, 4096), "samples in the least-squares growth fit"),
    K_F64("watchdog.warn_ratio", watchdog.warn_ratio, 1.2, TR_YF_GT(1), "warn when allocated > warn_ratio * baseline"),
    K_F64("watchdog.limit_ratio", watchdog.limit_ratio, 0.0, TR_YF_GE(0),
          "hard limit at limit_ratio * baseline; 0 = off"),
    K_F64("watchdog.limit_fraction", watchdog.limit_fraction, 0.85, TR_YF_CC(0, 1),
          "hard limit at this fraction of the memory available to the process; 0 = off"),
    K_I64("watchdog.limit_bytes", watchdog.limit_bytes, 0, TR_YF_GE(0), "hard limit in bytes; 0 = off"),
    K_ENUM("watchdog.action", watchdog.action, k_wd_actions, TR_WD_CHECKPOINT_EXIT,
           "at the hard limit: warn, or checkpoint_exit (stop with exit code 3)"),
    K_BOOL("watchdog.backtrace", watchdog.backtrace, false,
           "record the call stack of every CPU allocation, so a warning names where the fastest-growing (phase, "
           "size) key was allocated (costs time: bench/MEMORY.md)"),
    K_BOOL("watchdog.snapshot", watchdog.snapshot, false,
           "device cuda only (a CUDA build against libtorch 2.1+): record the CUDA caching allocator's history with "
           "call stacks from the first step, and write RUN_DIR/memory_snapshot.pickle (the file PyTorch's memory_viz "
           "opens) at the end as well as when the watchdog warns or stops; refused on the CPU"),

    K_BOOL("memory.cache", memory.cache, true,
           "caching CPU allocator: freed blocks are kept in size-bucketed free lists and reused (allocated = live "
           "tensor bytes, reserved = held from the system); given back before and after each evaluation pass and "
           "before each checkpoint; false = libtorch's allocator behaviour"),
    K_I64("memory.cache_limit_bytes", memory.cache_limit_bytes, 0, TR_YF_GE(0),
          "give the cache back whenever reserved bytes would exceed this; 0 = no limit"),
    K_F64("memory.cache_limit_fraction", memory.cache_limit_fraction, 1.0, TR_YF_CC(0, 1),
          "also give it back whenever reserved bytes would exceed this fraction of the watchdog's hard limit; 0 = "
          "off"),

    K_BOOL("ema.enabled", ema.enabled, false, "keep an exponential moving average of the weights"),
    K_F64("ema.decay", ema.decay, 0.9999, TR_YF_CC(0, 1), "EMA decay: ema = decay * ema + (1 - decay) * live"),
    K_BOOL("ema.warmup", ema.warmup, false,
           "decay_t = min(decay, (1 + t) / (10 + t)), t = updates so far (tf.train.ExponentialMovingAverage "
           "num_updates)"),
    K_I64("ema.every_steps", ema.every_steps, 1, TR_YF_GE(1), "update the EMA every N optimizer steps"),
    K_I64("ema.start_step", ema.start_step, 0, TR_YF_GE(0),
          "the EMA starts as a copy of the weights after this many steps; updates follow every_steps later"),
    K_ENUM("ema.buffers", ema.buffers, k_ema_buffers, TR_EMA_BUFFERS_COPY,
           "floating-point buffers (BatchNorm running stats): copy or average; integer buffers are always copied"),

    K_I64("debug.leak_bytes_per_step", debug.leak_bytes_per_step, 0, TR_YF_GE(0),
          "TEST ONLY: keep this many bytes of tensor memory alive per step, to prove the watchdog fires"),
    K_I64("debug.leak_bytes_per_eval_batch", debug.leak_bytes_per_eval_batch, 0, TR_YF_GE(0),
          "TEST ONLY: keep this many bytes of tensor memory alive per evaluation batch, to prove the leak report "
          "names the eval pass"),
    K_BOOL("debug.perturb_resume_rng", debug.perturb_resume_rng, false,
           "TEST ONLY: advance the generator once after a resume, to prove `trainrun check` notices"),

    K_F64("checkpoint.every_seconds", checkpoint.every_seconds, 600.0, TR_YF_GE(0),
          "save every N seconds of training time (monotonic clock, carried across resumes); 0 = off"),
    K_I64("checkpoint.every_steps", checkpoint.every_steps, 0, TR_YF_GE(0), "save every N optimizer steps; 0 = off"),
    K_I64("checkpoint.keep_last", checkpoint.keep_last, 3, TR_YF_CC(1, 1000000),
          "complete checkpoints kept; older ones are pruned after a new one is complete"),
    K_BOOL("checkpoint.at_end", checkpoint.at_end, true,
           "save when the run ends (also on SIGINT/SIGTERM and a watchdog stop)"),
    K_BOOL("checkpoint.async", checkpoint.async, true,
           "write checkpoints on a background thread: the loop pauses only to copy the state; one save in flight at a "
           "time, the end-of-run save waited for"),
    {.name = "checkpoint.monitor",
     .type = TR_YF_STRING,
     .offset = OFF(checkpoint.monitor),
     .size = sizeof(((tr_config *)0)->checkpoint.monitor),
     .def_str = "",
     .check_string = check_monitor_or_off,
     .doc = "keep the best checkpoints by this evaluation metric (val_loss, val_accuracy, val_micro_f1, "
            "val_ema_accuracy, ...): a checkpoint is saved after each evaluation that enters the best save_top_k, "
            "kept apart from keep_last, and best.json names the best; empty = off"},
    K_ENUM("checkpoint.mode", checkpoint.mode, k_modes, TR_MODE_MIN,
           "checkpoint.monitor: min (lower is better) or max"),
    K_INT("checkpoint.save_top_k", checkpoint.save_top_k, 1, TR_YF_CC(1, TR_TOPK_MAX),
          "checkpoint.monitor: how many of the best checkpoints are kept"),

    {.name = "early_stopping.monitor",
     .type = TR_YF_STRING,
     .offset = OFF(early_stopping.monitor),
     .size = sizeof(((tr_config *)0)->early_stopping.monitor),
     .def_str = "",
     .check_string = check_monitor_or_off,
     .doc = "stop when this evaluation metric stops improving (PyTorch Lightning's EarlyStopping); empty = off"},
    K_ENUM("early_stopping.mode", early_stopping.mode, k_modes, TR_MODE_MIN, "min (lower is better) or max"),
    K_I64("early_stopping.patience", early_stopping.patience, 3, TR_YF_CC(1, 1000000000),
          "evaluations without improvement before the run stops"),
    K_F64("early_stopping.min_delta", early_stopping.min_delta, 0.0, TR_YF_GE(0),
          "an improvement must exceed this (absolute)"),

    K_STR("init.from", init.from, "",
          "start a new run from these weights: a checkpoint directory, a run directory (its best checkpoint by "
          "best.json, else its newest) or a .safetensors file; empty = none"),
    K_BOOL("init.strict", init.strict, true, "init.from must match every parameter and buffer name and shape"),

    K_STR("run.dir", run.dir, "runs", "parent directory of run directories"),
    K_STR("run.name", run.name, "", "run directory name; empty = config file stem + timestamp"),
    K_STR("run.resume", run.resume, "auto",
          "auto: continue from the run directory's newest valid checkpoint; never; or a checkpoint directory"),

    K_F64("dist.timeout_seconds", dist.timeout_seconds, 60.0, TR_YF_GT(0),
          "multi-process runs (WORLD_SIZE > 1): longest wait for the rendezvous and for any collective; a rank whose "
          "peer hung or was cut off exits with code 9 within it, naming the lost rank"),
    K_F64("dist.bucket_cap_mb", dist.bucket_cap_mb, 25.0, TR_YF_GT(0),
          "multi-process runs: gradients are all-reduced in buckets of at most this many MiB (DDP's bucket_cap_mb)"),
};

const size_t tr_config_schema_n = sizeof tr_config_schema / sizeof tr_config_schema[0];
_Static_assert(sizeof tr_config_schema / sizeof tr_config_schema[0] <= TR_CONFIG_MAX_KEYS,
               "TR_CONFIG_MAX_KEYS (config_internal.h) bounds the schema");
