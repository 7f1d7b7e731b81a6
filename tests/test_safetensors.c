/*
 * test_safetensors.c -- Criterion tests for safetensors.h: round trips, the exact bytes of a tiny file, SHA-256
 * against sha256sum, the writer's refusals and cleanup, and the reader's errors (file name and byte offset).
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "support.h"

/* ---- temp dir fixture ---------------------------------------------------------------------------------------- */


TestSuite(safetensors, .init = support_tmp_init, .fini = support_tmp_fini);

/* ---- helpers ------------------------------------------------------------------------------------------------- */

/** Fill callback over an array of byte pointers (ctx = const void *const *). */
static int fill_from(void *ctx, size_t index, void *dst, size_t nbytes, tr_error *err)
{
    (void)err;
    const void *const *src = ctx;
    if (nbytes)
        memcpy(dst, src[index], nbytes);
    return 0;
}

/** Fill callback that fails at entry 1, with its own message. */
static int fill_fail_at_1(void *ctx, size_t index, void *dst, size_t nbytes, tr_error *err)
{
    (void)ctx;
    if (index == 1)
        return tr_error_set(err, TR_E_RUNTIME, "simulated device read failure");
    memset(dst, 0xab, nbytes);
    return 0;
}

/** Fill callback that fails at entry 0 without a message. */
static int fill_fail_silent(void *ctx, size_t index, void *dst, size_t nbytes, tr_error *err)
{
    (void)ctx, (void)index, (void)dst, (void)nbytes, (void)err;
    return 1;
}

static tr_st_tensor mk(const char *name, tr_st_dtype dt, int ndim, const int64_t *shape)
{
    tr_st_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.dtype = dt;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    return t;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const void *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "create %s", path);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/** Write a hand-made file: 8-byte LE length of `json` (unpadded), json, then dlen data bytes (0x11, 0x22...). */
static void write_raw(const char *path, const char *json, size_t dlen)
{
    size_t jl = strlen(json);
    uint8_t *b = malloc(8 + jl + dlen + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < dlen; i++)
        b[8 + jl + i] = (uint8_t)(0x11 * (i + 1));
    spit(path, b, 8 + jl + dlen);
    free(b);
}

/** sha256sum of a file, via popen. */
static void sha256sum_of(const char *path, char hex[65])
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512] = "";
    cr_assert_not_null(fgets(line, sizeof line, p));
    cr_assert_eq(pclose(p), 0, "sha256sum failed");
    memcpy(hex, line, 64);
    hex[64] = '\0';
}

/** Read `path` expecting failure; the message must contain `path` and each non-NULL needle. */
static void expect_read_error(const char *path, const char *needle1, const char *needle2)
{
    tr_st_file f;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_read(path, &f, &err), TR_E_RUNTIME, "read of %s should fail", path);
    cr_assert_eq(err.code, TR_E_RUNTIME);
    cr_assert_null(f.buf, "the file must be released on failure");
    cr_assert(strstr(err.msg, path), "message names the file: %s", err.msg);
    if (needle1)
        cr_assert(strstr(err.msg, needle1), "message should contain '%s': %s", needle1, err.msg);
    if (needle2)
        cr_assert(strstr(err.msg, needle2), "message should contain '%s': %s", needle2, err.msg);
    tr_st_close(&f);
}

static const char *fmt_off(uint64_t off)
{
    static char buf[4][64];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 64, "byte offset %" PRIu64, off);
    return p;
}

/* ---- dtypes -------------------------------------------------------------------------------------------------- */

Test(safetensors, dtype_table)
{
    static const struct {
        tr_st_dtype dt;
        const char *name;
        size_t size;
    } want[] = {{TR_ST_F32, "F32", 4}, {TR_ST_F64, "F64", 8}, {TR_ST_I64, "I64", 8}, {TR_ST_I32, "I32", 4},
                {TR_ST_U8, "U8", 1},   {TR_ST_BOOL, "BOOL", 1}, {TR_ST_F16, "F16", 2}, {TR_ST_BF16, "BF16", 2}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_assert_str_eq(tr_st_dtype_name(want[i].dt), want[i].name);
        cr_assert_eq(tr_st_dtype_size(want[i].dt), want[i].size);
    }
    cr_assert_str_eq(tr_st_dtype_name(TR_ST_DTYPE_COUNT_), "?");
    cr_assert_eq(tr_st_dtype_size(TR_ST_DTYPE_COUNT_), 0);
    cr_assert_eq(tr_st_dtype_size((tr_st_dtype)-1), 0);
}

