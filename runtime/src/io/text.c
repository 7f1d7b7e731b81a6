/* text.c -- token data: UTF-8 text and flat token files, the vocabulary, and training / validation windows. */
#include "text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "io.h"
#include "splitmix.h"

/* ------------------------------------------------------------------------------------------------ UTF-8 */

/* Length of the sequence lead byte b starts (1..4), 0 for a byte no sequence starts with. */
static int utf8_len(unsigned char b)
{
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) return 3;
    if (b >= 0xf0 && b <= 0xf4) return 4;
    return 0;
}

/* Decode the sequence at buf[i] (len bytes left); *cp and its length, or 0 with why[] filled. RFC 3629. */
static int utf8_one(const unsigned char *buf, size_t i, size_t len, uint32_t *cp, char *why, size_t why_size)
{
    const unsigned char b = buf[i];
    const int k = utf8_len(b);
    if (k == 0) {
        snprintf(why, why_size, "0x%02x cannot start a character%s", b,
                 b >= 0x80 && b <= 0xbf ? " (a continuation byte without a lead byte)" : "");
        return 0;
    }
    if (i + (size_t)k > len) {
        snprintf(why, why_size, "0x%02x starts a %d-byte sequence but the file ends after %zu", b, k, len - i);
        return 0;
    }
    uint32_t c = k == 1 ? b : k == 2 ? (b & 0x1fu) : k == 3 ? (b & 0x0fu) : (b & 0x07u);
    for (int j = 1; j < k; j++) {
        const unsigned char n = buf[i + (size_t)j];
        if ((n & 0xc0) != 0x80) {
            snprintf(why, why_size, "0x%02x starts a %d-byte sequence but byte %zu is 0x%02x", b, k, i + (size_t)j, n);
            return 0;
        }
        c = (c << 6) | (n & 0x3fu);
    }
    if ((k == 3 && c < 0x800) || (k == 4 && c < 0x10000)) {
        snprintf(why, why_size, "overlong encoding of U+%04X", (unsigned)c);
        return 0;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
        snprintf(why, why_size, "U+%04X is a UTF-16 surrogate", (unsigned)c);
        return 0;
    }
    if (c > 0x10ffff) {
        snprintf(why, why_size, "U+%X is above U+10FFFF", (unsigned)c);
        return 0;
    }
    *cp = c;
    return k;
}

int tr_utf8_decode(const char *file, const unsigned char *buf, size_t len, uint32_t *out, int64_t *n, tr_error *err)
{
    int64_t m = 0;
    char why[160];
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        const int k = utf8_one(buf, i, len, &cp, why, sizeof why);
        if (k == 0) {
            *n = 0;
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: invalid UTF-8 (%s); data.vocab: bytes reads any "
                                "bytes", file, i, why);
        }
        out[m++] = cp;
        i += (size_t)k;
    }
    *n = m;
    return TR_OK;
}

int tr_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ------------------------------------------------------------------------------------------------ token files */

