/*
 * config.h -- the typed run configuration and its strict YAML loader.
 *
 * Every key has one entry in the schema table (config.c): dotted key path, type, default, range, one-line doc.
 * The loader reads YAML with libyaml, applies YAML 1.2 core-schema scalar rules (`1e-3` and `1e-08` are floats,
 * `true`/`false` only are booleans, `~`/`null` is null), and rejects unknown keys (with a did-you-mean), duplicate
 * keys (naming both lines), wrong types and out-of-range values with "FILE:LINE:COL: key.path: message".
 * `key=value` overrides go through the same schema; their errors name "override 'key=value'".
 */
#ifndef TR_CONFIG_H
#define TR_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

#define TR_PATH_MAX 1024
#define TR_MAX_CHANNELS 4
#define TR_MAX_MILESTONES 16

typedef enum tr_optim_name { TR_OPTIM_SGD = 0, TR_OPTIM_ADAM, TR_OPTIM_ADAMW } tr_optim_name;
typedef enum tr_schedule_name {
    TR_SCHED_CONSTANT = 0, TR_SCHED_STEP, TR_SCHED_COSINE, TR_SCHED_MULTISTEP, TR_SCHED_PLATEAU
} tr_schedule_name;
typedef enum tr_monitor_mode { TR_MODE_MIN = 0, TR_MODE_MAX } tr_monitor_mode;
typedef enum tr_threshold_mode { TR_THRESHOLD_REL = 0, TR_THRESHOLD_ABS } tr_threshold_mode;
typedef enum tr_schedule_interval { TR_INTERVAL_STEP = 0, TR_INTERVAL_EPOCH } tr_schedule_interval;
typedef enum tr_loss_name {
    TR_LOSS_CROSS_ENTROPY = 0, TR_LOSS_BCE_WITH_LOGITS, TR_LOSS_MSE, TR_LOSS_SMOOTH_L1
} tr_loss_name;
typedef enum tr_eval_weights { TR_WEIGHTS_LIVE = 0, TR_WEIGHTS_EMA, TR_WEIGHTS_BOTH } tr_eval_weights;
typedef enum tr_ema_buffers { TR_EMA_BUFFERS_COPY = 0, TR_EMA_BUFFERS_AVERAGE } tr_ema_buffers;
typedef enum tr_target_kind { TR_TARGET_CLASS = 0, TR_TARGET_MULTI_HOT, TR_TARGET_REGRESSION } tr_target_kind;
typedef enum tr_progress_mode { TR_PROGRESS_AUTO = 0, TR_PROGRESS_ALWAYS, TR_PROGRESS_NEVER } tr_progress_mode;
typedef enum tr_data_format {
    TR_DATA_IDX = 0,
    TR_DATA_CSV,
    TR_DATA_NPY,
    TR_DATA_TEXT,
    TR_DATA_TOKENS,
    TR_DATA_IMAGE_FOLDER
} tr_data_format;
/** data.image_mode: PIL's Image.convert modes. */
typedef enum tr_image_mode { TR_IMAGE_L = 0, TR_IMAGE_RGB, TR_IMAGE_RGBA } tr_image_mode;
/** data.cache: where an image folder's decoded samples are kept after their first decode. */
typedef enum tr_image_cache {
    TR_IMAGE_CACHE_AUTO = 0,
    TR_IMAGE_CACHE_MEMORY,
    TR_IMAGE_CACHE_NONE,
    TR_IMAGE_CACHE_DISK, /**< memory, and kept across runs in a file under data.cache_dir (image_folder.h) */
} tr_image_cache;
typedef enum tr_vocab_cfg { TR_VOCAB_CFG_BYTES = 0, TR_VOCAB_CFG_CHARS } tr_vocab_cfg;
typedef enum tr_token_dtype { TR_TOKEN_UINT16 = 0, TR_TOKEN_UINT32 } tr_token_dtype;
typedef enum tr_watchdog_action { TR_WD_WARN = 0, TR_WD_CHECKPOINT_EXIT } tr_watchdog_action;
typedef enum tr_eval_split { TR_EVAL_VAL = 0, TR_EVAL_TEST } tr_eval_split;

/** precision: Lightning's names; bf16-mixed = CPU autocast to bfloat16 with float32 master weights. */
typedef enum tr_precision { TR_PRECISION_32 = 0, TR_PRECISION_BF16_MIXED } tr_precision;

