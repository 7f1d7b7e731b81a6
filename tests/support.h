/* support.h -- helpers shared by the Criterion tests: temp dirs, subset configs, reading metrics.jsonl, the CLI. */
#ifndef TR_TEST_SUPPORT_H
#define TR_TEST_SUPPORT_H

#include <stddef.h>

#include "config.h"
#include "trainrun/trainrun.h"

#define FMNIST_TRAIN "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

/** The current test's temporary directory (made by support_tmp_init, removed by support_tmp_fini). */
extern char support_tmpdir[256];
void support_tmp_init(void);
void support_tmp_fini(void);

/** support_tmpdir/name, in one of 8 rotating static buffers (so a few can be used in one expression). */
const char *support_path(const char *name);

/** Remove the test's temporary directory now: call it right before cr_skip_test, after which Criterion runs no
 *  .fini (a skipped test would otherwise leave its directory behind). */
void support_skip_cleanup(void);

/** cr_skip_test, after removing the test's temporary directory (support_skip_cleanup). */
#define support_skip(...)                                                                                              \
    do {                                                                                                               \
        support_skip_cleanup();                                                                                        \
        cr_skip_test(__VA_ARGS__);                                                                                     \
    } while (0)

/**
 * configs/<config> on a Fashion-MNIST subset (3000 train, 500 val, 1000 test, batch 64, a train record every
 * step, no progress line, validation every 60 steps), then `extra` overrides (NULL-terminated, may be NULL), with
 * run.dir = the temp dir and run.name = name.
 */
void support_subset_config(tr_config *cfg, const char *config, const char *name, const char *const *extra);

/**
 * Field `field` (a number) of every metrics.jsonl record of run_dir whose type is `type` ("train", "eval",
 * "watchdog"), in order, into out[max]. Steps go into steps[max] when steps is not NULL. Returns the count.
 */
int support_read_field(const char *run_dir, const char *type, const char *field, double *out, double *steps, int max);

/** Count the metrics.jsonl records of run_dir that contain `needle`. */
int support_count_records(const char *run_dir, const char *needle);

/**
 * The command line the helpers below run: the installed one's build (TR_CLI, build/trainrun), or, while the
 * environment arms an I/O fault (TRAINRUN_TEST_IO_FAULT, io.h), its test copy (TR_TEST_CLI, build/tests/trainrun):
 * the same program with the fault hook compiled in, which the product has none of.
 */
const char *support_cli_path(void);

/** Run the CLI (support_cli_path) from the source dir with `args`; stdout+stderr into out[n]; the exit code. */
int support_cli(const char *args, char *out, size_t n);

/**
 * Start the CLI (support_cli_path) from the source dir with argv-style `args` (NULL-terminated, without the
 * program), stdout and stderr appended to `log_path`. Returns the pid.
 */
int support_spawn(const char *const *args, const char *log_path);

/** Wait for `pid`; returns its exit code, or 128 + signal when a signal ended it. */
int support_wait(int pid);

/** The step of the last record of run_dir/metrics.jsonl whose type is `type`, or -1 (no file or no record). */
long long support_last_step(const char *run_dir, const char *type);

/**
 * Deterministic blobs, n samples of d float32 features into x ([n, d], row-major) and int64 labels y ([n], i % k):
 * class c's mean is +1 on the features j with j % k == c and -0.3 elsewhere, plus uniform noise in [-0.75, 0.75)
 * from an LCG seeded by `seed` (the same seed gives the same bytes).
 */
void support_make_blobs(int n, int d, int k, uint64_t seed, float *x, int64_t *y);

/**
 * Assert a finished run's allocated bytes flat to the byte: run_dir/metrics.jsonl has exactly `records` train
 * records, every one from the watchdog's baseline step on (at least 50) reports allocated == baseline_bytes, the
 * final bytes equal the baseline, the fitted growth is 0 B/step and no watchdog warning was logged.
 */
struct tr_summary;
void support_assert_flat(const struct tr_summary *s, int records);

/**
 * Rewrite `file` (e.g. "trainer.json") of checkpoint directory `ckpt` with `edit(json, ctx)` applied to its parsed
 * JSON, then set that file's size and SHA-256 in ckpt/MANIFEST.json to match, as a checkpoint saved that way would
 * have them: the manifest check passes and only the field checks can tell. Asserts each step succeeds.
 */
/**
 * The digest the manifest of checkpoint directory `ckpt` lists for `file` (lowercase hex: XXH3-128's 32 digits, or
 * a format-1 manifest's SHA-256 64), into out[65]; "" when there is no such manifest or entry. A file's identity:
 * equal digests of one algorithm mean equal bytes (parameters bit for bit).
 */
void support_manifest_digest(const char *ckpt, const char *file, char out[65]);

typedef struct cJSON cJSON;
void support_edit_checkpoint_json(const char *ckpt, const char *file, void (*edit)(cJSON *json, void *ctx),
                                  void *ctx);

/** Set the size and digest of `file` (already rewritten) in checkpoint `ckpt`'s MANIFEST.json to match it. */
void support_resign_checkpoint_file(const char *ckpt, const char *file);

/**
 * The seed of a test's random choices (kill steps, kill moments): TRAINRUN_TEST_SEED when it is set (a decimal
 * unsigned, e.g. the seed a failed run printed), else one drawn from the time and the process id. Printed to
 * stderr with `what` either way ("<what>: seed S (TRAINRUN_TEST_SEED=S reproduces it)") and passed to srand(), so
 * the test's rand() draws are known. A malformed TRAINRUN_TEST_SEED fails the test.
 */
unsigned support_seed(const char *what);

/** Require Fashion-MNIST: skip the test when it is absent, but fail it under CI (where setup installs it). */
void support_require_fmnist(void);

/** Skip the test when the Debian package `fortunes` (/usr/share/games/fortunes, the GPT configs' text) is not
 * installed; fail instead under CI (the CI environment variable set), where scripts/setup.sh installs it. */
void support_require_fortunes(void);

/** Read up to n-1 bytes of the file at `path` into out, NUL-terminated (asserts it opens). */
void support_read_file(const char *path, char *out, size_t n);

/** What the trace at `path` computed: its step, eval and final lines (not its meta, override and config lines,
 * which name the data format and files), in a malloc'd string (at most 1 MiB); asserts the file opens. */
char *support_trace_computed(const char *path);

/** Write `text` into `path`. */
void support_write_file(const char *path, const char *text);

/** A TCP port on 127.0.0.1 that was free a moment ago (bound, read, closed), for a test's c10d rendezvous. */
int support_free_port(void);

/** torchrun's environment for rank `rank` of `world` on this host: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR
 *  127.0.0.1 and MASTER_PORT `port` (a forked rank sets it before it opens anything). */
void support_dist_env(int rank, int world, int port);

/** XOR the byte of `path` at `offset` (fseek's `whence`: SEEK_SET or SEEK_END) with `mask`: a damaged file whose
 *  size stays the same. Asserts that the file opens, seeks and changes. */
void support_flip_byte(const char *path, long offset, int whence, int mask);

/** `n` steps of a loop over the config's data: trainrun_trainer_next_batch from `train`, then
 *  trainrun_trainer_train_step, each asserted; the losses into loss[0..n) unless loss is NULL. */
void support_train_steps(trainrun_trainer *t, trainrun_data *train, int n, double *loss);

/** RUN_DIR/summary.json's member `key`, as cJSON prints it (a string with its quotes), into out[n]; "" when
 *  absent. Asserts the file reads and parses. */
void support_summary_member(const char *run_dir, const char *key, char *out, size_t n);

#endif