int tr_tokens_parse(const char *file, const unsigned char *buf, size_t len, int width, int64_t vocab_limit,
                    uint32_t *out, tr_error *err)
{
    if (width != 2 && width != 4) return tr_error_set(err, TR_E_CONFIG, "%s: token width %d is not 2 or 4", file, width);
    if (len % (size_t)width != 0)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: truncated: %zu bytes are not a whole number of %d-byte "
                            "%s tokens", file, len - len % (size_t)width, len, width, width == 2 ? "uint16" : "uint32");
    const size_t n = len / (size_t)width;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = buf + i * (size_t)width;
        const uint32_t v = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                                      : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (vocab_limit > 0 && (int64_t)v >= vocab_limit)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: token id %u is outside the vocabulary of %lld", file,
                                i * (size_t)width, (unsigned)v, (long long)vocab_limit);
        out[i] = v;
    }
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ vocabulary */

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int tr_vocab_build_chars(const uint32_t *cps, int64_t n, tr_vocab *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    /* a bitmap of the code points seen (0x110000 bits = 136 KiB), then the set bits in order */
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) return tr_error_set(err, TR_E_RUNTIME, "character vocabulary: out of memory");
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t c = cps[i] < 0x110000 ? cps[i] : 0;
        if (!(seen[c >> 3] & (1u << (c & 7)))) {
            seen[c >> 3] |= (uint8_t)(1u << (c & 7));
            count++;
        }
    }
    if (count > TR_VOCAB_MAX_CHARS || count == 0) {
        free(seen);
        return tr_error_set(err, TR_E_CONFIG, "character vocabulary: %lld characters (1 to %d allowed)",
                            (long long)count, TR_VOCAB_MAX_CHARS);
    }
    out->chars = malloc((size_t)count * sizeof *out->chars);
    if (!out->chars) {
        free(seen);
        return tr_error_set(err, TR_E_RUNTIME, "character vocabulary: out of memory");
    }
    int64_t k = 0;
    for (uint32_t c = 0; c < 0x110000; c++)
        if (seen[c >> 3] & (1u << (c & 7))) out->chars[k++] = c;
    free(seen);
    out->kind = TR_VOCAB_CHARS;
    out->size = count;
    return TR_OK;
}

int64_t tr_vocab_char_id(const tr_vocab *v, uint32_t cp)
{
    if (v->kind != TR_VOCAB_CHARS || !v->chars) return -1;
    const uint32_t *hit = bsearch(&cp, v->chars, (size_t)v->size, sizeof cp, cmp_u32);
    return hit ? (int64_t)(hit - v->chars) : -1;
}

static const char *const k_vocab_kinds[] = {"bytes", "chars", "ids"};

char *tr_vocab_to_json(const tr_vocab *v)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "kind", k_vocab_kinds[v->kind]);
    cJSON_AddNumberToObject(o, "size", (double)v->size);
    if (v->kind == TR_VOCAB_CHARS) {
        char *s = malloc((size_t)v->size * 4 + 1);
        if (!s) {
            cJSON_Delete(o);
            return NULL;
        }
        /* U+0000 cannot travel in a C string: a vocabulary that has it says so with "nul": true instead */
        const int nul = v->size > 0 && v->chars[0] == 0;
        size_t used = 0;
        for (int64_t i = nul; i < v->size; i++) used += (size_t)tr_utf8_encode(v->chars[i], s + used);
        s[used] = '\0';
        cJSON_AddStringToObject(o, "chars", s);
        if (nul) cJSON_AddTrueToObject(o, "nul");
        free(s);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

int tr_vocab_from_json(const char *text, const char *file, tr_vocab *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_Parse(text);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return tr_error_set(err, TR_E_CONFIG, "%s: not a JSON object", file);
    }
    int rc = TR_OK;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "size");
    int k = -1;
    for (int i = 0; i < 3 && cJSON_IsString(kind); i++)
        if (strcmp(kind->valuestring, k_vocab_kinds[i]) == 0) k = i;
    if (k < 0) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: field kind: expected \"bytes\", \"chars\" or \"ids\"", file);
    } else if (!cJSON_IsNumber(size) || !(size->valuedouble >= 1 && size->valuedouble <= 4294967296.0) ||
               size->valuedouble != floor(size->valuedouble)) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: field size: expected a whole number in [1, 2^32]", file);
    } else if (k == TR_VOCAB_BYTES && size->valuedouble != 256) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: field size: a bytes vocabulary has 256 tokens", file);
    } else {
        out->kind = (tr_vocab_kind)k;
        out->size = (int64_t)size->valuedouble;
    }
    if (!rc && k == TR_VOCAB_CHARS) {
        const cJSON *chars = cJSON_GetObjectItemCaseSensitive(o, "chars");
        const int nul = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "nul"));
        if (!cJSON_IsString(chars) || out->size > TR_VOCAB_MAX_CHARS) {
            rc = tr_error_set(err, TR_E_CONFIG, "%s: field chars: expected a string of at most %d characters", file,
                              TR_VOCAB_MAX_CHARS);
        } else {
            const size_t len = strlen(chars->valuestring);
            uint32_t *cps = malloc((len + 2) * sizeof *cps);
            int64_t n = 0;
            if (!cps) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
            if (!rc && nul) cps[n++] = 0;
            int64_t m = 0;
            if (!rc) {
                char where[300];
                snprintf(where, sizeof where, "%s: field chars", file);
                rc = tr_utf8_decode(where, (const unsigned char *)chars->valuestring, len, cps + n, &m, err);
                n += m;
            }
            for (int64_t i = 1; !rc && i < n; i++)
                if (cps[i] <= cps[i - 1])
                    rc = tr_error_set(err, TR_E_CONFIG, "%s: field chars: character %lld (U+%04X) is not above the "
                                      "one before it (the list is strictly ascending)", file, (long long)i,
                                      (unsigned)cps[i]);
            if (!rc && n != out->size)
                rc = tr_error_set(err, TR_E_CONFIG, "%s: field chars: %lld characters, but size is %lld", file,
                                  (long long)n, (long long)out->size);
            if (rc) free(cps);
            else out->chars = cps;
        }
    }
    cJSON_Delete(o);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

