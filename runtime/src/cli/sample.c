/*
 * sample.c -- `trainrun sample` (see sample.h): a language model's continuation of a prompt, through the embedding
 * API's trainrun_trainer_generate, decoded with the vocabulary stored next to the weights.
 */
#include "sample.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "io.h"
#include "predict.h"
#include "text.h"
#include "trainrun/trainrun.h"

static int usage_error(const char *msg)
{
    fprintf(stderr,
            "trainrun sample: %s\nusage: trainrun sample RUN_DIR_OR_CHECKPOINT [--tokens N] [--temperature T] "
            "[--top-k K] [--seed S] [--prompt TEXT] [--weights live|ema]\n",
            msg);
    return TR_E_CONFIG;
}

/* A whole number in [lo, hi] from an option's argument, or -1 with a message. */
static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "trainrun sample: %s: '%s' is not a whole number in [%lld, %lld]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* The vocabulary saved with the weights: the checkpoint's vocab.json, else the run directory's. */
static int load_vocab(const char *ckpt, const char *run_dir, tr_vocab *v, char *file, tr_error *err)
{
    const char *dirs[2] = {ckpt, run_dir};
    for (int i = 0; i < 2; i++) {
        snprintf(file, TR_PATH_MAX + 32, "%s/vocab.json", dirs[i]);
        int found = 0;
        const int rc = tr_vocab_read_file(file, v, &found, err);
        if (rc || found) return rc;
    }
    return tr_error_set(err, TR_E_CONFIG, "%s: no vocab.json (in the checkpoint or the run directory): not a run of "
                        "data.format text or tokens", run_dir);
}

/* The prompt as token ids: text through the vocabulary, or blank-separated ids for a tokens run. Default: a
 * newline (text; nanoGPT's sample.py default start) or id 0. */
static int encode_prompt(const tr_vocab *v, const char *prompt, int64_t **ids, int64_t *n, tr_error *err)
{
    const char *p = prompt ? prompt : (v->kind == TR_VOCAB_IDS ? "0" : "\n");
    const size_t len = strlen(p);
    *ids = malloc((len + 1) * sizeof **ids);
    if (!*ids) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    if (v->kind != TR_VOCAB_IDS) return tr_vocab_encode(v, p, len, *ids, n, err);
    *n = 0;
    for (const char *s = p; *s;) {
        char *end = NULL;
        errno = 0;
        const long long id = strtoll(s, &end, 10);
        if (end == s || errno || id < 0 || id >= v->size)
            return tr_error_set(err, TR_E_CONFIG, "--prompt: '%s' is not a list of token ids in [0, %lld)", p,
                                (long long)v->size);
        (*ids)[(*n)++] = id;
        s = end;
        while (*s == ' ' || *s == ',') s++;
    }
    return TR_OK;
}

