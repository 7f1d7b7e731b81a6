/*
 * checkpoint.h -- crash-safe checkpoints that make a resumed run continue bit for bit.
 *
 * A checkpoint is a directory RUN_DIR/checkpoints/step-NNNNNNNNNN/ holding
 *   model.safetensors      parameters and buffers, by their PyTorch state_dict names ("1.weight", ...)
 *   optimizer.safetensors  per-parameter optimizer state, by torch.optim state_dict names ("state.0.exp_avg", ...)
 *   rng.safetensors        "cpu_generator": the default CPU generator's full state (U8); in a run of W ranks
 *                          that is rank 0's, and "cpu_generator.rank1" .. "cpu_generator.rank<W-1>" hold the
 *                          other ranks' (dist.h); a run on a CUDA device adds "cuda_generator.<i>" (U8), the
 *                          default generator state of every CUDA device i the process sees
 *                          (torch.cuda.get_rng_state_all), and in a run of W ranks "cuda_generator.rank<r>"
 *                          (r >= 1) the generator of rank r's own device (dist.h); a run on the CPU never touches
 *                          CUDA and saves none
 *   ema.safetensors        (ema.enabled only) the EMA weights, by the model's state_dict names
 *   trainer.json           format version, step, data cursor (epoch, position; "cursor": the batch geometry it
 *                          moves by and its origin), training seconds, the open log window, param_groups, the
 *                          selection state, EMA update count ("ema_updates"), config fingerprint and text,
 *                          libtorch version, thread counts, the device ("device": "cpu" / "cuda:N") and the
 *                          number of CUDA generator states saved ("cuda_generators")
 *   MANIFEST.json          size and XXH3-128 digest of each file above (format_version 2; checkpoints of
 *                          format 1 list SHA-256 digests and still load); written last
 * Doubles that must survive exactly (losses, seconds) are stored as C99 hex floats ("0x1.8p+1").
 *
 * Protocol (save): write everything into checkpoints/.tmp-step-N-PID/, fsync each file, fsync that directory,
 * rename it to step-N, fsync checkpoints/; only then prune to keep_last. A kill at any moment leaves either the
 * complete new checkpoint or none, and never touches complete ones. Load verifies the manifest (sizes and hashes)
 * before reading anything, then trainer.json field by field (tr_ckpt_parse_trainer) and as a whole
 * (tr_ckpt_validate); a corrupt, truncated or self-contradicting checkpoint is reported by name and skipped. One
 * writer per run directory (run_lock.h) keeps another process's saves and prunes out of it.
 */
#ifndef TR_CHECKPOINT_H
#define TR_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "fingerprint.h"
#include "hash.h"
#include "monitor.h"
#include "trainrun_shim.h"

#define TR_CKPT_FORMAT_VERSION 1   /**< trainer.json's format_version                                     */
#define TR_CKPT_MANIFEST_VERSION 2 /**< MANIFEST.json's: 2 = XXH3-128 digests; 1 (SHA-256) is still read      */

/* Bounds a checkpoint's fields are checked against (tr_ckpt_parse_trainer): far beyond any real run, and small
 * enough that the loop's arithmetic on them (epoch + 1, step * batch, sums of counts) cannot overflow. */
#define TR_CKPT_MAX_STEP ((int64_t)1 << 40)   /**< steps                                      */
#define TR_CKPT_MAX_COUNT ((int64_t)1 << 53)  /**< samples, positions, correct counts          */
#define TR_CKPT_MAX_SECONDS 1e10              /**< elapsed and step seconds (317 years)        */
#define TR_CKPT_MAX_WORLD 65536               /**< ranks                                       */
#define TR_CKPT_MAX_GROUPS 1024               /**< optimizer param_groups                      */
#define TR_CKPT_MAX_FILES 16                  /**< files a manifest may list                   */