int tr_vocab_equal(const tr_vocab *a, const tr_vocab *b)
{
    if (a->kind != b->kind || a->size != b->size) return 0;
    if (a->kind != TR_VOCAB_CHARS) return 1;
    return memcmp(a->chars, b->chars, (size_t)a->size * sizeof *a->chars) == 0;
}

int tr_vocab_read_file(const char *file, tr_vocab *out, int *found, tr_error *err)
{
    *found = 0;
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(file, &st) != 0 && errno == ENOENT) return TR_OK;
    unsigned char *text = NULL;
    size_t n = 0;
    int rc = tr_io_read_file(file, 4 << 20, &text, &n, err); /* errors name the file */
    if (rc) return rc;
    rc = tr_vocab_from_json((const char *)text, file, out, err);
    free(text);
    if (rc) return err->code = TR_E_CONFIG;
    *found = 1;
    return TR_OK;
}

int tr_vocab_copy(const tr_vocab *v, tr_vocab *out, tr_error *err)
{
    *out = *v;
    out->chars = NULL;
    if (v->kind != TR_VOCAB_CHARS || !v->chars) return TR_OK;
    const size_t bytes = (size_t)v->size * sizeof *v->chars;
    if (!(out->chars = malloc(bytes))) {
        memset(out, 0, sizeof *out);
        return tr_error_set(err, TR_E_RUNTIME, "out of memory copying a vocabulary of %lld characters",
                            (long long)v->size);
    }
    memcpy(out->chars, v->chars, bytes);
    return TR_OK;
}

void tr_vocab_free(tr_vocab *v)
{
    free(v->chars);
    memset(v, 0, sizeof *v);
}

int tr_vocab_encode(const tr_vocab *v, const char *text, size_t len, int64_t *ids, int64_t *n, tr_error *err)
{
    *n = 0;
    if (v->kind == TR_VOCAB_IDS)
        return tr_error_set(err, TR_E_CONFIG, "--prompt: a tokens-format run has token ids without a text encoding");
    if (v->kind == TR_VOCAB_BYTES) {
        for (size_t i = 0; i < len; i++) ids[i] = (unsigned char)text[i];
        *n = (int64_t)len;
        return TR_OK;
    }
    char why[160];
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        const int k = utf8_one((const unsigned char *)text, i, len, &cp, why, sizeof why);
        if (k == 0) return tr_error_set(err, TR_E_CONFIG, "--prompt: byte %zu: invalid UTF-8 (%s)", i, why);
        const int64_t id = tr_vocab_char_id(v, cp);
        if (id < 0)
            return tr_error_set(err, TR_E_CONFIG, "--prompt: byte %zu: character U+%04X is not in the vocabulary of "
                                "%lld characters the model was trained with", i, (unsigned)cp, (long long)v->size);
        ids[(*n)++] = id;
        i += (size_t)k;
    }
    return TR_OK;
}

