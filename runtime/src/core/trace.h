/*
 * trace.h -- recorded traces: what a run computed, exactly, in a text format any language can write and diff.
 *
 * Format (UTF-8 text, one record per line, fields separated by single spaces; doubles as C99 hex floats, "%a",
 * so they round-trip exactly; Python writes them with float.hex()):
 *
 *   trainrun-trace 1
 *   meta libtorch 1.13.0
 *   meta threads 1
 *   meta interop_threads 1
 *   meta deterministic 0
 *   meta producer trainrun|pytorch
 *   meta config_fingerprint <64 hex digits>          the checkpoints' fingerprint of the effective config
 *                                                       (tr_config_fingerprint: numerics-relevant keys, the
 *                                                       model spec's text, the data directory)
 *   override <key.path=value>                          one per key the recording set beyond its config file
 *                                                       (command-line overrides; `verify` applies them)
 *   config <text>                                      one per line of the effective config YAML
 *                                                       (tr_config_write_yaml); "config" alone: an empty line
 * (the fingerprint, override and config records are absent from traces written before they existed and from
 * PyTorch's; readers then verify without them)
 *   step <k> loss <hex> lr <hex>                       k = 1, 2, ...: the k-th optimizer step, its mean batch
 *                                                       loss and the lr it used
 *   eval <split> <k> correct <n> samples <n> loss <hex> a validation/test pass after step k
 *   resume <k>                                         a resumed process continues after step k (appended)
 *   final params_crc32 <8 hex digits> params_abs_sum <hex>
 *       zlib crc32 over the raw little-endian bytes of every state_dict entry in state_dict order (parameters and
 *       buffers, float32 / int64 as stored), and the sum of |x| over them in double
 *   param <name> numel <n> crc32 <8 hex> l2 <hex> sketch <hex>,<hex>,... (TR_SKETCH_DIM of them)
 *       one per state_dict entry, after "final": its crc32 (as above, this entry alone), its L2 norm
 *       sqrt(sum x^2) in double, and a random-sign sketch s_j = sum_i sign_j(i) x_i (j < TR_SKETCH_DIM), where
 *       sign_j(i) is -1 when bit j of splitmix64(i + 0x9e3779b97f4a7c15) is set, else +1 (splitmix64's
 *       finalizer: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31).
 *       For two versions a, b of a tensor, mean_j (s_j(a) - s_j(b))^2 estimates ||a - b||^2 without storing
 *       either (the Johnson-Lindenstrauss / AMS sketch): the drift report's per-tensor difference
 *
 * Lines starting with '#' and unknown record kinds are ignored by the reader, so traces can grow fields.
 */
#ifndef TR_TRACE_H
#define TR_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "event.h"
#include "trainrun_shim.h"

/** One step record. */
typedef struct tr_trace_step {
    int64_t step;
    double loss;
    double lr;
} tr_trace_step;

/** One eval record. */
typedef struct tr_trace_eval {
    char split[16];
    int64_t step;
    int64_t correct, samples;
    double loss;
} tr_trace_eval;

/** Dimension of a parameter record's sketch. */
#define TR_SKETCH_DIM 16

/** One state_dict entry's digest (a "param" record). */
typedef struct tr_param_digest {
    char name[256];
    int64_t numel;
    uint32_t crc32;
    double l2;
    double sketch[TR_SKETCH_DIM];
} tr_param_digest;

/** A parsed trace. When a trace holds "resume" records, later step records replace earlier ones of equal k. */
typedef struct tr_trace {
    char libtorch[32];
    int threads, interop_threads, deterministic;
    char producer[32];
    tr_trace_step *steps;   /**< index k-1 holds step k; n_steps = highest k                               */
    unsigned char *have;    /**< have[k-1]: step k was recorded                                            */
    int64_t n_steps;
    tr_trace_eval *evals;
    int64_t n_evals;
    int has_final;
    uint32_t params_crc32;
    double params_abs_sum;
    int64_t resumes;        /**< number of resume records                                                  */
    char config_fingerprint[65]; /**< "" when not recorded                                                 */
    char **overrides;       /**< the recorded "key=value" overrides, NULL-terminated (NULL: none recorded)  */
    int n_overrides;
    char *config_yaml;      /**< the recorded effective config, or NULL                                    */
    tr_param_digest *params; /**< the "param" records, in order (NULL when none: older traces)             */
    int64_t n_params;
} tr_trace;