/* ---- round trip ---------------------------------------------------------------------------------------------- */

Test(safetensors, round_trip_several_tensors_and_metadata)
{
    const float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 1e-3f};
    const int64_t step = INT64_C(-1234567890123);
    const uint8_t u[5] = {0, 1, 127, 128, 255};
    const double d[2] = {3.141592653589793, -2.718281828459045};
    const int64_t s_w[] = {2, 3}, s_u[] = {5}, s_d[] = {1, 1, 2}, s_e[] = {0};
    tr_st_tensor ts[5] = {mk("layer.weight", TR_ST_F32, 2, s_w), mk("step", TR_ST_I64, 0, NULL),
                          mk("bytes", TR_ST_U8, 1, s_u), mk("dbl", TR_ST_F64, 3, s_d),
                          mk("empty", TR_ST_F32, 1, s_e)};
    const void *src[5] = {w, &step, u, d, NULL};
    tr_st_meta meta[2] = {{"format", "pt"}, {"note", "quote \" backslash \\ newline \n unicode \xc3\xa9"}};
    const char *path = support_path("rt.safetensors");
    char hex[65];
    uint64_t size = 0;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, ts, 5, meta, 2, fill_from, src, hex, &size, &err), TR_OK, "%s", err.msg);

    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, size);
    mode_t mask = umask(0);
    umask(mask);
    cr_assert_eq(st.st_mode & 0777, 0644 & ~mask, "mode %o", (unsigned)(st.st_mode & 0777));

    tr_st_file f;
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(f.size, size);
    cr_assert_eq(f.n, 5);
    cr_assert_eq(f.n_meta, 2);
    cr_assert_str_eq(tr_st_meta_get(&f, "format"), "pt");
    cr_assert_str_eq(tr_st_meta_get(&f, "note"), meta[1].value);
    cr_assert_null(tr_st_meta_get(&f, "missing"));
    /* data section 8-byte aligned, 53 bytes at the end of the file */
    cr_assert_eq((size_t)(f.data - f.buf) % 8, 0);
    cr_assert_eq(f.size - (size_t)(f.data - f.buf), 24 + 8 + 5 + 16 + 0);

    static const char *names[5] = {"layer.weight", "step", "bytes", "dbl", "empty"};
    static const uint64_t offs[5] = {0, 24, 32, 37, 53}, nb[5] = {24, 8, 5, 16, 0};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_str_eq(f.tensors[i].name, names[i], "header order");
        cr_assert_eq(f.tensors[i].dtype, ts[i].dtype);
        cr_assert_eq(f.tensors[i].ndim, ts[i].ndim);
        for (int k = 0; k < ts[i].ndim; k++)
            cr_assert_eq(f.tensors[i].shape[k], ts[i].shape[k]);
        cr_assert_eq(f.tensors[i].offset, offs[i], "%s offset %" PRIu64, names[i], f.tensors[i].offset);
        cr_assert_eq(f.tensors[i].nbytes, nb[i]);
        cr_assert_eq(tr_st_find(&f, names[i]), &f.tensors[i]);
    }
    cr_assert_null(tr_st_find(&f, "nope"));
    cr_assert_null(tr_st_find(&f, "__metadata__"));

    float w2[6];
    memcpy(w2, tr_st_data(&f, tr_st_find(&f, "layer.weight")), sizeof w2);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(w2[i], w[i]);
    int64_t step2;
    memcpy(&step2, tr_st_data(&f, tr_st_find(&f, "step")), 8);
    cr_assert_eq(step2, step);
    cr_assert_arr_eq(tr_st_data(&f, tr_st_find(&f, "bytes")), u, 5);
    double d2[2];
    memcpy(d2, tr_st_data(&f, tr_st_find(&f, "dbl")), sizeof d2);
    cr_assert_eq(d2[0], d[0]);
    cr_assert_eq(d2[1], d[1]);
    tr_st_close(&f);
    tr_st_close(&f); /* safe twice: the struct is zeroed */
}

