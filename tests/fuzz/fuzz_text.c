/* fuzz_text.c -- the language-modelling readers (text.h): the first byte picks one, the rest is its input.
 *   0: UTF-8 text -> code points -> character vocabulary -> ids -> text again, which must equal the input
 *   1: flat token ids (uint16 when bit 7 of the first byte is clear, else uint32), with and without a limit
 *   2: vocab.json (tr_vocab_from_json), and a valid one written back must parse to an equal vocabulary
 *   3: tr_text_load on the input as a text file (data.vocab from bit 7, block size from bits 2..6), then the
 *      windows of its splits */
#include <math.h>

#include "config.h"
#include "fuzz_util.h"
#include "text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const uint8_t mode = data[0] & 3, flags = data[0];
    const uint8_t *in = data + 1;
    const size_t n = size - 1;
    tr_error err = {0};
    if (mode == 0) {
        uint32_t *cps = malloc((n + 1) * sizeof *cps);
        int64_t m = 0;
        if (tr_utf8_decode("t.txt", in, n, cps, &m, &err) == TR_OK && m > 0) {
            tr_vocab v;
            if (tr_vocab_build_chars(cps, m, &v, &err) == TR_OK) {
                int64_t *ids = malloc((n + 1) * sizeof *ids), k = 0;
                if (tr_vocab_encode(&v, (const char *)in, n, ids, &k, &err) != TR_OK || k != m) abort();
                char *back = malloc(n + 1);
                if (tr_vocab_decode(&v, ids, k, back, n + 1) != n || memcmp(back, in, n) != 0) abort();
                char *json = tr_vocab_to_json(&v);
                tr_vocab w;
                if (!json || tr_vocab_from_json(json, "v.json", &w, &err) != TR_OK || !tr_vocab_equal(&v, &w)) abort();
                tr_vocab_free(&w);
                free(json);
                free(back);
                free(ids);
                tr_vocab_free(&v);
            }
        }
        free(cps);
    } else if (mode == 1) {
        const int width = flags & 0x80 ? 4 : 2;
        uint32_t *ids = malloc((n / 2 + 1) * sizeof *ids);
        tr_tokens_parse("t.bin", in, n, width, 0, ids, &err);
        tr_tokens_parse("t.bin", in, n, width, (flags >> 2) + 1, ids, &err);
        free(ids);
    } else if (mode == 2) {
        char *text = fuzz_string(in, n);
        tr_vocab v;
        if (tr_vocab_from_json(text, "vocab.json", &v, &err) == TR_OK) {
            char *json = tr_vocab_to_json(&v);
            tr_vocab w;
            if (!json || tr_vocab_from_json(json, "again.json", &w, &err) != TR_OK || !tr_vocab_equal(&v, &w)) abort();
            int64_t ids[4] = {0, 1, 255, 1000000};
            char out[64];
            tr_vocab_decode(&v, ids, 4, out, sizeof out);
            tr_vocab_free(&w);
            free(json);
            tr_vocab_free(&v);
        }
        free(text);
    } else {
        const char *path = fuzz_file("text", in, n);
        tr_config cfg;
        tr_config_defaults(&cfg);
        cfg.data.format = TR_DATA_TEXT;
        cfg.data.vocab = flags & 0x80 ? TR_VOCAB_CFG_CHARS : TR_VOCAB_CFG_BYTES;
        cfg.data.block_size = 1 + ((flags >> 2) & 31);
        snprintf(cfg.data.train_text, sizeof cfg.data.train_text, "%s", path);
        tr_token_splits s;
        tr_vocab v;
        if (tr_text_load(&cfg, &s, &v, &err) == TR_OK) {
            const int64_t T = cfg.data.block_size, nw = 4;
            int64_t starts[4], x[4 * 32], y[4 * 32];
            for (int64_t i = 0; i < nw; i++) starts[i] = tr_window_start(1, (uint64_t)i, s.n_train, T);
            tr_window_cut(s.train, starts, nw, T, x, y);
            for (int64_t i = 0; i < nw * T; i++)
                if (x[i] < 0 || x[i] >= v.size || y[i] < 0 || y[i] >= v.size) abort();
            if (s.n_val > T) {
                starts[0] = 0;
                tr_window_cut(s.val, starts, 1, T, x, y);
            }
            tr_token_splits_free(&s);
            tr_vocab_free(&v);
        }
    }
    return 0;
}
