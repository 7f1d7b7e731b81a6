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
 *
 * Lines starting with '#' and unknown record kinds are ignored by the reader, so traces can grow fields.
 */
#ifndef TR_TRACE_H
#define TR_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "event.h"

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