Test(safetensors, round_trip_no_tensors_no_metadata)
{
    const char *path = support_path("empty.safetensors");
    char hex[65];
    uint64_t size = 0;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, NULL, 0, NULL, 0, NULL, NULL, hex, &size, &err), TR_OK, "%s", err.msg);
    size_t len;
    uint8_t *b = slurp(path, &len);
    /* "{}" padded to 8 */
    static const uint8_t want[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    cr_assert_eq(len, 16);
    cr_assert_eq(size, 16);
    cr_assert_arr_eq(b, want, 16);
    free(b);
    tr_st_file f;
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(f.n, 0);
    cr_assert_eq(f.n_meta, 0);
    tr_st_close(&f);
}

Test(safetensors, round_trip_other_dtypes)
{
    const int32_t i32[3] = {-7, 0, 2147483647};
    const uint8_t bools[4] = {1, 0, 0, 1};
    const uint16_t h[2] = {0x3c00, 0xc000}, bf[2] = {0x3f80, 0x4049};
    const int64_t s3[] = {3}, s4[] = {2, 2}, s2[] = {2};
    tr_st_tensor ts[4] = {mk("i", TR_ST_I32, 1, s3), mk("b", TR_ST_BOOL, 2, s4), mk("h", TR_ST_F16, 1, s2),
                          mk("bf", TR_ST_BF16, 1, s2)};
    const void *src[4] = {i32, bools, h, bf};
    const char *path = support_path("dt.safetensors");
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, ts, 4, NULL, 0, fill_from, src, NULL, NULL, &err), TR_OK, "%s", err.msg);
    tr_st_file f;
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(f.n, 4);
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(f.tensors[i].dtype, ts[i].dtype);
        cr_assert_arr_eq(tr_st_data(&f, &f.tensors[i]), src[i], (size_t)f.tensors[i].nbytes);
    }
    cr_assert_eq(f.tensors[0].nbytes, 12);
    cr_assert_eq(f.tensors[1].nbytes, 4);
    cr_assert_eq(f.tensors[3].offset, 20);
    tr_st_close(&f);
}

/* A dim of 10^15 (with a zero dim, so no data) must be written as integer digits: cJSON alone would print
 * "1e+15", which the reference reader rejects as a non-integer. */
Test(safetensors, large_dims_written_as_integers)
{
    const int64_t shape[] = {INT64_C(1000000000000000), 0, INT64_C(9007199254740992)};
    tr_st_tensor t = mk("big", TR_ST_U8, 3, shape);
    const void *src[1] = {NULL};
    const char *path = support_path("big.safetensors");
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, &t, 1, NULL, 0, fill_from, src, NULL, NULL, &err), TR_OK, "%s", err.msg);
    size_t len;
    uint8_t *b = slurp(path, &len);
    b[len] = 0;
    cr_assert(strstr((char *)b + 8, "\"shape\":[1000000000000000,0,9007199254740992]"), "%s", (char *)b + 8);
    free(b);
    tr_st_file f;
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(f.tensors[0].shape[0], shape[0]);
    cr_assert_eq(f.tensors[0].shape[2], shape[2]);
    cr_assert_eq(f.tensors[0].nbytes, 0);
    tr_st_close(&f);
}

/* ---- exact bytes --------------------------------------------------------------------------------------------- */

/* One F32 tensor "a" = [1, 2]: length 56 (54 bytes of JSON + 2 spaces), the JSON, then 8 little-endian bytes.
 * Checked against the spec by hand and with python3's json/struct modules (the safetensors package is not
 * installed); the pinned SHA-256 is sha256sum of the same 72 bytes built with printf. */