/** The runtime's own part of a checkpoint: where the loop is, and what it has accumulated. */
typedef struct tr_ckpt_progress {
    int64_t step;            /**< optimizer steps done                                             */
    int64_t epoch;           /**< current epoch (0-based)                                          */
    int64_t pos;             /**< samples of this epoch's order already consumed                   */
    double elapsed;          /**< training seconds so far, summed over every process of the run    */
    int64_t evals_done;      /**< validation passes so far                                         */
    double win_loss;         /**< open log window: sum of step losses ...                          */
    int64_t win_correct, win_samples, win_steps; /**< ... and counts since the last train record   */
    double last_loss;        /**< mean loss of the last closed window                              */
    int has_val;
    double val_loss, val_accuracy;
    int64_t samples_total;   /**< training samples consumed                                        */
    double step_seconds;     /**< seconds spent inside train steps                                 */
    int world_size;          /**< ranks of the run (dist.h); 0 or 1: one process                   */
    int64_t epoch_samples;   /**< samples in one epoch's order on this rank when saved (the bound of
                                  pos), saved when > 0; -1: not known (the caller's batches, or an
                                  older checkpoint)                                                 */
    const unsigned char *rank_rng; /**< save only: world_size generator states, rank_rng_bytes each, in rank
                                         order (tr_dist_gather_rng); NULL: this process's state alone     */
    size_t rank_rng_bytes;
    const unsigned char *rank_cuda_rng; /**< save only, multi-process runs on CUDA devices: world_size states of
                                              each rank's own device's generator, rank_cuda_rng_bytes each, in rank
                                              order (tr_dist_gather_rng); NULL: none                          */
    size_t rank_cuda_rng_bytes;
    const char *const *classes; /**< save only, image folders: the class names, index = class (trainer.json
                                     "classes"); NULL: none                                            */
    int64_t n_classes;
    tr_select_state sel;     /**< checkpoint.save_top_k's set, early stopping's and the plateau schedule's
                                  state (trainer.json "selection"; absent in older checkpoints: empty)      */
    /* trainer.json "cursor": the batch geometry the cursor moves by, and where it began moving by it, so that
     * (epoch, pos) and samples_total follow from step (tr_ckpt_validate). Absent in older checkpoints and in the
     * embedding trainer's (step_samples 0): then the geometry is the saving config's and the origin all zeros. */
    int64_t step_samples;    /**< samples one optimizer step takes on this rank (train.batch_size x
                                  accumulate_steps) when saved; 0: not recorded                               */
    int drop_last;           /**< train.drop_last when saved                                                  */
    int64_t origin_step, origin_epoch, origin_pos, origin_samples; /**< the step, cursor and samples_total at
                                  which this geometry (step_samples, drop_last, epoch_samples, world_size) took
                                  over: all 0 from a fresh start; a resume with another geometry moves it to the
                                  resumed checkpoint's                                                         */
} tr_ckpt_progress;

/** What trainer.json holds besides the progress: read by tr_ckpt_parse_trainer, freed by tr_ckpt_meta_free. */
typedef struct tr_ckpt_meta {
    char fingerprint[65];        /**< config_fingerprint ("" when absent)                       */
    char libtorch_version[64];   /**< libtorch_version ("" when absent)                         */
    int intra_op, inter_op;      /**< saved thread counts, -1 when absent                       */
    int64_t ema_updates;         /**< -1 when absent (the run had no EMA)                       */
    int64_t n_groups;            /**< param_groups entries ...                                  */
    char **group_params;         /**< ... each one's "params": comma-separated state_dict names */
    char *config_yaml;           /**< the saved effective config (NULL when absent)             */
    char device[32];             /**< "cpu", "cuda:0", ... ("" when absent: saved on the CPU)   */
    int cuda_generators;         /**< CUDA generator states saved (0 when absent), in [0, 1024] */
    char reason[16];             /**< why it was saved (tr_checkpoint_save's reasons, "trainer" for the
                                      embedding trainer's; "" when absent)                        */
    double lr_max;               /**< the largest param_groups[].lr                             */
} tr_ckpt_meta;

/** MANIFEST.json: the files it lists with their sizes (bytes) and digests (lowercase hex): format 1 "sha256"
 *  (64 digits), format 2 "xxh3_128" (32 digits, XXH3-128 canonical; hash.h). */
typedef struct tr_ckpt_manifest {
    int64_t step;      /**< the manifest's step, -1 when absent */
    tr_hash_algo algo; /**< the digests' algorithm, by the manifest's format_version */
    int n;
    struct {
        char name[64];
        char digest[TR_HASH_HEX_MAX];
        int64_t size;
    } files[TR_CKPT_MAX_FILES];
} tr_ckpt_manifest;