typedef struct tr_config {
    char source[TR_PATH_MAX];   /**< file the config came from ("" for a string); relative paths resolve here */

    uint64_t seed;              /**< seed: default 0                                                         */
    char device[32];            /**< device: cpu | cuda | cuda:N (device.h), default cpu                      */
    int threads;                /**< threads: intra-op threads, 0 = auto (1, BLAS pinned to 1)            */
    int interop_threads;        /**< interop_threads: default 1                                              */
    bool deterministic;         /**< deterministic: torch deterministic algorithms                            */
    bool malloc_tuning;         /**< malloc_tuning: pin glibc malloc thresholds (trs_set_malloc_thresholds)  */
    tr_precision precision;     /**< precision: 32 | bf16-mixed (trs_precision), default 32                  */

    struct {
        tr_data_format format;             /**< data.format: idx                                             */
        char root[TR_PATH_MAX];            /**< data.root: /usr/share/datasets/fashion-mnist                 */
        char train_images[TR_PATH_MAX];    /**< data.train_images: train-images-idx3-ubyte.gz (under root)   */
        char train_labels[TR_PATH_MAX];    /**< data.train_labels: train-labels-idx1-ubyte.gz                */
        char test_images[TR_PATH_MAX];     /**< data.test_images: t10k-images-idx3-ubyte.gz                  */
        char test_labels[TR_PATH_MAX];     /**< data.test_labels: t10k-labels-idx1-ubyte.gz                  */
        int64_t val_size;                  /**< data.val_size: samples carved from train for validation, 5000 */
        int64_t train_subset;              /**< data.train_subset: use the first N training samples, 0 = all */
        int64_t test_subset;               /**< data.test_subset: use the first N test samples, 0 = all      */
        double mean[TR_MAX_CHANNELS];      /**< data.mean: per-channel mean after scaling to [0,1]: [0.2860] */
        int n_mean;
        double std[TR_MAX_CHANNELS];       /**< data.std: per-channel std: [0.3530]                          */
        int n_std;
        bool shuffle;                      /**< data.shuffle: true                                           */
        char train_csv[TR_PATH_MAX];       /**< data.train_csv: CSV table (csv format), under root           */
        char train_targets[TR_PATH_MAX];   /**< data.train_targets: targets in another CSV, "" = train_csv   */
        char test_csv[TR_PATH_MAX];        /**< data.test_csv: "" = carve data.test_size from train          */
        char test_targets[TR_PATH_MAX];    /**< data.test_targets: "" = test_csv                             */
        int64_t header_lines;              /**< data.header_lines: lines skipped at the top of each CSV, 0   */
        char feature_columns[256];         /**< data.feature_columns: "" = all non-target columns            */
        char target_columns[256];          /**< data.target_columns: "-1" = the last column                  */
        tr_target_kind target;             /**< data.target: class | multi_hot | regression                  */
        int64_t test_size;                 /**< data.test_size: samples carved for test (csv, no test_csv)   */
        bool standardize;                  /**< data.standardize: z-score features (and regression targets)  */
        char train_inputs[TR_PATH_MAX];    /**< data.train_inputs: npy inputs array [N, ...], under root     */
        char test_inputs[TR_PATH_MAX];     /**< data.test_inputs: npy test inputs, "" = none                 */
        bool prefetch;                     /**< data.prefetch: next batch prepared on a worker thread, true  */
        struct {
            int64_t crop_padding;          /**< data.augment.crop_padding: random crop after padding, 0 = off */
            double hflip;                  /**< data.augment.hflip: horizontal flip probability, 0 = off     */
        } augment;                         /**< training-image augmentation (data.h tr_augment)              */
        char train_text[TR_PATH_MAX];      /**< data.train_text: text format: comma-separated UTF-8 files    */
        tr_vocab_cfg vocab;                /**< data.vocab: text format: bytes | chars                       */
        char train_tokens[TR_PATH_MAX];    /**< data.train_tokens: tokens format: flat uint16/uint32 ids     */
        char val_tokens[TR_PATH_MAX];      /**< data.val_tokens: tokens format: "" = data.val_fraction tail  */
        tr_token_dtype token_dtype;        /**< data.token_dtype: uint16 | uint32                            */
        int64_t block_size;                /**< data.block_size: tokens per window (T), 64                   */
        double val_fraction;               /**< data.val_fraction: held-out tail of the tokens, 0.1          */
        int64_t val_windows;               /**< data.val_windows: most validation windows, 0 = all           */
        char train_root[TR_PATH_MAX];      /**< data.train_root: image_folder: ROOT/CLASS/FILE.png            */
        char val_root[TR_PATH_MAX];        /**< data.val_root: image_folder: "" = data.val_size carved        */
        char test_root[TR_PATH_MAX];       /**< data.test_root: image_folder: "" = no test set                */
        tr_image_mode image_mode;          /**< data.image_mode: L | RGB | RGBA, RGB (ImageFolder's loader)   */
        double image_size[TR_MAX_CHANNELS]; /**< data.image_size: [H, W] of every sample, [] = the images' own */
        int n_image_size;
        int64_t resize_shorter;   /**< data.resize_shorter: Resize(S) then CenterCrop, 0 = off      */
        int64_t max_image_pixels; /**< data.max_image_pixels: bound on W x H, 89478485 (PIL's)      */
        bool skip_bad_files;      /**< data.skip_bad_files: decode all at load, skip the bad, false  */
        tr_image_cache cache;     /**< data.cache: auto | memory | none | disk, auto                 */
        char cache_dir[TR_PATH_MAX]; /**< data.cache_dir: disk: "" = $XDG_CACHE_HOME/trainrun/decoded  */
    } data;

    struct {
        char spec[TR_PATH_MAX];            /**< model.spec: model YAML, relative to the config file's dir    */
        char torchscript[TR_PATH_MAX];     /**< model.torchscript: TorchScript archive (.pt), same rule; one
                                                of spec / torchscript is set                                  */
        char init_method[64];              /**< model.init_method: TorchScript method run once at start-up
                                                (seeded, under no_grad) to initialise the weights; "" = none  */
        double input_shape[TR_MAX_CHANNELS]; /**< model.input_shape: TorchScript per-sample input, [] = data's */
        int n_input_shape;
    } model;

    struct {
        tr_optim_name name;                /**< optim.name: sgd | adam | adamw (default adamw)               */
        double lr;                         /**< optim.lr: 1e-3, > 0                                          */
        double momentum;                   /**< optim.momentum: 0                                            */
        double dampening;                  /**< optim.dampening: 0                                           */
        bool nesterov;                     /**< optim.nesterov: false                                        */
        double weight_decay;               /**< optim.weight_decay: 0                                        */
        double beta1;                      /**< optim.beta1: 0.9                                             */
        double beta2;                      /**< optim.beta2: 0.999                                           */
        double eps;                        /**< optim.eps: 1e-8                                              */
        bool amsgrad;                      /**< optim.amsgrad: false                                         */
        char no_decay[512];                /**< optim.no_decay: "auto" and/or comma-separated globs, "" = off */
        double grad_clip_norm;             /**< optim.grad_clip_norm: 0 = off                                */
    } optim;

    struct {
        tr_schedule_name name;             /**< schedule.name: constant | step | cosine                      */
        int64_t warmup_steps;              /**< schedule.warmup_steps: linear warm-up steps, 0               */
        int64_t step_size;                 /**< schedule.step_size: steps between decays (step), 1000        */
        double gamma;                      /**< schedule.gamma: decay factor (step), 0.1                     */
        double min_lr;                     /**< schedule.min_lr: final lr (cosine), 0                        */
        tr_schedule_interval interval;     /**< schedule.interval: step | epoch                              */
        double milestones[TR_MAX_MILESTONES]; /**< schedule.milestones: multistep decay points            */
        int n_milestones;
        char monitor[40];                  /**< schedule.monitor: plateau: the metric it watches, val_loss    */
        tr_monitor_mode mode;              /**< schedule.mode: plateau: min | max                            */
        double factor;                     /**< schedule.factor: plateau: lr *= factor at a plateau, 0.1     */
        int64_t patience;                  /**< schedule.patience: plateau: evaluations without improvement, 10 */
        double threshold;                  /**< schedule.threshold: plateau: improvement threshold, 1e-4     */
        tr_threshold_mode threshold_mode;  /**< schedule.threshold_mode: plateau: rel | abs                  */
        int64_t cooldown;                  /**< schedule.cooldown: plateau: evaluations ignored after a drop, 0 */
    } schedule;

    struct {
        int64_t epochs;                    /**< train.epochs: 10                                             */
        int64_t max_steps;                 /**< train.max_steps: stop after this many steps, 0 = epochs only */
        int64_t batch_size;                /**< train.batch_size: 64                                         */
        tr_loss_name loss;                 /**< train.loss: cross_entropy                                    */
        double label_smoothing;            /**< train.label_smoothing: 0, in [0, 1)                          */
        bool drop_last;                    /**< train.drop_last: true                                        */
        int64_t accumulate_steps;          /**< train.accumulate_steps: micro-batches per optimizer step, 1  */
    } train;

    struct {
        int64_t every_steps;               /**< eval.every_steps: validate every N steps, 0 = off            */
        bool every_epoch;                  /**< eval.every_epoch: validate at each epoch end, true           */
        int64_t batch_size;                /**< eval.batch_size: 1000                                        */
        bool test_at_end;                  /**< eval.test_at_end: evaluate the test set at the end, true     */
        tr_eval_weights weights;           /**< eval.weights: live | ema | both                              */
        int top_k;                         /**< eval.top_k: also report top-k accuracy, 0 = off              */
        tr_eval_split split;               /**< eval.split: the set periodic evaluation uses, val            */
    } eval;

    struct {
        int64_t every_steps;               /**< log.every_steps: train record cadence, 50                    */
        tr_progress_mode progress;         /**< log.progress: auto | always | never                          */
        char trace[TR_PATH_MAX];           /**< log.trace: trace file ("" = none; see trace.h)               */
        bool tensorboard;                  /**< log.tensorboard: RUN_DIR/tensorboard/events.out.tfevents.*    */
    } log;

    struct {
        bool enabled;                      /**< watchdog.enabled: true                                       */
        int64_t warmup_steps;              /**< watchdog.warmup_steps: 200                                   */
        int64_t every_steps;               /**< watchdog.every_steps: sampling cadence, 50                   */
        int64_t window;                    /**< watchdog.window: samples in the growth fit, 20               */
        double warn_ratio;                 /**< watchdog.warn_ratio: 1.2                                     */
        double limit_ratio;                /**< watchdog.limit_ratio: 0 = off                                */
        double limit_fraction;             /**< watchdog.limit_fraction: of available memory, 0.85           */
        int64_t limit_bytes;               /**< watchdog.limit_bytes: 0 = off                                */
        tr_watchdog_action action;         /**< watchdog.action: warn | checkpoint_exit                      */
        bool backtrace;                    /**< watchdog.backtrace: stack of the fastest-growing key, false  */
        bool snapshot;                     /**< watchdog.snapshot: CUDA allocator history + snapshot, false  */
    } watchdog;

    struct {
        bool cache;                        /**< memory.cache: caching CPU allocator, true                    */
        int64_t cache_limit_bytes;         /**< memory.cache_limit_bytes: 0 = none                           */
        double cache_limit_fraction;       /**< memory.cache_limit_fraction: of the watchdog's limit, 1.0    */
    } memory;

    struct {
        bool enabled;                      /**< ema.enabled: false                                           */
        double decay;                      /**< ema.decay: 0.9999                                            */
        bool warmup;                       /**< ema.warmup: decay_t = min(decay, (1+t)/(10+t)), false        */
        int64_t every_steps;               /**< ema.every_steps: 1                                           */
        int64_t start_step;                /**< ema.start_step: 0                                            */
        tr_ema_buffers buffers;            /**< ema.buffers: copy | average                                  */
    } ema;

    struct {
        int64_t leak_bytes_per_step;       /**< debug.leak_bytes_per_step: TEST ONLY, 0                      */
        int64_t leak_bytes_per_eval_batch; /**< debug.leak_bytes_per_eval_batch: TEST ONLY, 0                */
        bool perturb_resume_rng;           /**< debug.perturb_resume_rng: TEST ONLY, false                   */
    } debug;

    struct {
        double every_seconds;              /**< checkpoint.every_seconds: 600, 0 = off                       */
        int64_t every_steps;               /**< checkpoint.every_steps: 0 = off                              */
        int64_t keep_last;                 /**< checkpoint.keep_last: 3                                      */
        bool at_end;                       /**< checkpoint.at_end: true                                      */
        bool async;                        /**< checkpoint.async: true = written on a background thread      */
        char monitor[40];                  /**< checkpoint.monitor: metric the best are kept by, "" = off    */
        tr_monitor_mode mode;              /**< checkpoint.mode: min | max                                   */
        int save_top_k;                    /**< checkpoint.save_top_k: best checkpoints kept, 1              */
    } checkpoint;

    struct {
        char monitor[40];                  /**< early_stopping.monitor: "" = off                             */
        tr_monitor_mode mode;              /**< early_stopping.mode: min | max                               */
        int64_t patience;                  /**< early_stopping.patience: evaluations without improvement, 3  */
        double min_delta;                  /**< early_stopping.min_delta: smallest improvement, 0            */
    } early_stopping;

    struct {
        char from[TR_PATH_MAX];            /**< init.from: weights to start from, "" = none                  */
        bool strict;                       /**< init.strict: true                                            */
    } init;

    struct {
        char dir[TR_PATH_MAX];             /**< run.dir: parent of run directories, "runs"                   */
        char name[256];                    /**< run.name: run directory name, "" = config stem + timestamp   */
        char resume[TR_PATH_MAX];          /**< run.resume: auto | never | checkpoint directory              */
    } run;

    struct {
        double timeout_seconds;            /**< dist.timeout_seconds: rendezvous and collective timeout, 60  */
        double bucket_cap_mb;              /**< dist.bucket_cap_mb: gradient all-reduce bucket size, 25 MiB  */
    } dist;
} tr_config;