Test(safetensors, exact_bytes_of_a_tiny_file)
{
    const float a[2] = {1.0f, 2.0f};
    const int64_t shape[] = {2};
    tr_st_tensor t = mk("a", TR_ST_F32, 1, shape);
    const void *src[1] = {a};
    const char *path = support_path("tiny.safetensors");
    char hex[65];
    uint64_t size = 0;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, &t, 1, NULL, 0, fill_from, src, hex, &size, &err), TR_OK, "%s", err.msg);

    static const char json[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
    uint8_t want[72];
    static const uint8_t len_le[8] = {56, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t data_le[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};
    cr_assert_eq(sizeof json - 1, 56);
    memcpy(want, len_le, 8);
    memcpy(want + 8, json, 56);
    memcpy(want + 64, data_le, 8);

    size_t len;
    uint8_t *b = slurp(path, &len);
    cr_assert_eq(len, 72);
    cr_assert_eq(size, 72);
    cr_assert_arr_eq(b, want, 72);
    free(b);
    cr_assert_str_eq(hex, "dfd92c4ba718bb628e136b1bd5ee54816041331903a0071b0155fa119061ccec");
}

Test(safetensors, exact_bytes_with_metadata)
{
    const float a[2] = {1.0f, 2.0f};
    const int64_t shape[] = {2};
    tr_st_tensor t = mk("a", TR_ST_F32, 1, shape);
    const void *src[1] = {a};
    tr_st_meta meta[1] = {{"format", "pt"}};
    const char *path = support_path("tinymeta.safetensors");
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, &t, 1, meta, 1, fill_from, src, NULL, NULL, &err), TR_OK, "%s", err.msg);
    static const char json[] =
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ";
    cr_assert_eq(sizeof json - 1, 88);
    size_t len;
    uint8_t *b = slurp(path, &len);
    cr_assert_eq(len, 8 + 88 + 8);
    cr_assert_eq(b[0], 88);
    for (int i = 1; i < 8; i++)
        cr_assert_eq(b[i], 0);
    cr_assert_arr_eq(b + 8, json, 88);
    free(b);
}

/* ---- SHA-256 ------------------------------------------------------------------------------------------------- */

Test(safetensors, sha256_matches_file_and_sha256sum)
{
    /* 3 MiB + 5 bytes: several 1 MiB chunks in tr_sha256_file plus a partial one */
    const size_t nbig = ((size_t)3 << 20) + 5;
    uint8_t *big = malloc(nbig);
    for (size_t i = 0; i < nbig; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 13);
    const int64_t s_big[] = {(int64_t)nbig}, s_f[] = {2};
    const float fl[2] = {0.25f, -8.0f};
    tr_st_tensor ts[2] = {mk("f", TR_ST_F32, 1, s_f), mk("big", TR_ST_U8, 1, s_big)};
    const void *src[2] = {fl, big};
    tr_st_meta meta[1] = {{"k", "v"}};
    const char *path = support_path("hash.safetensors");
    char hex_w[65], hex_f[65], hex_s[65];
    uint64_t size_w = 0, size_f = 0;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, ts, 2, meta, 1, fill_from, src, hex_w, &size_w, &err), TR_OK, "%s", err.msg);
    free(big);
    cr_assert_eq(tr_sha256_file(path, hex_f, &size_f, &err), TR_OK, "%s", err.msg);
    sha256sum_of(path, hex_s);
    cr_assert_str_eq(hex_w, hex_f);
    cr_assert_str_eq(hex_w, hex_s);
    cr_assert_eq(size_w, size_f);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, size_f);
    for (int i = 0; i < 64; i++)
        cr_assert(hex_w[i] >= '0' && (hex_w[i] <= '9' || (hex_w[i] >= 'a' && hex_w[i] <= 'f')), "lowercase hex");
}