/**
 * Parse trainer.json's text (NUL-terminated) into *p and *m and check every field on its own: format version;
 * step in [0, TR_CKPT_MAX_STEP] and equal to `dir_step` (the step its directory is named after; -1: not known);
 * epoch in [0, step]; position, window and sample counts in [0, 2^53] (position also in [0, epoch_samples] when
 * the checkpoint records that), the window's steps in [0, step]; evals
 * in [0, step + 1]; elapsed and step seconds finite in [0, 1e10]; world_size in [1, 65536]; ema_updates in
 * [0, step]; 1 to 1024 param_groups, each with its "params" names and a finite lr >= 0; the optional
 * "selection": monitor names of [a-z_] (< 40 bytes), modes "min" / "max", at most TR_TOPK_MAX top-k entries with
 * distinct steps in [0, step] and finite scores ordered best first, early stopping's best (not NaN), best_step in
 * [-1, step] and wait in [0, evals], the plateau's lr finite in (0, 1e10], best not NaN, counters in range. Errors: TR_E_RUNTIME
 * "FILE: field NAME: ..." naming the first bad field (*m is then empty). `file` is only used in messages.
 */
int tr_ckpt_parse_trainer(const char *text, const char *file, int64_t dir_step, tr_ckpt_progress *p,
                          tr_ckpt_meta *m, tr_error *err);
void tr_ckpt_meta_free(tr_ckpt_meta *m);

/**
 * Check a parsed trainer.json as a whole (after tr_ckpt_parse_trainer checked each field on its own): the values
 * must be ones a run can produce and agree with each other. `saved` is the config that saved the checkpoint (its
 * config_yaml loaded; NULL: not known, and the invariants that need it are not checked); `ckpt_dir` the
 * checkpoint's directory (the top-k entries are looked up beside it). The invariants (docs/run_directory.md):
 *  - the log window: a finite loss sum >= 0; 0 steps hold 0 samples, 0 correct and loss 0; 0 samples hold 0
 *    correct; correct <= samples x targets per sample (data.block_size for token data, else 1); samples <=
 *    samples_total and >= steps;
 *  - totals: step_seconds <= elapsed_seconds; step 0 has no samples and no step time; samples_total >= step;
 *    has_val only after an evaluation;
 *  - the cursor: from cursor.origin, step - origin.step batches of cursor.step_samples (drop_last) in epochs of
 *    epoch_samples end exactly at (epoch, position), and samples_total = origin.samples + world_size x the samples
 *    they took; step_samples and drop_last are the saving config's (train.batch_size x accumulate_steps);
 *  - learning rates: every param_groups[].lr and the plateau's lr <= the saving config's optim.lr;
 *  - selection: the state for each monitor the saving config sets (checkpoint.monitor with its mode,
 *    early_stopping.monitor, a plateau schedule's schedule.monitor) is present and kept for it; monitor names
 *    parse; at most evals_done top-k entries, each a score its metric can take (accuracies and F1 in [0, 1],
 *    losses and errors >= 0) and -- but for this checkpoint's own step -- a checkpoint directory beside this one;
 *    an empty set while RUN_DIR/best.json (same monitor and mode) names a checkpoint at or before this one;
 *    early stopping's best is where it starts (+-inf by mode) without a best step, else a value of its metric;
 *    the plateau's best where it starts or a value of its metric;
 *  - figures: last_loss finite >= 0; with has_val, val_loss not negative and val_accuracy in [0, 1].
 * The embedding trainer's checkpoints (reason "trainer") carry only its step count: the cursor, lr, totals-per-step
 * and selection-presence invariants do not apply to them. Errors: TR_E_RUNTIME "FILE: field NAME: ..." naming the
 * first field that disagrees and what it disagrees with.
 */
int tr_ckpt_validate(const tr_ckpt_progress *p, const tr_ckpt_meta *m, const tr_config *saved, const char *ckpt_dir,
                     const char *file, tr_error *err);

/**
 * What RUN_DIR/best.json names, read leniently (its full check is tr_best_resolve's, best.h): its monitor (""
 * when absent) into monitor[TR_MONITOR_NAME], its mode (1: max), and the distinct steps of its best and top_k
 * entries that are whole numbers in [0, TR_CKPT_MAX_STEP] into *steps (scores 0). Returns steps->n: 0 when there
 * is no best.json or it names nothing readable.
 */
