/*
 * hash.c -- SHA-256 and XXH3-128 file digests (hash.h).
 */
#include "hash.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define HASH_CHUNK ((size_t)1 << 20)

const char *tr_hash_name(tr_hash_algo a) { return a == TR_HASH_XXH3_128 ? "xxh3_128" : "sha256"; }
size_t tr_hash_hex_len(tr_hash_algo a) { return a == TR_HASH_XXH3_128 ? 32 : 64; }

int tr_hash_init(tr_hash *h, tr_hash_algo a)
{
    h->algo = a;
    h->state = NULL;
    if (a == TR_HASH_XXH3_128) {
        XXH3_state_t *x = XXH3_createState();
        if (!x || XXH3_128bits_reset(x) != XXH_OK) {
            XXH3_freeState(x);
            return -1;
        }
        h->state = x;
        return 0;
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return -1;
    }
    h->state = md;
    return 0;
}

int tr_hash_update(tr_hash *h, const void *data, size_t n)
{
    if (!h->state) return -1;
    if (h->algo == TR_HASH_XXH3_128) return XXH3_128bits_update(h->state, data, n) == XXH_OK ? 0 : -1;
    return EVP_DigestUpdate(h->state, data, n) == 1 ? 0 : -1;
}

static void to_hex(const unsigned char *b, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[b[i] >> 4];
        hex[2 * i + 1] = digits[b[i] & 15];
    }
    hex[2 * n] = '\0';
}

int tr_hash_final(tr_hash *h, char hex[TR_HASH_HEX_MAX])
{
    if (!h->state) return -1;
    int rc = 0;
    if (h->algo == TR_HASH_XXH3_128) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h->state));
        to_hex(c.digest, sizeof c.digest, hex);
    } else {
        unsigned char d[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_DigestFinal_ex(h->state, d, &n) != 1 || n != 32) rc = -1;
        else to_hex(d, n, hex);
    }
    tr_hash_abort(h);
    return rc;
}

void tr_hash_abort(tr_hash *h)
{
    if (!h->state) return;
    if (h->algo == TR_HASH_XXH3_128) XXH3_freeState(h->state);
    else EVP_MD_CTX_free(h->state);
    h->state = NULL;
}

int tr_hash_file(const char *path, tr_hash_algo a, char hex[TR_HASH_HEX_MAX], uint64_t *size, tr_error *err)
{
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return tr_error_set(err, TR_E_RUNTIME, "cannot open %s: %s", path, strerror(errno));
    unsigned char *buf = malloc(HASH_CHUNK);
    tr_hash h = {0};
    int rc = TR_E_RUNTIME;
    uint64_t total = 0;
    if (!buf || tr_hash_init(&h, a) != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot hash %s: out of memory", path);
        goto done;
    }
    for (;;) {
        const ssize_t r = read(fd, buf, HASH_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            tr_error_set(err, TR_E_RUNTIME, "cannot read %s at byte offset %" PRIu64 ": %s", path, total,
                         strerror(errno));
            goto done;
        }
        if (r == 0) break;
        if (tr_hash_update(&h, buf, (size_t)r) != 0) {
            tr_error_set(err, TR_E_RUNTIME, "cannot hash %s: %s update failed", path, tr_hash_name(a));
            goto done;
        }
        total += (uint64_t)r;
    }
    if (tr_hash_final(&h, hex) != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot hash %s: %s finalisation failed", path, tr_hash_name(a));
        goto done;
    }
    if (size) *size = total;
    rc = TR_OK;
done:
    tr_hash_abort(&h);
    free(buf);
    close(fd);
    return rc;
}