Test(safetensors, sha256_of_empty_file)
{
    const char *path = support_path("zero");
    spit(path, "", 0);
    char hex[65];
    uint64_t size = 99;
    tr_error err = {0, ""};
    cr_assert_eq(tr_sha256_file(path, hex, &size, &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    cr_assert_eq(size, 0);
    cr_assert_eq(tr_sha256_file(path, hex, NULL, &err), TR_OK, "size may be NULL");
}

Test(safetensors, sha256_of_missing_file)
{
    const char *path = support_path("does-not-exist");
    char hex[65];
    tr_error err = {0, ""};
    cr_assert_eq(tr_sha256_file(path, hex, NULL, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "No such file"), "%s", err.msg);
}

/* ---- XXH3-128 (checkpoint manifests of format 2) ---------------------------------------------------------------- */

/* The pinned digests are the xxHash project's XXH3_128bits values (seed 0) of "" and "abc", in the canonical
 * big-endian form `xxhsum -H2` prints: high 64 bits first. */
Test(safetensors, xxh3_128_of_known_inputs_in_canonical_hex)
{
    const char *path = support_path("abc");
    char hex[TR_HASH_HEX_MAX];
    uint64_t size = 99;
    tr_error err = {0, ""};
    spit(path, "", 0);
    cr_assert_eq(tr_hash_file(path, TR_HASH_XXH3_128, hex, &size, &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(hex, "99aa06d3014798d86001c324468d497f");
    cr_assert_eq(size, 0);
    spit(path, "abc", 3);
    cr_assert_eq(tr_hash_file(path, TR_HASH_XXH3_128, hex, &size, &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(hex, "06b05ab6733a618578af5f94892f3950");
    cr_assert_eq(size, 3);
    cr_assert_str_eq(tr_hash_name(TR_HASH_XXH3_128), "xxh3_128");
    cr_assert_eq(tr_hash_hex_len(TR_HASH_XXH3_128), 32);
}

/* The streaming digest the writer computes equals the file's, across 1 MiB read chunks and entry boundaries, and
 * differs from the digest of the same bytes with one flipped. */
Test(safetensors, xxh3_128_while_writing_equals_the_files)
{
    const size_t nbig = ((size_t)3 << 20) + 5;
    uint8_t *big = malloc(nbig);
    for (size_t i = 0; i < nbig; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);
    const int64_t s_big[] = {(int64_t)nbig}, s_f[] = {2};
    const float fl[2] = {0.25f, -8.0f};
    tr_st_tensor ts[2] = {mk("f", TR_ST_F32, 1, s_f), mk("big", TR_ST_U8, 1, s_big)};
    const void *src[2] = {fl, big};
    const char *path = support_path("xxh.safetensors");
    char hex_w[TR_HASH_HEX_MAX], hex_f[TR_HASH_HEX_MAX], hex_flip[TR_HASH_HEX_MAX];
    uint64_t size_w = 0, size_f = 0;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write_unsynced(path, ts, 2, NULL, 0, fill_from, src, TR_HASH_XXH3_128, hex_w, &size_w, &err),
                 TR_OK, "%s", err.msg);
    cr_assert_eq(tr_hash_file(path, TR_HASH_XXH3_128, hex_f, &size_f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(strlen(hex_w), 32);
    cr_assert_str_eq(hex_w, hex_f);
    cr_assert_eq(size_w, size_f);
    big[nbig - 1] ^= 1;
    cr_assert_eq(tr_st_write_unsynced(path, ts, 2, NULL, 0, fill_from, src, TR_HASH_XXH3_128, hex_flip, NULL, &err),
                 TR_OK, "%s", err.msg);
    cr_assert_str_neq(hex_flip, hex_w, "one flipped bit in the last byte changes the digest");
    free(big);
}

/* The reader has no checksums (the manifest does): a flipped data byte reads fine but changes the SHA-256. */
Test(safetensors, flipped_data_byte_is_not_detected_by_reader_but_changes_sha256)
{
    const float a[4] = {1, 2, 3, 4};
    const int64_t shape[] = {4};
    tr_st_tensor t = mk("a", TR_ST_F32, 1, shape);
    const void *src[1] = {a};
    const char *path = support_path("flip.safetensors");
    char hex_before[65], hex_after[65];
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, &t, 1, NULL, 0, fill_from, src, hex_before, NULL, &err), TR_OK, "%s", err.msg);
    size_t len;
    uint8_t *b = slurp(path, &len);
    b[len - 3] ^= 0x01;
    spit(path, b, len);
    free(b);
    tr_st_file f;
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    float got[4];
    memcpy(got, tr_st_data(&f, &f.tensors[0]), sizeof got);
    cr_assert_eq(got[0], 1.0f);
    cr_assert_neq(got[3], 4.0f, "the flipped byte is in the last float");
    tr_st_close(&f);
    cr_assert_eq(tr_sha256_file(path, hex_after, NULL, &err), TR_OK, "%s", err.msg);
    cr_assert_str_neq(hex_before, hex_after);
}

/* ---- writer failures ----------------------------------------------------------------------------------------- */

Test(safetensors, fill_failure_removes_partial_file)
{
    const int64_t shape[] = {1024};
    tr_st_tensor ts[2] = {mk("first", TR_ST_F32, 1, shape), mk("second", TR_ST_F32, 1, shape)};
    const char *path = support_path("partial.safetensors");
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, ts, 2, NULL, 0, fill_fail_at_1, NULL, NULL, NULL, &err), TR_E_RUNTIME);
    cr_assert_not(file_exists(path), "partial file must be removed");
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "\"second\"") &&
                  strstr(err.msg, "simulated device read failure"), "%s", err.msg);

    /* an existing file at the path is replaced, then removed on failure, too */
    spit(path, "old", 3);
    err = (tr_error){0, ""};
    cr_assert_eq(tr_st_write(path, ts, 2, NULL, 0, fill_fail_silent, NULL, NULL, NULL, &err), TR_E_RUNTIME);
    cr_assert_not(file_exists(path));
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "fill callback failed") && strstr(err.msg, "\"first\""),
              "%s", err.msg);
}