int tr_ckpt_best_json(const char *run_dir, char monitor[TR_MONITOR_NAME], int *mode_max, tr_topk *steps);

/**
 * Parse MANIFEST.json's text: format_version 1 (or none: SHA-256) or 2 (XXH3-128); every entry a plain file name
 * (no '/', not "." or ".."), a size >= 0 and the format's digest in lowercase hex ("sha256": 64 digits,
 * "xxh3_128": 32); no name twice; at most TR_CKPT_MAX_FILES. Errors: TR_E_RUNTIME naming `file`.
 */
int tr_ckpt_parse_manifest(const char *text, const char *file, tr_ckpt_manifest *out, tr_error *err);

/* int64 fields are decimal strings and doubles C99 hex floats; 0, or -1 when `key` is absent or malformed. */
struct cJSON;
int tr_ckpt_json_i64(const struct cJSON *o, const char *key, int64_t *out);
int tr_ckpt_json_hex(const struct cJSON *o, const char *key, double *out);
/* A string field's text (owned by o), or NULL when `key` is absent or not a string. */
const char *tr_ckpt_json_str(const struct cJSON *o, const char *key);

/** Add o["threads"] = {"intra_op", "inter_op", "blas"}: libtorch's thread settings now (trs_get_threads; blas -1:
 * unknown), as a checkpoint's trainer.json and a run's summary.json record them. */
void tr_ckpt_json_add_threads(struct cJSON *o);

/** What a checkpoint must fit in this run, besides the model and optimizer (tr_checkpoint_check). */
typedef struct tr_ckpt_expect {
    int64_t epoch_samples; /**< samples in one epoch's order on this rank: the cursor's bound; -1: none (the
                                caller's batches, which have no epochs)                                        */
} tr_ckpt_expect;

/** Called with one human-readable line per warning (skipped corrupt checkpoint, version mismatch, ...). */
typedef void (*tr_ckpt_warn_fn)(void *ctx, const char *msg);

/**
 * Save a checkpoint of `model`, `opt`, `ema` (NULL: none), the default CPU generator and `p` under run_dir/checkpoints/ by the
 * protocol above. `reason` ("interval", "steps", "end", "signal", "watchdog") goes into trainer.json. The final
 * directory path is written to path_out[TR_PATH_MAX] (may be NULL) and the bytes written to *bytes (may be NULL).
 * Refuses (TR_E_RUNTIME) to replace an existing complete checkpoint of the same step. No tensor memory stays
 * allocated afterwards. It is tr_checkpoint_snapshot + tr_checkpoint_write + tr_checkpoint_snapshot_free, on the
 * calling thread (the run's background saves are ckpt_saver.h). Errors: TR_E_RUNTIME naming the file (I/O, disk full) -- the partial directory is removed.
 */
int tr_checkpoint_save(const char *run_dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt,
                       trs_ema *ema, const tr_ckpt_progress *p, const char *reason, char *path_out, int64_t *bytes,
                       tr_error *err);

/**
 * A checkpoint's state copied out of libtorch (tr_checkpoint_snapshot), to be written by tr_checkpoint_write on any
 * thread: the loop pays only for the copy, the files are written, hashed, fsynced and renamed off its path.
 */
typedef struct tr_ckpt_snapshot tr_ckpt_snapshot;

/**
 * Copy everything tr_checkpoint_save would write -- parameters and buffers, optimizer state, EMA weights (ema may
 * be NULL), the generator states (this process's, or p's gathered ones), and trainer.json's text built from `p`,
 * `reason` and the config -- into *out. The tensor bytes go into one anonymous mapping, each file's data section
 * packed as the file holds it (tr_checkpoint_snapshot_bytes in all), so the writer writes and hashes them from
 * there: outside libtorch's allocator, so the watchdog's allocated bytes never include it, and outside malloc's
 * heap. The mapping is the previous snapshot's when one was freed and its size fits (within 2x), else a fresh
 * MAP_POPULATE one: see tr_checkpoint_snapshot_free. The model's, optimizer's and EMA's entries are each described
 * and copied in one shim call (trs_*_state_describe / _read_all). Calls libtorch (the run's thread, under its
 * lock); the snapshot itself is plain memory. Errors: TR_E_RUNTIME (out of memory, a shim error naming the
 * file); *out is then NULL.
 */