int tr_cli_sample(int argc, char **argv)
{
    const char *path = NULL, *prompt = NULL, *weights = NULL;
    long long tokens = 500, top_k = 200, seed = 0;
    double temperature = 0.8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has_arg = i + 1 < argc;
        if (strcmp(a, "--tokens") == 0 || strcmp(a, "--top-k") == 0 || strcmp(a, "--seed") == 0 ||
            strcmp(a, "--temperature") == 0 || strcmp(a, "--prompt") == 0 || strcmp(a, "--weights") == 0) {
            if (!has_arg) {
                char msg[64];
                snprintf(msg, sizeof msg, "%s needs a value", a);
                return usage_error(msg);
            }
            const char *v = argv[++i];
            if (strcmp(a, "--tokens") == 0 && parse_int(a, v, 0, 1000000, &tokens)) return TR_E_CONFIG;
            if (strcmp(a, "--top-k") == 0 && parse_int(a, v, 0, 1LL << 32, &top_k)) return TR_E_CONFIG;
            if (strcmp(a, "--seed") == 0 && parse_int(a, v, 0, INT64_MAX, &seed)) return TR_E_CONFIG;
            if (strcmp(a, "--prompt") == 0) prompt = v;
            if (strcmp(a, "--weights") == 0) {
                if (strcmp(v, "live") != 0 && strcmp(v, "ema") != 0) return usage_error("--weights: live or ema");
                weights = v;
            }
            if (strcmp(a, "--temperature") == 0) {
                char *end = NULL;
                temperature = strtod(v, &end);
                if (end == v || *end || !(temperature > 0) || !isfinite(temperature)) {
                    fprintf(stderr, "trainrun sample: --temperature: '%s' is not a number > 0\n", v);
                    return TR_E_CONFIG;
                }
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "trainrun sample: unknown option '%s'\n", a);
            return TR_E_CONFIG;
        } else if (!path) {
            path = a;
        } else {
            return usage_error("more than one run directory or checkpoint given");
        }
    }
    if (!path) return usage_error("no run directory or checkpoint given");

    tr_error err = {0};
    char run_dir[TR_PATH_MAX], ckpt[TR_PATH_MAX], config[TR_PATH_MAX + 16], vocab_file[TR_PATH_MAX + 32];
    char ema_file[TR_PATH_MAX + 32];
    tr_vocab vocab = {0};
    trainrun_trainer *tr = NULL;
    int64_t *ids = NULL, *out = NULL, n_prompt = 0;
    char *text = NULL;
    tr_config cfg;
    int rc = tr_resolve_run_config(path, run_dir, ckpt, config, sizeof config, &err);
    if (!rc) rc = tr_config_load_cli(&cfg, config, NULL, 0, &err);
    if (!rc) rc = load_vocab(ckpt, run_dir, &vocab, vocab_file, &err);
    if (!rc) rc = encode_prompt(&vocab, prompt, &ids, &n_prompt, &err);
    if (!rc) {
        /* the trainer of the run's config, its model told the window length it was trained on */
        char shape[64];
        snprintf(shape, sizeof shape, "model.input_shape=[%lld]", (long long)cfg.data.block_size);
        const char *overrides[1] = {shape};
        int st = trainrun_trainer_open(config, overrides, 1, &tr);
        if (!st) st = trainrun_trainer_load(tr, ckpt);
        /* the weights: --weights, else the EMA's when the checkpoint has them (what the run's EMA evaluation
         * measured), else the live ones; said on stderr either way */
        snprintf(ema_file, sizeof ema_file, "%s/ema.safetensors", ckpt);
        const int has_ema = access(ema_file, R_OK) == 0;
        if (!weights) weights = has_ema ? "ema" : "live";
        if (!st && strcmp(weights, "ema") == 0 && !has_ema) {
            rc = tr_error_set(&err, TR_E_CONFIG, "--weights ema: %s has no EMA weights (ema.enabled was off)", ckpt);
        } else if (!st && strcmp(weights, "ema") == 0) {
            st = trainrun_trainer_load_weights(tr, ema_file);
        }
        if (st && !rc)
            rc = tr_error_set(&err, st == TRAINRUN_E_CONFIG ? TR_E_CONFIG : TR_E_RUNTIME, "%s",
                              tr ? trainrun_trainer_errmsg(tr) : trainrun_errstr(st));
    }
    if (!rc) {
        int64_t oshape[8];
        int ondim = 0;
        trainrun_trainer_output_shape(tr, oshape, &ondim);
        if (ondim == 2 && oshape[1] < vocab.size)
            rc = tr_error_set(&err, TR_E_CONFIG, "%s: %lld tokens, but the model has only %lld outputs", vocab_file,
                              (long long)vocab.size, (long long)oshape[1]);
    }
    if (!rc && !(out = malloc(((size_t)tokens + 1) * sizeof *out))) rc = tr_error_set(&err, TR_E_RUNTIME, "out of memory");
    if (!rc) {
        const int st = trainrun_trainer_generate(tr, ids, n_prompt, tokens, temperature, top_k, (uint64_t)seed, out);
        if (st) rc = tr_error_set(&err, st == TRAINRUN_E_INVALID ? TR_E_CONFIG : TR_E_RUNTIME, "%s",
                                  trainrun_trainer_errmsg(tr));
    }
    if (!rc) {
        const size_t need = tr_vocab_decode(&vocab, ids, n_prompt, NULL, 0) +
                            tr_vocab_decode(&vocab, out, tokens, NULL, 0) + 2;
        text = malloc(need);
        if (!text) rc = tr_error_set(&err, TR_E_RUNTIME, "out of memory");
    }
    if (!rc) {
        size_t used = tr_vocab_decode(&vocab, ids, n_prompt, text, SIZE_MAX);
        if (vocab.kind == TR_VOCAB_IDS && tokens > 0) text[used++] = ' ';
        tr_vocab_decode(&vocab, out, tokens, text + used, SIZE_MAX);
        fprintf(stderr, "trainrun sample: %s, %s weights, %lld tokens, temperature %g, top-k %lld, seed %lld\n", ckpt,
                strcmp(weights, "ema") == 0 ? "EMA" : "live", tokens, temperature, top_k, seed);
        /* the model's bytes go to a terminal: control bytes but newline and tab are shown as \xNN */
        for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
            if ((*c < 0x20 && *c != '\n' && *c != '\t') || *c == 0x7f) printf("\\x%02x", *c);
            else putchar(*c);
        }
        putchar('\n');
        if (fflush(stdout) != 0) rc = tr_error_set(&err, TR_E_RUNTIME, "stdout: write failed");
    }
    if (rc) fprintf(stderr, "trainrun sample: %s\n", err.msg);
    free(text);
    free(out);
    free(ids);
    tr_vocab_free(&vocab);
    if (tr) trainrun_trainer_close(tr);
    return rc;
}