Test(safetensors, writer_refuses_bad_entries_without_creating_a_file)
{
    const int64_t ok[] = {2}, neg[] = {2, -1}, huge[] = {INT64_C(1) << 52, 3};
    const char *path = support_path("refused.safetensors");
    const void *src[2] = {NULL, NULL};
    struct {
        tr_st_tensor t[2];
        size_t n;
        const char *needle;
    } cases[] = {
        {{mk("x", TR_ST_F32, 1, ok), mk("x", TR_ST_U8, 1, ok)}, 2, "two entries are called \"x\""},
        {{mk("__metadata__", TR_ST_F32, 1, ok)}, 1, "reserved"},
        {{mk("", TR_ST_F32, 1, ok)}, 1, "empty name"},
        {{mk("n", TR_ST_F32, 2, neg)}, 1, "\"n\": shape [2,-1]"},
        {{mk("h", TR_ST_U8, 2, huge)}, 1, "2^53"},
        {{mk("d", (tr_st_dtype)42, 1, ok)}, 1, "unknown dtype value 42"},
        {{mk("k", TR_ST_F32, 1, ok)}, 1, "ndim 9"},
    };
    cases[6].t[0].ndim = 9;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tr_error err = {0, ""};
        cr_assert_eq(tr_st_write(path, cases[i].t, cases[i].n, NULL, 0, fill_from, src, NULL, NULL, &err),
                     TR_E_RUNTIME, "case %zu", i);
        cr_assert(strstr(err.msg, path) && strstr(err.msg, cases[i].needle), "case %zu: %s", i, err.msg);
        cr_assert_not(file_exists(path), "case %zu", i);
    }

    /* two entries of 2^52 bytes each are fine on their own, but together exceed 2^53 only with a third */
    const int64_t half[] = {INT64_C(1) << 52};
    tr_st_tensor three[3] = {mk("a", TR_ST_U8, 1, half), mk("b", TR_ST_U8, 1, half), mk("c", TR_ST_U8, 1, ok)};
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, three, 3, NULL, 0, fill_from, src, NULL, NULL, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, "exceed 2^53 bytes at entry \"c\""), "%s", err.msg);
    cr_assert_not(file_exists(path));

    /* duplicate metadata keys */
    tr_st_tensor one = mk("a", TR_ST_F32, 1, ok);
    tr_st_meta meta[2] = {{"k", "1"}, {"k", "2"}};
    err = (tr_error){0, ""};
    cr_assert_eq(tr_st_write(path, &one, 1, meta, 2, fill_from, src, NULL, NULL, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, "key \"k\""), "%s", err.msg);
    cr_assert_not(file_exists(path));
}

Test(safetensors, writer_reports_unwritable_path)
{
    const int64_t ok[] = {1};
    tr_st_tensor t = mk("a", TR_ST_U8, 1, ok);
    const uint8_t one = 1;
    const void *src[1] = {&one};
    const char *path = support_path("no-such-dir/x.safetensors");
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, &t, 1, NULL, 0, fill_from, src, NULL, NULL, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "No such file or directory"), "%s", err.msg);
}

/* ---- reader errors ------------------------------------------------------------------------------------------- */

Test(safetensors, error_missing_file)
{
    expect_read_error(support_path("missing.safetensors"), "cannot open", "No such file or directory");
}

Test(safetensors, error_shorter_than_8_bytes)
{
    const char *path = support_path("short");
    spit(path, "\x05\0\0", 3);
    expect_read_error(path, "3 bytes", fmt_off(0));
}

