/*
 * hash.h -- the file digests of checkpoint manifests: SHA-256 (OpenSSL EVP; manifests of format 1) and XXH3-128
 * (libxxhash; format 2, the default: a checkpoint's files are hashed at memory speed, several times faster than
 * SHA-256 (bench/checkpoint_async.md), and the manifest guards against torn and truncated writes, not against an
 * attacker, who could rewrite the manifest along with the files either way).
 *
 * Digests are lowercase hex: SHA-256's 32 bytes (64 digits), XXH3-128's canonical big-endian form
 * (XXH128_canonicalFromHash: 16 bytes, 32 digits; what `xxhsum -H2` prints).
 */
#ifndef TR_HASH_H
#define TR_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef enum tr_hash_algo {
    TR_HASH_SHA256 = 0, /**< manifest key "sha256", 64 hex digits   */
    TR_HASH_XXH3_128,   /**< manifest key "xxh3_128", 32 hex digits */
} tr_hash_algo;

#define TR_HASH_HEX_MAX 65 /**< the longest digest in hex, with its NUL */

/** A digest being computed: tr_hash_init, tr_hash_update..., tr_hash_final (which frees it). */
typedef struct tr_hash {
    tr_hash_algo algo;
    void *state; /* EVP_MD_CTX * or XXH3_state_t * */
} tr_hash;

/** The manifest key of `a` ("sha256", "xxh3_128") and its digest's hex length (64, 32). */
const char *tr_hash_name(tr_hash_algo a);
size_t tr_hash_hex_len(tr_hash_algo a);

/** 0, or -1 (out of memory, or the library refused): then `h` holds nothing to free. */
int tr_hash_init(tr_hash *h, tr_hash_algo a);
/** 0 or -1. */
int tr_hash_update(tr_hash *h, const void *data, size_t n);
/** The digest in lowercase hex into hex[TR_HASH_HEX_MAX]; frees the state. 0 or -1. */
int tr_hash_final(tr_hash *h, char hex[TR_HASH_HEX_MAX]);
/** Free a state without a digest (after a failure; safe on a finished or never-initialised zeroed one). */
void tr_hash_abort(tr_hash *h);

/**
 * The digest of the file at `path` into hex[TR_HASH_HEX_MAX], its size in bytes into *size (may be NULL).
 * TR_OK, or TR_E_RUNTIME naming the file (cannot open, read error at a byte offset, out of memory).
 */
int tr_hash_file(const char *path, tr_hash_algo a, char hex[TR_HASH_HEX_MAX], uint64_t *size, tr_error *err);

#endif