int tr_checkpoint_snapshot(const tr_config *cfg, trs_model *model, trs_optimizer *opt, trs_ema *ema,
                           const tr_ckpt_progress *p, const char *reason, tr_ckpt_snapshot **out, tr_error *err);

/**
 * Write snapshot `s` as checkpoint run_dir/checkpoints/step-N by the protocol above (temporary directory, files,
 * manifest, fsyncs, rename, fsync of checkpoints/). Makes no libtorch call: safe on a thread of its own while the
 * run trains, as long as one save at a time writes into a run directory. Path and bytes as tr_checkpoint_save;
 * the same errors, naming the file; on failure nothing partial is left and no complete checkpoint is touched.
 */
int tr_checkpoint_write(const char *run_dir, const tr_ckpt_snapshot *s, char *path_out, int64_t *bytes,
                        tr_error *err);

/** The step of a snapshot (-1 for NULL) and the bytes of tensor data it holds (0 for NULL). */
int64_t tr_checkpoint_snapshot_step(const tr_ckpt_snapshot *s);
int64_t tr_checkpoint_snapshot_bytes(const tr_ckpt_snapshot *s);
/**
 * Free a snapshot (NULL: no-op). Its mapping is kept, resident, as the process's one spare for the next snapshot
 * (replacing and unmapping an older spare), so the next snapshot copies into resident pages instead of faulting in
 * fresh zeroed ones (the larger part of a snapshot's cost). The spare counts in the process's RSS (the checkpoint's
 * tensor bytes) until it is reused or released.
 */
void tr_checkpoint_snapshot_free(tr_ckpt_snapshot *s);

/** Unmap the spare mapping tr_checkpoint_snapshot_free keeps (none: no-op); a run calls it as it ends. Thread-safe;
 *  snapshots in use are not affected. */
void tr_checkpoint_release_spare(void);

/**
 * Keep the newest `keep_last` complete checkpoints at or before `step` (the one just saved) that are not in
 * `best` (checkpoint.save_top_k's set; NULL or empty: the steps RUN_DIR/best.json names, its best and top_k, so
 * that a selection state without entries never costs the best checkpoints), keep every one in that set, and
 * remove the others, and stale .tmp-* / .trash-* directories of interrupted saves and prunes. Newer directories
 * are left alone.
 */
int tr_checkpoint_prune(const char *run_dir, int64_t keep_last, int64_t step, const tr_topk *best, tr_error *err);

/** Verify a checkpoint directory against its manifest (every file present, sizes and digests equal, by the
 *  manifest's algorithm: SHA-256 for format 1, XXH3-128 for format 2). */
int tr_checkpoint_verify(const char *ckpt_dir, tr_error *err);

/**
 * The newest checkpoint of run_dir whose manifest verifies, into path_out[TR_PATH_MAX] ("" when there is none).
 * Each checkpoint skipped as corrupt is reported through `warn` with its directory name and the reason.
 */
int tr_checkpoint_find_latest(const char *run_dir, char *path_out, tr_ckpt_warn_fn warn, void *ctx, tr_error *err);

/**
 * Set aside every checkpoint of run_dir newer than `step` (-1: all of them) by renaming step-N to step-N.corrupt
 * (it fails verification) or step-N.superseded (it verifies, but the run continues from an older one), with a -k
 * suffix when that name is taken: they are kept for inspection, never deleted, and no longer block this run from
 * saving step N again or count against keep_last. Each one is reported through `warn`.
 */
int tr_checkpoint_set_aside_newer(const char *run_dir, int64_t step, tr_ckpt_warn_fn warn, void *ctx, tr_error *err);

/**
 * Set checkpoint directory `ckpt_dir` aside: rename it to ckpt_dir.LABEL (".LABEL-k" when that name is taken), so
 * that it is kept for inspection but no longer listed, resumed from or pruned. The new path into to_out[to_size]
 * (may be NULL). Errors: TR_E_RUNTIME naming the directory (the rename failed; nothing changed).
 */
int tr_checkpoint_set_aside(const char *ckpt_dir, const char *label, char *to_out, size_t to_size, tr_error *err);

/** 1 when the config checkpoint `ckpt_dir` was saved with (config_yaml) trains as `cfg` does: no key differs but
 *  those tr_config_fingerprint leaves out and the run's length (train.max_steps, train.epochs); else 0. */
