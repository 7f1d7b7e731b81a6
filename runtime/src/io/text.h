/*
 * text.h -- token data for language modelling: data.format text (UTF-8 text files with a byte-level or character
 * vocabulary) and data.format tokens (flat little-endian uint16 / uint32 token ids, nanoGPT's train.bin / val.bin),
 * the vocabulary (vocab.json), and the windows a batch is cut from.
 *
 * Every byte read is untrusted: the readers take a buffer (for fuzzing, tests/fuzz/fuzz_text.c) and every error
 * names the file and the byte offset, e.g. "a.txt: byte 1041: invalid UTF-8 (0xc3 starts a 2-byte sequence but
 * byte 1042 is 0x41)" or "train.bin: byte 7: truncated: 7 bytes are not a whole number of 2-byte uint16 tokens".
 *
 * Windows (README "Language modelling"): a training batch is batch_size windows of block_size + 1 consecutive
 * tokens of the training split; window g (g = step x batch_size x accumulate_steps + row, counted over the whole
 * run) starts at splitmix64(seed, g) mod (n_train - block_size), so the windows are a pure function of (seed,
 * step) and a resume cuts exactly the windows the uninterrupted run would have. Inputs are tokens [s, s + T),
 * targets [s + 1, s + T + 1). Validation windows are fixed: the held-out tail cut into consecutive
 * non-overlapping windows, window i starting at i x block_size.
 */
#ifndef TR_TEXT_H
#define TR_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef enum tr_vocab_kind {
    TR_VOCAB_BYTES = 0, /**< text: token = byte value, 256 tokens                                          */
    TR_VOCAB_CHARS = 1, /**< text: token = index of the Unicode code point in the sorted character list     */
    TR_VOCAB_IDS = 2    /**< tokens: token ids as stored; size = the largest id + 1 (no decoding)           */
} tr_vocab_kind;

/** A vocabulary: how token ids map to text. */
typedef struct tr_vocab {
    tr_vocab_kind kind;
    int64_t size;    /**< tokens: 256 (bytes), the number of characters (chars), max id + 1 (ids)              */
    uint32_t *chars; /**< chars: the code points, ascending (token i = chars[i]), malloc'd; NULL otherwise   */
} tr_vocab;

/** Largest text or token file read (bytes), a bound on what a hostile file makes us allocate. */
#define TR_TEXT_MAX_FILE_BYTES ((int64_t)1 << 32)
/** Most characters in a character vocabulary. */
#define TR_VOCAB_MAX_CHARS 65536

/**
 * Decode UTF-8 text buf[0..len) into code points out[0..*n) (out must hold len entries). Strict: overlong forms,
 * surrogates (U+D800..U+DFFF), code points above U+10FFFF and truncated or stray continuation bytes are refused.
 * Errors: TR_E_CONFIG "FILE: byte OFFSET: invalid UTF-8 (...)" with `file` as given.
 */
int tr_utf8_decode(const char *file, const unsigned char *buf, size_t len, uint32_t *out, int64_t *n,
                   tr_error *err);

/** UTF-8 encoding of code point cp into out[4]; returns its length (1..4), 0 for a code point that has none. */
int tr_utf8_encode(uint32_t cp, char out[4]);

/**
 * Parse flat little-endian token ids (width 2: uint16, 4: uint32) from buf[0..len) into out[0..len / width).
 * Errors: TR_E_CONFIG naming `file` and the byte offset: a length that is not a multiple of width; with
 * vocab_limit > 0, an id >= vocab_limit (the offset of that id).
 */
int tr_tokens_parse(const char *file, const unsigned char *buf, size_t len, int width, int64_t vocab_limit,
                    uint32_t *out, tr_error *err);

/** The character vocabulary of code points cps[0..n): each distinct one, ascending. TR_E_CONFIG when more than
 *  TR_VOCAB_MAX_CHARS, TR_E_RUNTIME when out of memory. */
int tr_vocab_build_chars(const uint32_t *cps, int64_t n, tr_vocab *out, tr_error *err);

/** Token id of code point cp in a chars vocabulary, or -1 when it has none (binary search). */
int64_t tr_vocab_char_id(const tr_vocab *v, uint32_t cp);

/** vocab.json's text (cJSON, malloc'd): {"kind":"bytes"|"chars"|"ids","size":N[,"chars":"<the characters as
 *  UTF-8>"]}. NULL when out of memory. */