Test(safetensors, error_truncated_data)
{
    const float a[2] = {1, 2}, b[3] = {3, 4, 5};
    const int64_t s2[] = {2}, s3[] = {3};
    tr_st_tensor ts[2] = {mk("a", TR_ST_F32, 1, s2), mk("b", TR_ST_F32, 1, s3)};
    const void *src[2] = {a, b};
    const char *path = support_path("trunc.safetensors");
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_write(path, ts, 2, NULL, 0, fill_from, src, NULL, NULL, &err), TR_OK, "%s", err.msg);
    size_t len;
    uint8_t *buf = slurp(path, &len);
    uint64_t n = buf[0]; /* small header: one byte of length */
    cr_assert_eq(len, 8 + n + 20);
    spit(path, buf, len - 4); /* cut the last float */
    free(buf);
    /* entry "b" begins at data offset 8: absolute 8 + N + 8 */
    expect_read_error(path, "entry \"b\"", fmt_off(8 + n + 8));
    expect_read_error(path, "[8,20] run past the end of the 16-byte data section", NULL);
}

Test(safetensors, error_header_length_past_end)
{
    const char *path = support_path("hlen.safetensors");
    write_raw(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8);
    size_t len;
    uint8_t *b = slurp(path, &len);
    b[0] = 9999 & 0xff;
    b[1] = 9999 >> 8;
    spit(path, b, len);
    free(b);
    char want[128];
    snprintf(want, sizeof want, "header length 9999 at byte offset 0 runs past the end of the file (size %zu)",
             len);
    expect_read_error(path, want, NULL);
}

Test(safetensors, error_garbage_json)
{
    const char *path = support_path("garbage.safetensors");
    write_raw(path, "{\"a\": nope}", 0);
    /* cJSON stops at the bad value: 'n' of "nope" at header offset 6, file offset 14 */
    expect_read_error(path, "not valid JSON", fmt_off(14));

    write_raw(path, "[1,2]", 0);
    expect_read_error(path, "does not start with '{'", fmt_off(8));

    write_raw(path, "{}  x", 0);
    expect_read_error(path, "unexpected byte 0x78", fmt_off(12));
}

Test(safetensors, error_overlapping_offsets)
{
    const char *path = support_path("overlap.safetensors");
    const char *json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}";
    write_raw(path, json, 12);
    expect_read_error(path, "entry \"b\"", fmt_off(8 + strlen(json) + 4));
    expect_read_error(path, "overlaps entry \"a\"", NULL);

    /* an empty tensor inside another one overlaps it too */
    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
           "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[3,3]}}";
    write_raw(path, json, 8);
    expect_read_error(path, "entry \"e\"", fmt_off(8 + strlen(json) + 3));
}

Test(safetensors, error_gap)
{
    const char *path = support_path("gap.safetensors");
    const char *json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}";
    size_t base = 8 + strlen(json);
    write_raw(path, json, 12);
    expect_read_error(path, "entry \"b\"", fmt_off(base + 8));
    char want[96];
    snprintf(want, sizeof want, "4 bytes from byte offset %zu belong to no entry", base + 4);
    expect_read_error(path, want, NULL);

    /* a gap at the start of the data section */
    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}";
    write_raw(path, json, 8);
    expect_read_error(path, "entry \"a\"", fmt_off(8 + strlen(json) + 4));

    /* bytes after the last entry */
    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    write_raw(path, json, 7);
    snprintf(want, sizeof want, "3 bytes from byte offset %zu to the end of the file", 8 + strlen(json) + 4);
    expect_read_error(path, want, NULL);
}

Test(safetensors, error_size_mismatch_with_shape)
{
    const char *path = support_path("size.safetensors");
    const char *json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,12]}}";
    write_raw(path, json, 12);
    expect_read_error(path, "entry \"w\"", fmt_off(8 + strlen(json) + 4));
    expect_read_error(path, "hold 8 bytes but F32 [3] needs 12", NULL);

    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}";
    write_raw(path, json, 4);
    expect_read_error(path, "end before they begin", fmt_off(8 + strlen(json) + 4));
}

Test(safetensors, error_unknown_dtype)
{
    const char *path = support_path("dtype.safetensors");
    const char *json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                       "\"fp8\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[2,4]}}";
    write_raw(path, json, 4);
    expect_read_error(path, "entry \"fp8\"", fmt_off(8 + strlen(json) + 2));
    expect_read_error(path, "\"F8_E4M3\"", NULL);
}