int tr_checkpoint_same_config(const char *ckpt_dir, const tr_config *cfg);

/**
 * Check everything of checkpoint `dir` before any of it is used, changing nothing: the manifest (sizes and
 * hashes), trainer.json's fields (tr_ckpt_parse_trainer, with the step its directory is named after), the
 * cursor's position against x->epoch_samples (x may be NULL: no bound), param_groups against the optimizer's
 * (count and parameter names), model.safetensors' keys and shapes against the model's state_dict, the EMA's
 * entries and update count, every generator state's size (one per saved rank), and Adam's step counts in
 * [0, step]. Errors name the file and the field. TR_E_RUNTIME: the checkpoint is damaged -- it contradicts itself,
 * or it does not fit although what it depends on is unchanged (the same epoch length for the cursor, the same
 * config fingerprint for the model and optimizer); TR_E_CONFIG: it does not fit because that changed (another
 * data subset, model or optimizer) -- the caller reports it and keeps the checkpoint.
 */
int tr_checkpoint_check(const char *dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt, trs_ema *ema,
                        const tr_ckpt_expect *x, tr_error *err);

/**
 * The newest checkpoint of run_dir that passes tr_checkpoint_check, into path_out[TR_PATH_MAX] ("" when none
 * does). Each one that fails its manifest or is damaged (TR_E_RUNTIME) is reported through `warn` by name with the
 * reason and skipped; nothing is renamed. One that does not fit this config (TR_E_CONFIG) stops the search: that
 * error is returned, and the caller must not start afresh over it.
 */
int tr_checkpoint_find_resumable(const char *run_dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt,
                                 trs_ema *ema, const tr_ckpt_expect *x, char *path_out, tr_ckpt_warn_fn warn,
                                 void *ctx, tr_error *err);

/**
 * Load a checkpoint into model, optimizer, `ema` (may be NULL) and generator, and *p, after tr_checkpoint_check
 * passed (its errors are returned unchanged, and then nothing was changed). A checkpoint
 * without EMA weights loaded into a run with an EMA starts the EMA afresh from the loaded weights (warned). The model's state_dict must match the
 * checkpoint's exactly; otherwise TR_E_CONFIG lists every missing, unexpected and shape-mismatched key by dotted
 * name. Warns (not fails) when the config fingerprint, libtorch version, thread counts, device ("cpu" vs "cuda:0",
 * "cuda:0" vs "cuda:1") or number of CUDA generator states differ from the saved ones: the run continues, but
 * bit-identity with an uninterrupted run no longer holds. On a CUDA device, the CUDA generators of the devices both
 * the checkpoint and this process have are restored.
 * Errors: TR_E_RUNTIME (corrupt files, a wrong-size generator state), TR_E_CONFIG (model mismatch).
 */
int tr_checkpoint_load(const char *ckpt_dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt,
                       trs_ema *ema, const tr_ckpt_expect *x, tr_ckpt_progress *p, tr_ckpt_warn_fn warn, void *ctx,
                       tr_error *err);

/**
 * Load weights only (parameters and buffers) from a checkpoint directory or a .safetensors file, for init.from.
 * strict: every model key must be present with its shape and no extra key may exist, else TR_E_CONFIG listing
 * them all; not strict: matching keys are loaded, the rest reported through `warn` (shape mismatches still fail).
 */
int tr_checkpoint_load_weights(const char *path, trs_model *model, bool strict, tr_ckpt_warn_fn warn, void *ctx,
                               tr_error *err);

/**
 * The class names a checkpoint of an image-folder run saved (trainer.json "classes", read as untrusted: a list of
 * at most 65536 strings of 1 to 255 bytes) into a malloc'd array *names of *n malloc'd strings (free each, then
 * the array); *names NULL and *n 0 when it saved none. TR_E_RUNTIME naming the file and field when it cannot be
 * read or the field is malformed.
 */
int tr_checkpoint_read_classes(const char *ckpt_dir, char ***names, int64_t *n, tr_error *err);

/**
 * The config a checkpoint was saved with (trainer.json's config_yaml), over the defaults into *out. TR_OK;
 * TR_E_RUNTIME (unreadable, no config_yaml) or TR_E_CONFIG (it does not load) with the file named in err.
 */
int tr_checkpoint_read_config(const char *ckpt_dir, tr_config *out, tr_error *err);

#endif