size_t tr_vocab_decode(const tr_vocab *v, const int64_t *ids, int64_t n, char *out, size_t cap)
{
    size_t need = 0;
    for (int64_t i = 0; i < n; i++) {
        char piece[32];
        int k = 0;
        const int64_t id = ids[i];
        if (v->kind == TR_VOCAB_IDS) {
            k = snprintf(piece, sizeof piece, "%s%lld", i ? " " : "", (long long)id);
        } else if (id < 0 || id >= v->size) {
            k = snprintf(piece, sizeof piece, "\\x{%lld}", (long long)id);
        } else if (v->kind == TR_VOCAB_BYTES) {
            piece[0] = (char)id;
            k = 1;
        } else {
            k = tr_utf8_encode(v->chars[id], piece);
        }
        for (int j = 0; j < k; j++, need++)
            if (cap > 0 && need < cap - 1) out[need] = piece[j];
    }
    if (cap > 0) out[need < cap - 1 ? need : cap - 1] = '\0';
    return need;
}

/* ------------------------------------------------------------------------------------------------ windows */

int64_t tr_window_start(uint64_t seed, uint64_t g, int64_t n_tokens, int64_t block)
{
    const uint64_t range = (uint64_t)(n_tokens - block); /* starts 0 .. n - block - 1: s + block + 1 <= n */
    /* two rounds so (seed, g) and (seed + 1, g - 1) are unrelated; the modulo bias is below range / 2^64 */
    return (int64_t)(tr_splitmix64(tr_splitmix64(seed ^ 0x746f6b656e73ull) + g) % range);
}

void tr_window_cut(const uint32_t *tokens, const int64_t *starts, int64_t rows, int64_t block, int64_t *x, int64_t *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t *w = tokens + starts[r];
        for (int64_t j = 0; j < block; j++) {
            x[r * block + j] = w[j];
            y[r * block + j] = w[j + 1];
        }
    }
}

/* ------------------------------------------------------------------------------------------------ loading */


/* Append to a growing uint32 array. */
static int grow(uint32_t **a, int64_t *cap, int64_t need)
{
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    uint32_t *p = realloc(*a, (size_t)c * sizeof *p);
    if (!p) return -1;
    *a = p;
    *cap = c;
    return 0;
}

/* The text format: every file of data.train_text (comma-separated, under data.root), concatenated in order, as
 * bytes or code points in all[0..*n). */
static int read_text_files(const tr_config *cfg, uint32_t **all, int64_t *n, char *last_file, size_t lf_size,
                           int64_t **file_ends, char (**names)[TR_PATH_MAX], int *n_files, tr_error *err)
{
    char list[sizeof cfg->data.train_text];
    snprintf(list, sizeof list, "%s", cfg->data.train_text);
    int64_t cap = 0;
    *all = NULL;
    *n = 0;
    *n_files = 0;
    *file_ends = NULL;
    *names = NULL;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        char path[TR_PATH_MAX];
        tr_config_resolve_data_path(cfg, tok, path, sizeof path);
        unsigned char *buf = NULL;
        size_t len = 0;
        int rc = tr_io_read_file(path, TR_TEXT_MAX_FILE_BYTES, &buf, &len, err);
        if (!rc && grow(all, &cap, *n + (int64_t)len + 1))
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
        if (!rc && cfg->data.vocab == TR_VOCAB_CFG_BYTES) {
            for (size_t i = 0; i < len; i++) (*all)[*n + (int64_t)i] = buf[i];
            *n += (int64_t)len;
        } else if (!rc) {
            int64_t m = 0;
            rc = tr_utf8_decode(path, buf, len, *all + *n, &m, err);
            *n += m;
        }
        free(buf);
        int64_t *fe = rc ? NULL : realloc(*file_ends, (size_t)(*n_files + 1) * sizeof *fe);
        char(*nm)[TR_PATH_MAX] = fe ? realloc(*names, (size_t)(*n_files + 1) * sizeof *nm) : NULL;
        if (!rc && (!fe || !nm)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
        if (fe) *file_ends = fe;
        if (nm) *names = nm;
        if (rc) return rc;
        (*file_ends)[*n_files] = *n;
        snprintf((*names)[*n_files], TR_PATH_MAX, "%s", path);
        (*n_files)++;
        snprintf(last_file, lf_size, "%s", path);
    }
    if (*n_files == 0) return tr_error_set(err, TR_E_CONFIG, "data.train_text: no file given");
    return TR_OK;
}