Test(safetensors, error_bad_dims)
{
    const char *path = support_path("dims.safetensors");
    const char *json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2.5],\"data_offsets\":[0,2]}}";
    size_t base = 8 + strlen(json);
    write_raw(path, json, 2);
    expect_read_error(path, "dim 0 of the shape is not an integer", fmt_off(base));

    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2,-1],\"data_offsets\":[0,2]}}";
    write_raw(path, json, 2);
    expect_read_error(path, "dim 1 of the shape is not an integer", fmt_off(8 + strlen(json)));

    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[18014398509481984],\"data_offsets\":[0,2]}}";
    write_raw(path, json, 2);
    expect_read_error(path, "dim 0 of the shape is not an integer in [0, 2^53]", NULL);

    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]}}";
    write_raw(path, json, 2);
    expect_read_error(path, "dim 0", NULL);

    json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,2]}}";
    write_raw(path, json, 2);
    expect_read_error(path, "9 dims, more than the 8 supported", fmt_off(8 + strlen(json)));
}

Test(safetensors, error_malformed_entries)
{
    const char *path = support_path("entry.safetensors");
    write_raw(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[2]}}", 2);
    expect_read_error(path, "entry \"a\" in the header at byte offset 8 has no \"data_offsets\"", NULL);

    write_raw(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}}", 2);
    expect_read_error(path, "data_offsets is not an array of two", fmt_off(8));

    write_raw(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"extra\":1}}", 2);
    expect_read_error(path, "unknown key \"extra\"", NULL);

    write_raw(path, "{\"a\":[1]}", 0);
    expect_read_error(path, "entry \"a\" in the header at byte offset 8 is not a JSON object", NULL);

    write_raw(path, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                    "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0);
    expect_read_error(path, "two entries are called \"a\"", NULL);

    char json[400];
    char longname[TR_ST_NAME_MAX + 1];
    memset(longname, 'n', TR_ST_NAME_MAX);
    longname[TR_ST_NAME_MAX] = '\0';
    snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", longname);
    write_raw(path, json, 0);
    expect_read_error(path, "too long (256 bytes, the limit is 255)", NULL);

    /* a name of 255 bytes is fine */
    snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", longname + 1);
    write_raw(path, json, 0);
    tr_st_file f;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(strlen(f.tensors[0].name), 255);
    tr_st_close(&f);
}

Test(safetensors, error_metadata)
{
    const char *path = support_path("meta.safetensors");
    write_raw(path, "{\"__metadata__\":{\"ok\":\"yes\",\"n\":3}}", 0);
    expect_read_error(path, "metadata value for key \"n\"", fmt_off(8));

    write_raw(path, "{\"__metadata__\":[\"x\"]}", 0);
    expect_read_error(path, "\"__metadata__\" in the header at byte offset 8 is not a JSON object", NULL);

    /* metadata only, no tensors: valid */
    write_raw(path, "{\"__metadata__\":{\"a\":\"1\",\"b\":\"\"}}", 0);
    tr_st_file f;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(f.n, 0);
    cr_assert_eq(f.n_meta, 2);
    cr_assert_str_eq(tr_st_meta_get(&f, "a"), "1");
    cr_assert_str_eq(tr_st_meta_get(&f, "b"), "");
    tr_st_close(&f);
}

/* A file written by another tool, unpadded and with entries out of offset order, reads fine. */
Test(safetensors, reads_unpadded_out_of_order_file)
{
    const char *path = support_path("foreign.safetensors");
    const char *json = "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                       "\"e\":{\"dtype\":\"I64\",\"shape\":[0,4],\"data_offsets\":[5,5]}}";
    write_raw(path, json, 5);
    tr_st_file f;
    tr_error err = {0, ""};
    cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(f.n, 3);
    cr_assert_str_eq(f.tensors[0].name, "b");
    const uint8_t *b = tr_st_data(&f, tr_st_find(&f, "b"));
    const uint8_t *a = tr_st_data(&f, tr_st_find(&f, "a"));
    cr_assert_eq(a[0], 0x11);
    cr_assert_eq(a[2], 0x33);
    cr_assert_eq(b[0], 0x44);
    cr_assert_eq(b[1], 0x55);
    cr_assert_eq(tr_st_find(&f, "e")->nbytes, 0);
    tr_st_close(&f);
}