/** Fill `cfg` with every key's default. */
void tr_config_defaults(tr_config *cfg);

/**
 * Load a YAML file over the current contents of `cfg` (call tr_config_defaults first). Returns TR_OK or
 * TR_E_CONFIG with "FILE:LINE:COL: key.path: message" in err (TR_E_CONFIG also for an unreadable file).
 */
int tr_config_load_file(tr_config *cfg, const char *path, tr_error *err);

/** Same as tr_config_load_file for YAML text; `name` stands in for the file name in messages. */
int tr_config_load_string(tr_config *cfg, const char *yaml, const char *name, tr_error *err);

/**
 * Apply one "key.path=value" override; the value is parsed as a YAML scalar or flow sequence
 * ("data.mean=[0.5]"). Returns TR_OK or TR_E_CONFIG naming the override.
 */
int tr_config_override(tr_config *cfg, const char *kv, tr_error *err);

/**
 * Defaults, then the file at `path`, then the `n` "key=value" overrides in order (the command line). The same key
 * twice among the overrides is an error, as a duplicate key in a file is. Then tr_config_validate. TR_OK or
 * TR_E_CONFIG with the message in err.
 */
int tr_config_load_cli(tr_config *cfg, const char *path, char *const *overrides, int n, tr_error *err);

/** Cross-key checks (e.g. nesterov needs momentum > 0 and dampening 0; n_mean == n_std). TR_OK or TR_E_CONFIG. */
int tr_config_validate(const tr_config *cfg, tr_error *err);