/** Read a trace file. Errors (TR_E_RUNTIME) name the file and line. */
int tr_trace_read(const char *path, tr_trace *out, tr_error *err);

/** Free a parsed trace (safe on a zeroed struct). */
void tr_trace_free(tr_trace *t);

/** Writers: each writes one line to f (the caller opens it, appending on resume) and flushes. */
void tr_trace_write_header(FILE *f, const char *libtorch, int threads, int interop_threads, int deterministic);
void tr_trace_write_step(FILE *f, int64_t step, double loss, double lr);
void tr_trace_write_eval(FILE *f, const char *split, int64_t step, int64_t correct, int64_t samples, double loss);
void tr_trace_write_resume(FILE *f, int64_t step);
/** The recording's config: fingerprint, the overrides (n of them), the effective config YAML text. */
void tr_trace_write_config(FILE *f, const char *fingerprint, char *const *overrides, int n, const char *yaml);
void tr_trace_write_final(FILE *f, uint32_t crc, double abs_sum);
void tr_trace_write_param(FILE *f, const tr_param_digest *d);

/**
 * The digest of one state_dict entry: n values of x (float32 when is_f32, else int64), raw bytes `bytes` of
 * nbytes for its crc32 (as the final record's). name is copied (truncated to fit).
 */
void tr_param_digest_compute(tr_param_digest *d, const char *name, const void *bytes, size_t nbytes, int64_t n,
                             int is_f32);

/**
 * Every state_dict entry's digest of `model` (trs_model_state_describe / _read_all), malloc'd into *out (free()
 * it) and *n. Returns TR_OK, or TR_E_RUNTIME (out of memory, a libtorch failure) with the reason in err.
 */
int tr_param_digests(trs_model *model, tr_param_digest **out, int64_t *n, tr_error *err);

/**
 * The drift report of `got` against the reference `want` (drift.c), for two traces that are not bit-identical
 * (e.g. recorded with two PyTorch versions): their producers and libtorch versions; the first step whose loss or
 * lr differs; the relative difference |a - b| / |b| of the loss at steps 1, 2, 5, 10, 20, 50, ... and the last,
 * with its running maximum; each eval side by side; and per state_dict entry, the relative difference of the L2
 * norms and the sketch's estimate of ||a - b|| / ||b|| (where both traces have param records). Written to f.
 */
void tr_trace_drift_report(FILE *f, const tr_trace *got, const tr_trace *want);

/**
 * The trace sink of the run's events (event.h): a TR_EV_STEP becomes a step line, a TR_EV_EVAL of the live
 * weights an eval line, TR_EV_TRAINED the final line; other kinds write nothing.
 */
void tr_trace_event(FILE *f, const tr_event *ev);

/**
 * Compare `got` with the reference `want`. rtol 0: every step's loss and lr, every eval count and the final
 * checksum must be equal bit for bit; rtol > 0: losses and lrs may differ by rtol x |want| (counts and the
 * checksum are then not compared, since parameters differ in their last bits). Steps compare from `from_step`
 * on (1 = all). On a difference, a description of the first one ("step 137: loss 0x1.2p+0 vs 0x1.3p+0, relative
 * difference 3.1e-05") goes into msg[n] and 1 is returned; 0 when they agree. Differing meta (libtorch, threads)
 * is written to warn[n] ("" when none) but is not a difference.
 */
int tr_trace_compare(const tr_trace *got, const tr_trace *want, double rtol, int64_t from_step, char *msg,
                     size_t n, char *warn, size_t wn);

#endif