char *tr_vocab_to_json(const tr_vocab *v);

/**
 * Parse vocab.json's text (NUL-terminated; untrusted): kind, size in [1, 2^32], bytes: size 256; chars: the
 * characters string strict UTF-8, strictly ascending code points, as many as size. *out is overwritten, not
 * freed (tr_vocab_free a previous vocabulary first); on an error it is left zeroed, owning nothing. Errors:
 * TR_E_CONFIG "FILE: field NAME: ..." (TR_E_RUNTIME when out of memory).
 */
int tr_vocab_from_json(const char *text, const char *file, tr_vocab *out, tr_error *err);

/**
 * Read the vocab.json at `file` (untrusted, at most 4 MiB, through io.h's one file reader) into *out, parsed as
 * tr_vocab_from_json; *found = 0 with *out zeroed when there is no such file. Errors: TR_E_RUNTIME (unreadable,
 * too large; naming the file), TR_E_CONFIG (tr_vocab_from_json's, naming the file and field).
 */
int tr_vocab_read_file(const char *file, tr_vocab *out, int *found, tr_error *err);

/** *out = a copy of v (its characters malloc'd). TR_OK, or TR_E_RUNTIME when out of memory (*out zeroed). */
int tr_vocab_copy(const tr_vocab *v, tr_vocab *out, tr_error *err);

/** 1 if a and b map the same ids to the same text (kind, size and characters equal). */
int tr_vocab_equal(const tr_vocab *a, const tr_vocab *b);

/** Free a vocabulary's characters and zero it (safe on a zeroed struct). */
void tr_vocab_free(tr_vocab *v);

/**
 * Encode UTF-8 text[0..len) (a prompt) as token ids into ids[0..*n) (ids holds len entries). Errors
 * (TR_E_CONFIG): invalid UTF-8, a character the vocabulary does not have (named, with its byte offset), an ids
 * vocabulary (no text encoding: "--prompt" is then a list of ids, not handled here).
 */
int tr_vocab_encode(const tr_vocab *v, const char *text, size_t len, int64_t *ids, int64_t *n, tr_error *err);

/**
 * Decode ids[0..n) as text into out[0..cap) (NUL-terminated, truncated to fit): bytes as they are, chars as
 * UTF-8, ids as decimal numbers separated by blanks. An id outside the vocabulary is written as "\x{ID}".
 * Returns the length it would need (without the NUL), as snprintf.
 */
size_t tr_vocab_decode(const tr_vocab *v, const int64_t *ids, int64_t n, char *out, size_t cap);

/** splitmix64 over (seed, g): the start of training window g in [0, n_tokens - block). */
int64_t tr_window_start(uint64_t seed, uint64_t g, int64_t n_tokens, int64_t block);

/**
 * Cut window rows: for each row r, inputs x[r, 0..block) = tokens[s .. s + block) and targets
 * y[r, 0..block) = tokens[s + 1 .. s + block + 1), s = starts[r]. Needs s + block + 1 <= n_tokens.
 */
void tr_window_cut(const uint32_t *tokens, const int64_t *starts, int64_t rows, int64_t block, int64_t *x,
                   int64_t *y);

/**
 * Read the token data a config names into train/val token arrays and the vocabulary (text: data.vocab bytes or
 * chars, chars built from the training split; tokens: ids, size = max id + 1 over both splits). Files are read
 * whole (at most TR_TEXT_MAX_FILE_BYTES each). Validation: data.val_tokens (tokens format), else the last
 * data.val_fraction of the tokens. Errors lead with the config key that named the file (data.train_text,
 * data.train_tokens, data.val_tokens: "data.train_text: ./a.txt: byte 7: invalid UTF-8 ...") and name the file and
 * byte offset (TR_E_CONFIG: the files are the user's
 * input; TR_E_RUNTIME for a read error or memory), and for a split too short for one window of block_size + 1
 * tokens the file and the counts (TR_E_CONFIG).
 */
struct tr_config;
typedef struct tr_token_splits {
    uint32_t *train, *val;  /**< malloc'd                                                               */
    int64_t n_train, n_val; /**< tokens in each                                                          */
    char train_file[1024];  /**< the (last) file the training tokens came from (TR_PATH_MAX): messages     */
} tr_token_splits;
int tr_text_load(const struct tr_config *cfg, tr_token_splits *out, tr_vocab *vocab, tr_error *err);
void tr_token_splits_free(tr_token_splits *s);

#endif