/* The file (of the concatenation) token i came from, and its position in it, for messages. */
static const char *where_in(int64_t i, const int64_t *ends, char (*names)[TR_PATH_MAX], int nf, int64_t *pos)
{
    int64_t start = 0;
    for (int f = 0; f < nf; f++) {
        if (i < ends[f]) {
            *pos = i - start;
            return names[f];
        }
        start = ends[f];
    }
    *pos = i;
    return nf ? names[nf - 1] : "?";
}

static int load_text(const tr_config *cfg, tr_token_splits *out, tr_vocab *vocab, tr_error *err)
{
    uint32_t *all = NULL;
    int64_t n = 0, *ends = NULL;
    char(*names)[TR_PATH_MAX] = NULL;
    int nf = 0;
    int rc = read_text_files(cfg, &all, &n, out->train_file, sizeof out->train_file, &ends, &names, &nf, err);
    const int64_t n_val = rc ? 0 : (int64_t)floor((double)n * cfg->data.val_fraction);
    const int64_t n_train = n - n_val;
    if (!rc && cfg->data.vocab == TR_VOCAB_CFG_BYTES) {
        vocab->kind = TR_VOCAB_BYTES;
        vocab->size = 256;
    } else if (!rc) {
        rc = tr_vocab_build_chars(all, n_train, vocab, err);
        for (int64_t i = 0; !rc && i < n; i++) {
            const int64_t id = tr_vocab_char_id(vocab, all[i]);
            if (id < 0) { /* only the validation tail can have one the training split lacks */
                int64_t pos = 0;
                const char *f = where_in(i, ends, names, nf, &pos);
                rc = tr_error_set(err, TR_E_CONFIG, "%s: character %lld (U+%04X, in the validation tail): not in the "
                                  "vocabulary of the %lld characters of the training split; data.vocab: bytes reads "
                                  "any text", f, (long long)pos, (unsigned)all[i], (long long)vocab->size);
            } else {
                all[i] = (uint32_t)id;
            }
        }
    }
    if (!rc) {
        out->train = all;
        out->n_train = n_train;
        out->n_val = n_val;
        out->val = malloc((size_t)(n_val > 0 ? n_val : 1) * sizeof *out->val);
        if (!out->val) rc = tr_error_set(err, TR_E_RUNTIME, "out of memory");
        else memcpy(out->val, all + n_train, (size_t)n_val * sizeof *out->val);
        all = NULL;
    }
    free(all);
    free(ends);
    free(names);
    return rc;
}

static int load_token_file(const tr_config *cfg, const char *name, uint32_t **ids, int64_t *n, tr_error *err)
{
    char path[TR_PATH_MAX];
    tr_config_resolve_data_path(cfg, name, path, sizeof path);
    unsigned char *buf = NULL;
    size_t len = 0;
    int rc = tr_io_read_file(path, TR_TEXT_MAX_FILE_BYTES, &buf, &len, err);
    const int width = cfg->data.token_dtype == TR_TOKEN_UINT16 ? 2 : 4;
    if (!rc) {
        *ids = malloc((len / (size_t)width + 1) * sizeof **ids);
        if (!*ids) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    }
    if (!rc) rc = tr_tokens_parse(path, buf, len, width, 0, *ids, err);
    if (!rc) *n = (int64_t)(len / (size_t)width);
    free(buf);
    return rc;
}