/** Write the effective config as YAML (every key, with its value) to `f`. Returns TR_OK or TR_E_RUNTIME. */
int tr_config_write_yaml(const tr_config *cfg, FILE *f);

/** Write the config reference (every key: type, default, range, doc) as a Markdown table to `f`. */
void tr_config_write_reference(FILE *f);

/**
 * The keys whose values differ between `a` and `b` (values compared as tr_config_write_yaml writes them), as
 * "key A -> B" joined by ", " into out[n] (cut with "..." when longer), leaving out keys for which skip(key)
 * returns nonzero (skip NULL: none). Returns the number of differing keys.
 */
int tr_config_diff(const tr_config *a, const tr_config *b, int (*skip)(const char *key), char *out, size_t n);

/**
 * The "key=value" overrides that turn `base` into `cfg` (every key whose value differs, skip as tr_config_diff),
 * as a NULL-terminated array of malloc'd strings in *out (free with tr_config_overrides_free). Returns their
 * count, or -1 when out of memory.
 */
int tr_config_overrides_between(const tr_config *base, const tr_config *cfg, int (*skip)(const char *key),
                                 char ***out);

/** What a key's value is, for tr_config_each_key. */
typedef enum tr_config_kind { TR_CONFIG_NUMBER = 0, TR_CONFIG_BOOL, TR_CONFIG_TEXT } tr_config_kind;

/**
 * fn(ctx, key, kind, value) for every key of the schema in its order, value as tr_config_write_yaml writes it
 * (numbers in decimal, bools "true" / "false", enums by name, lists as "[a, b]"). Stops at, and returns, the first
 * nonzero fn returns; 0 when all were called.
 */
int tr_config_each_key(const tr_config *cfg,
                       int (*fn)(void *ctx, const char *key, tr_config_kind kind, const char *value), void *ctx);

/** Free a list from tr_config_overrides_between (NULL: nothing). */
void tr_config_overrides_free(char **list);

/**
 * Resolve `rel` against the directory of the config file (`cfg->source`) unless it is absolute or the config
 * came from a string; result in out[TR_PATH_MAX].
 */
void tr_config_resolve_path(const tr_config *cfg, const char *rel, char *out);

/**
 * Resolve a data file's path `name` as data.format csv and npy read them: an absolute path as it is; one starting
 * with "./" or "../" relative to the config file's directory (tr_config_resolve_path); any other under data.root
 * (itself resolved against the config file). Writes at most `size` bytes (NUL included) into `out`; a longer path
 * is cut there.
 */
void tr_config_resolve_data_path(const tr_config *cfg, const char *name, char *out, size_t size);

#endif