int tr_text_load(const tr_config *cfg, tr_token_splits *out, tr_vocab *vocab, tr_error *err)
{
    memset(out, 0, sizeof *out);
    memset(vocab, 0, sizeof *vocab);
    int rc = TR_OK;
    if (cfg->data.format == TR_DATA_TEXT) {
        rc = load_text(cfg, out, vocab, err);
    } else {
        rc = load_token_file(cfg, cfg->data.train_tokens, &out->train, &out->n_train, err);
        tr_config_resolve_data_path(cfg, cfg->data.train_tokens, out->train_file, sizeof out->train_file);
        if (!rc && cfg->data.val_tokens[0]) {
            rc = load_token_file(cfg, cfg->data.val_tokens, &out->val, &out->n_val, err);
        } else if (!rc) {
            const int64_t n_val = (int64_t)floor((double)out->n_train * cfg->data.val_fraction);
            out->val = malloc((size_t)(n_val > 0 ? n_val : 1) * sizeof *out->val);
            if (!out->val) rc = tr_error_set(err, TR_E_RUNTIME, "out of memory");
            else {
                out->n_train -= n_val;
                memcpy(out->val, out->train + out->n_train, (size_t)n_val * sizeof *out->val);
                out->n_val = n_val;
            }
        }
        uint32_t top = 0;
        for (int64_t i = 0; !rc && i < out->n_train; i++) top = out->train[i] > top ? out->train[i] : top;
        for (int64_t i = 0; !rc && i < out->n_val; i++) top = out->val[i] > top ? out->val[i] : top;
        vocab->kind = TR_VOCAB_IDS;
        vocab->size = (int64_t)top + 1;
    }
    const int64_t need = cfg->data.block_size + 1;
    if (!rc && out->n_train < need + 1) /* a window plus one start to choose from */
        rc = tr_error_set(err, TR_E_CONFIG, "%s: the training split has %lld tokens, too short for one window of "
                          "data.block_size %lld + 1 tokens", out->train_file, (long long)out->n_train,
                          (long long)cfg->data.block_size);
    if (!rc && out->n_val > 0 && out->n_val < need)
        rc = tr_error_set(err, TR_E_CONFIG, "%s: the validation split has %lld tokens, too short for one window of "
                          "data.block_size %lld + 1 tokens (raise data.val_fraction, or set it to 0 for none)",
                          cfg->data.val_tokens[0] ? cfg->data.val_tokens : out->train_file, (long long)out->n_val,
                          (long long)cfg->data.block_size);
    if (rc && err && strncmp(err->msg, "data.", 5) != 0) { /* led by the config key that named the file */
        const char *key = cfg->data.format == TR_DATA_TEXT ? "data.train_text" : "data.train_tokens";
        if (cfg->data.format == TR_DATA_TOKENS && cfg->data.val_tokens[0]) {
            char vpath[TR_PATH_MAX];
            tr_config_resolve_data_path(cfg, cfg->data.val_tokens, vpath, sizeof vpath);
            const char *const names[] = {vpath, cfg->data.val_tokens}; /* the too-short message names it as given */
            for (int k = 0; k < 2; k++) {
                const size_t len = strlen(names[k]);
                if (strncmp(err->msg, names[k], len) == 0 && err->msg[len] == ':') key = "data.val_tokens";
            }
        }
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        tr_error_set(err, rc, "%s: %s", key, msg);
    }
    if (rc) {
        tr_token_splits_free(out);
        tr_vocab_free(vocab);
    }
    return rc;
}

void tr_token_splits_free(tr_token_splits *s)
{
    free(s->train);
    free(s->val);
    memset(s, 0, sizeof *s);
}
