/*
 * safetensors.c -- the safetensors writer (streaming, hashing while writing, fsync) and the strict reader.
 *
 * Header JSON is built and parsed with cJSON; digests come from hash.h (SHA-256, XXH3-128). The 8-byte header
 * length is encoded byte by byte (endian-independent), but tensor bytes are copied as they lie in memory, so the host must be
 * little-endian (checked at compile time below).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sync_file_range */
#endif
#include "safetensors.h"

#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors stores little-endian tensor bytes and this code copies host memory as is");
#else
#error "cannot tell the byte order of the host: safetensors.c needs a little-endian host"
#endif

/** Largest value a JSON number (an IEEE double) holds exactly; also the cap on a file's data section. */
#define ST_MAX_EXACT ((uint64_t)1 << 53)
/** Header length cap (the reference implementation refuses headers over 100 MB too). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

static const struct {
    const char *name;
    size_t size;
} st_dtypes[TR_ST_DTYPE_COUNT_] = {
    [TR_ST_F32] = {"F32", 4}, [TR_ST_F64] = {"F64", 8}, [TR_ST_I64] = {"I64", 8}, [TR_ST_I32] = {"I32", 4},
    [TR_ST_U8] = {"U8", 1},   [TR_ST_BOOL] = {"BOOL", 1}, [TR_ST_F16] = {"F16", 2}, [TR_ST_BF16] = {"BF16", 2},
};

size_t tr_st_dtype_size(tr_st_dtype dt)
{
    return ((unsigned)dt < TR_ST_DTYPE_COUNT_) ? st_dtypes[dt].size : 0;
}

const char *tr_st_dtype_name(tr_st_dtype dt)
{
    return ((unsigned)dt < TR_ST_DTYPE_COUNT_) ? st_dtypes[dt].name : "?";
}

/** The dtype called `name`; false if there is none. */
static bool dtype_from_name(const char *name, tr_st_dtype *out)
{
    for (int i = 0; i < TR_ST_DTYPE_COUNT_; i++) {
        if (strcmp(name, st_dtypes[i].name) == 0) {
            *out = (tr_st_dtype)i;
            return true;
        }
    }
    return false;
}

/**
 * Byte count of a tensor of `dt` and `shape[0..ndim)` into *nbytes; false when a dim is negative or above 2^53
 * or the count exceeds 2^53 (a 0-dim tensor has one element; any zero dim makes the count 0).
 */
static bool shape_nbytes(tr_st_dtype dt, int ndim, const int64_t *shape, uint64_t *nbytes)
{
    uint64_t count = 1;
    bool zero = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > ST_MAX_EXACT)
            return false;
        if (shape[i] == 0)
            zero = true;
    }
    if (zero) {
        *nbytes = 0;
        return true;
    }
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (count > ST_MAX_EXACT / d)
            return false;
        count *= d;
    }
    uint64_t es = tr_st_dtype_size(dt);
    if (es == 0 || count > ST_MAX_EXACT / es)
        return false;
    *nbytes = count * es;
    return true;
}

/** "[d0,d1,...]" of a shape into buf[n]. */
static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? "," : "", shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

/** Lowercase hex of a 32-byte digest into hex[65]. */
/* ---- writer ---------------------------------------------------------------------------------------------- */

/**
 * A JSON integer for v <= 2^53. cJSON 1.7 prints numbers with "%1.15g" and accepts the result when it reads back
 * approximately equal, so from 1e15 on it may print a rounded exponent form (9007199254740992 became
 * "9.00719925474099e+15"): those values go in as raw digits instead. Below 1e15 "%1.15g" is exact integer text.
 */
static cJSON *json_uint(uint64_t v)
{
    if (v < UINT64_C(1000000000000000))
        return cJSON_CreateNumber((double)v);
    char digits[24];
    snprintf(digits, sizeof digits, "%" PRIu64, v);
    return cJSON_CreateRaw(digits);
}

/** Add a JSON array of `count` integers to `obj` under `key`; false on allocation failure. */
static bool add_uint_array(cJSON *obj, const char *key, const uint64_t *vals, int count)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (!arr)
        return false;
    for (int i = 0; i < count; i++) {
        cJSON *num = json_uint(vals[i]);
        if (!num)
            return false;
        cJSON_AddItemToArray(arr, num);
    }
    return true;
}

/** strcmp over pointers to C strings (qsort). */
static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/** The first of `names[0..n)` that occurs twice (sorts `names` in place), or NULL. */
static const char *find_duplicate(const char **names, size_t n)
{
    if (n < 2)
        return NULL;
    qsort(names, n, sizeof *names, cmp_strp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            return names[i];
    return NULL;
}

/**
 * Check the entries and metadata of a write, computing each tensor's byte count into nbytes[n], the data section
 * size and the largest tensor. Returns TR_OK or TR_E_RUNTIME with the message in err.
 */
static int check_entries(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta,
                         size_t n_meta, uint64_t *nbytes, uint64_t *total, uint64_t *largest, tr_error *err)
{
    *total = 0;
    *largest = 0;
    for (size_t i = 0; i < n; i++) {
        const tr_st_tensor *t = &tensors[i];
        if (!memchr(t->name, '\0', sizeof t->name))
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: the name of entry %zu is not NUL-terminated "
                                "within %d bytes", path, i, TR_ST_NAME_MAX);
        if (t->name[0] == '\0')
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry %zu has an empty name", path, i);
        if (strcmp(t->name, "__metadata__") == 0)
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry %zu: the name \"__metadata__\" is "
                                "reserved", path, i);
        if ((unsigned)t->dtype >= TR_ST_DTYPE_COUNT_)
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry \"%s\": unknown dtype value %d", path,
                                t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > TR_ST_MAX_DIMS)
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry \"%s\": ndim %d is outside [0, %d]",
                                path, t->name, t->ndim, TR_ST_MAX_DIMS);
        char sbuf[256];
        if (!shape_nbytes(t->dtype, t->ndim, t->shape, &nbytes[i]))
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry \"%s\": shape %s (%s) has a negative "
                                "dim or more than 2^53 bytes", path, t->name,
                                shape_str(sbuf, sizeof sbuf, t->ndim, t->shape), tr_st_dtype_name(t->dtype));
        if (nbytes[i] > SIZE_MAX)
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry \"%s\": %" PRIu64 " bytes do not fit "
                                "in memory on this host", path, t->name, nbytes[i]);
        if (nbytes[i] > ST_MAX_EXACT - *total)
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: the data would exceed 2^53 bytes at entry "
                                "\"%s\"", path, t->name);
        *total += nbytes[i];
        if (nbytes[i] > *largest)
            *largest = nbytes[i];
    }
    for (size_t i = 0; i < n_meta; i++)
        if (!meta[i].key || !meta[i].value)
            return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: metadata entry %zu has a NULL %s", path, i,
                                meta[i].key ? "value" : "key");

    size_t most = n > n_meta ? n : n_meta;
    const char **names = malloc((most ? most : 1) * sizeof *names);
    if (!names)
        return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        names[i] = tensors[i].name;
    const char *dup = find_duplicate(names, n);
    if (dup) {
        tr_error_set(err, TR_E_RUNTIME, "cannot write %s: two entries are called \"%s\"", path, dup);
        free(names);
        return TR_E_RUNTIME;
    }
    for (size_t i = 0; i < n_meta; i++)
        names[i] = meta[i].key;
    dup = find_duplicate(names, n_meta);
    if (dup) {
        tr_error_set(err, TR_E_RUNTIME, "cannot write %s: two metadata entries have the key \"%s\"", path, dup);
        free(names);
        return TR_E_RUNTIME;
    }
    free(names);
    return TR_OK;
}

/**
 * The header: 8-byte little-endian length N, then N bytes of JSON padded with spaces to a multiple of 8 so that
 * the data section starts 8-byte aligned. Returns a malloc'd buffer of *len bytes, or NULL (out of memory).
 */
static uint8_t *build_header(const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta, size_t n_meta,
                             const uint64_t *nbytes, size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    uint8_t *out = NULL;
    char *json = NULL;
    if (!root)
        return NULL;
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto done;
        for (size_t i = 0; i < n_meta; i++)
            if (!cJSON_AddStringToObject(m, meta[i].key, meta[i].value))
                goto done;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const tr_st_tensor *t = &tensors[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", tr_st_dtype_name(t->dtype)))
            goto done;
        uint64_t dims[TR_ST_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            dims[d] = (uint64_t)t->shape[d];
        uint64_t offs[2] = {offset, offset + nbytes[i]};
        if (!add_uint_array(e, "shape", dims, t->ndim) || !add_uint_array(e, "data_offsets", offs, 2))
            goto done;
        offset += nbytes[i];
    }
    json = cJSON_PrintUnformatted(root);
    if (!json)
        goto done;
    size_t jlen = strlen(json);
    size_t padded = (jlen + 7) & ~(size_t)7;
    out = malloc(8 + padded);
    if (!out)
        goto done;
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    memcpy(out + 8, json, jlen);
    memset(out + 8 + jlen, ' ', padded - jlen);
    *len = 8 + padded;
done:
    free(json);
    cJSON_Delete(root);
    return out;
}

/* Each entry's byte count is recomputed from dtype and shape (its nbytes and offset fields are not read). Nothing
 * is created when the arguments are refused; once the file is opened, any failure unlinks it. */
void tr_start_writeback(int fd)
{
#if defined(__linux__)
    (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
#endif
}

static int st_write(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta, size_t n_meta,
                    tr_st_fill_fn fill, void *ctx, const void *packed, tr_hash_algo algo, char *hex,
                    uint64_t *size_out, bool sync, tr_error *err);

int tr_st_write(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta, size_t n_meta,
                tr_st_fill_fn fill, void *ctx, char *sha256_hex, uint64_t *size_out, tr_error *err)
{
    return st_write(path, tensors, n, meta, n_meta, fill, ctx, NULL, TR_HASH_SHA256, sha256_hex, size_out, true,
                    err);
}

int tr_st_write_unsynced(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta,
                         size_t n_meta, tr_st_fill_fn fill, void *ctx, tr_hash_algo algo, char *hex,
                         uint64_t *size_out, tr_error *err)
{
    return st_write(path, tensors, n, meta, n_meta, fill, ctx, NULL, algo, hex, size_out, false, err);
}

int tr_st_write_packed_unsynced(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta,
                                size_t n_meta, const void *data, tr_hash_algo algo, char *hex, uint64_t *size_out,
                                tr_error *err)
{
    return st_write(path, tensors, n, meta, n_meta, NULL, NULL, data, algo, hex, size_out, false, err);
}

static int st_write(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta, size_t n_meta,
                    tr_st_fill_fn fill, void *ctx, const void *packed, tr_hash_algo algo, char *hex,
                    uint64_t *size_out, bool sync, tr_error *err)
{
    if (!path)
        return tr_error_set(err, TR_E_RUNTIME, "cannot write a safetensors file: no path given");
    if ((n > 0 && (!tensors || (!fill && !packed))) || (n_meta > 0 && !meta))
        return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: %s is NULL", path,
                            (n_meta > 0 && !meta) ? "meta" : !tensors ? "tensors" : "the fill callback");

    uint64_t *nbytes = malloc((n ? n : 1) * sizeof *nbytes);
    if (!nbytes)
        return tr_error_set(err, TR_E_RUNTIME, "cannot write %s: out of memory", path);
    uint64_t total, largest;
    if (check_entries(path, tensors, n, meta, n_meta, nbytes, &total, &largest, err) != TR_OK) {
        free(nbytes);
        return TR_E_RUNTIME;
    }

    int rc = TR_E_RUNTIME;
    int fd = -1;
    bool created = false;
    uint8_t *header = NULL, *buf = NULL;
    tr_hash md = {0};
    size_t header_len = 0;

    header = build_header(tensors, n, meta, n_meta, nbytes, &header_len);
    buf = malloc(packed || !largest ? 1 : (size_t)largest); /* packed: the data is written from where it is */
    if (!header || !buf || tr_hash_init(&md, algo) != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot write %s: out of memory", path);
        goto fail;
    }

    fd = tr_io_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot create %s: %s", path, strerror(errno));
        goto fail;
    }
    created = true;

    if (tr_hash_update(&md, header, header_len) != 0 || tr_io_write_all(fd, header, header_len) != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot write the header of %s: %s", path, strerror(errno));
        goto fail;
    }
    if (packed &&
        (tr_hash_update(&md, packed, (size_t)total) != 0 || tr_io_write_all(fd, packed, (size_t)total) != 0)) {
        tr_error_set(err, TR_E_RUNTIME, "cannot write the data of %s: %s", path, strerror(errno));
        goto fail;
    }
    for (size_t i = 0; !packed && i < n; i++) {
        tr_error ferr = {TR_OK, ""};
        if (fill(ctx, i, buf, (size_t)nbytes[i], &ferr) != 0) {
            if (ferr.msg[0])
                tr_error_set(err, TR_E_RUNTIME, "cannot write %s: entry \"%s\": %s", path, tensors[i].name,
                             ferr.msg);
            else
                tr_error_set(err, TR_E_RUNTIME, "cannot write %s: the fill callback failed for entry \"%s\"",
                             path, tensors[i].name);
            goto fail;
        }
        if (tr_hash_update(&md, buf, (size_t)nbytes[i]) != 0 || tr_io_write_all(fd, buf, (size_t)nbytes[i]) != 0) {
            tr_error_set(err, TR_E_RUNTIME, "cannot write entry \"%s\" of %s: %s", tensors[i].name, path,
                         strerror(errno));
            goto fail;
        }
    }
    if (!sync) {
        tr_start_writeback(fd);
    } else if (tr_io_fsync(fd) != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot fsync %s: %s", path, strerror(errno));
        goto fail;
    }
    int cr = close(fd);
    fd = -1;
    if (cr != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot close %s: %s", path, strerror(errno));
        goto fail;
    }
    char digest[TR_HASH_HEX_MAX];
    if (tr_hash_final(&md, digest) != 0) {
        tr_error_set(err, TR_E_RUNTIME, "cannot write %s: %s finalisation failed", path, tr_hash_name(algo));
        goto fail;
    }
    if (hex)
        memcpy(hex, digest, tr_hash_hex_len(algo) + 1);
    if (size_out)
        *size_out = (uint64_t)header_len + total;
    rc = TR_OK;
    goto done;

fail:
    if (fd >= 0)
        close(fd);
    if (created)
        unlink(path);
done:
    tr_hash_abort(&md);
    free(buf);
    free(header);
    free(nbytes);
    return rc;
}

/* ---- reader ---------------------------------------------------------------------------------------------- */

/** A JSON number that is an integer in [0, 2^53] into *out; false otherwise (2.5, -1, 1e300, a string...). */
static bool json_u53(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return false;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= (double)ST_MAX_EXACT) || (double)(uint64_t)v != v) /* NaN fails the range test */
        return false;
    *out = (uint64_t)v;
    return true;
}

/** Order by data_offsets (begin, then end) -- qsort over pointers to entries. */
static int cmp_offsets(const void *a, const void *b)
{
    const tr_st_tensor *x = *(const tr_st_tensor *const *)a, *y = *(const tr_st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    uint64_t xe = x->offset + x->nbytes, ye = y->offset + y->nbytes;
    return xe < ye ? -1 : xe > ye ? 1 : 0;
}

/**
 * Parse one header entry (`item`, an object) into *t. `base` is the file offset of the data section, data_len its
 * length. Every error names the file and the byte offset of the entry's data (or of the header when the data
 * offsets are unusable).
 */
static int parse_entry(const char *path, const cJSON *item, uint64_t base, uint64_t data_len, tr_st_tensor *t,
                       tr_error *err)
{
    const char *name = item->string;
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    if (!cJSON_IsObject(item))
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" in the header at byte offset 8 is not a JSON "
                            "object", path, name);
    for (const cJSON *c = item->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dtype
                             : strcmp(c->string, "shape") == 0        ? &shape
                             : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot)
            return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" in the header at byte offset 8 has an "
                                "unknown key \"%s\"", path, name, c->string);
        if (*slot)
            return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" in the header at byte offset 8 has the key "
                                "\"%s\" twice", path, name, c->string);
        *slot = c;
    }
    if (!dtype || !shape || !offs)
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" in the header at byte offset 8 has no \"%s\"",
                            path, name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_u53(offs->child, &begin) ||
        !json_u53(offs->child->next, &end))
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" in the header at byte offset 8: data_offsets "
                            "is not an array of two non-negative integers", path, name);
    uint64_t at = base + begin; /* both <= 2^53: no overflow */

    if (!cJSON_IsString(dtype))
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": dtype is not a "
                            "string", path, name, at);
    if (!dtype_from_name(dtype->valuestring, &t->dtype))
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": unknown or "
                            "unsupported dtype \"%s\"", path, name, at, dtype->valuestring);
    if (!cJSON_IsArray(shape))
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": shape is not an "
                            "array", path, name, at);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > TR_ST_MAX_DIMS)
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": %d dims, more than "
                            "the %d supported", path, name, at, ndim, TR_ST_MAX_DIMS);
    t->ndim = ndim;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        uint64_t v;
        if (!json_u53(c, &v))
            return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": dim %d of the "
                                "shape is not an integer in [0, 2^53]", path, name, at, d);
        t->shape[d] = (int64_t)v;
    }
    char sbuf[256];
    if (!shape_nbytes(t->dtype, t->ndim, t->shape, &t->nbytes))
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": shape %s of %s "
                            "exceeds 2^53 bytes", path, name, at, shape_str(sbuf, sizeof sbuf, t->ndim, t->shape),
                            dtype->valuestring);
    if (end < begin)
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": data_offsets [%"
                            PRIu64 ",%" PRIu64 "] end before they begin", path, name, at, begin, end);
    if (end > data_len)
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": data_offsets [%"
                            PRIu64 ",%" PRIu64 "] run past the end of the %" PRIu64 "-byte data section (file "
                            "truncated?)", path, name, at, begin, end, data_len);
    if (end - begin != t->nbytes)
        return tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 ": data_offsets [%"
                            PRIu64 ",%" PRIu64 "] hold %" PRIu64 " bytes but %s %s needs %" PRIu64, path, name,
                            at, begin, end, end - begin, dtype->valuestring,
                            shape_str(sbuf, sizeof sbuf, t->ndim, t->shape), t->nbytes);
    t->offset = begin;
    return TR_OK;
}

/** Copy the "__metadata__" object into out->meta (one allocation: the array, then the strings). */
static int parse_metadata(const char *path, const cJSON *m, tr_st_file *out, tr_error *err)
{
    if (!cJSON_IsObject(m))
        return tr_error_set(err, TR_E_RUNTIME, "%s: \"__metadata__\" in the header at byte offset 8 is not a "
                            "JSON object", path);
    size_t count = 0, bytes = 0;
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return tr_error_set(err, TR_E_RUNTIME, "%s: metadata value for key \"%s\" in the header at byte "
                                "offset 8 is not a string", path, c->string);
        for (const cJSON *p = m->child; p != c; p = p->next)
            if (strcmp(p->string, c->string) == 0)
                return tr_error_set(err, TR_E_RUNTIME, "%s: metadata key \"%s\" appears twice in the header at "
                                    "byte offset 8", path, c->string);
        count++;
        bytes += strlen(c->string) + strlen(c->valuestring) + 2;
    }
    if (count == 0)
        return TR_OK;
    char *block = malloc(count * sizeof(tr_st_meta) + bytes);
    if (!block)
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for the metadata", path);
    tr_st_meta *meta = (tr_st_meta *)(void *)block;
    char *s = block + count * sizeof(tr_st_meta);
    size_t i = 0;
    for (const cJSON *c = m->child; c; c = c->next, i++) {
        size_t kl = strlen(c->string) + 1, vl = strlen(c->valuestring) + 1;
        memcpy(s, c->string, kl);
        meta[i].key = s;
        s += kl;
        memcpy(s, c->valuestring, vl);
        meta[i].value = s;
        s += vl;
    }
    out->meta = meta;
    out->n_meta = count;
    return TR_OK;
}

/** Validate and parse the header of a whole file held in f->buf (f->size bytes). */
static int parse_file(const char *path, tr_st_file *f, tr_error *err)
{
    const uint8_t *b = f->buf;
    if (f->size < 8)
        return tr_error_set(err, TR_E_RUNTIME, "%s: the file is %zu bytes, too short for the 8-byte header "
                            "length at byte offset 0", path, f->size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)b[i] << (8 * i);
    if (hlen > f->size - 8)
        return tr_error_set(err, TR_E_RUNTIME, "%s: header length %" PRIu64 " at byte offset 0 runs past the end "
                            "of the file (size %zu)", path, hlen, f->size);
    if (hlen > ST_MAX_HEADER)
        return tr_error_set(err, TR_E_RUNTIME, "%s: header length %" PRIu64 " at byte offset 0 exceeds the "
                            "%" PRIu64 "-byte limit", path, hlen, ST_MAX_HEADER);
    const char *hdr = (const char *)b + 8;
    const char *nul = memchr(hdr, '\0', (size_t)hlen);
    if (nul)
        return tr_error_set(err, TR_E_RUNTIME, "%s: NUL byte inside the header at byte offset %zu", path,
                            (size_t)(nul - (const char *)b));
    if (hlen == 0 || hdr[0] != '{')
        return tr_error_set(err, TR_E_RUNTIME, "%s: the header at byte offset 8 does not start with '{'", path);

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = (end && end >= hdr && end <= hdr + hlen) ? 8 + (size_t)(end - hdr) : 8;
        return tr_error_set(err, TR_E_RUNTIME, "%s: the header is not valid JSON (parse error at byte offset %zu)",
                            path, at);
    }
    int rc = TR_E_RUNTIME;
    for (const char *p = end; p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            tr_error_set(err, TR_E_RUNTIME, "%s: unexpected byte 0x%02x after the JSON header at byte offset %zu",
                         path, (unsigned)(unsigned char)*p, (size_t)(p - (const char *)b));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        tr_error_set(err, TR_E_RUNTIME, "%s: the header at byte offset 8 is not a JSON object", path);
        goto done;
    }

    uint64_t base = 8 + hlen, data_len = f->size - base;
    f->data = b + base;
    size_t count = 0;
    const cJSON *meta = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (meta) {
                tr_error_set(err, TR_E_RUNTIME, "%s: \"__metadata__\" appears twice in the header at byte offset "
                             "8", path);
                goto done;
            }
            meta = c;
        } else {
            count++;
        }
    }
    if (meta && parse_metadata(path, meta, f, err) != TR_OK)
        goto done;

    f->tensors = calloc(count ? count : 1, sizeof *f->tensors);
    if (!f->tensors) {
        tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %zu entries", path, count);
        goto done;
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c == meta)
            continue;
        size_t nl = strlen(c->string);
        if (nl == 0 || nl >= TR_ST_NAME_MAX) {
            tr_error_set(err, TR_E_RUNTIME, "%s: an entry name in the header at byte offset 8 is %s (%zu bytes, "
                         "the limit is %d)", path, nl ? "too long" : "empty", nl, TR_ST_NAME_MAX - 1);
            goto done;
        }
        for (size_t j = 0; j < f->n; j++) {
            if (strcmp(f->tensors[j].name, c->string) == 0) {
                tr_error_set(err, TR_E_RUNTIME, "%s: two entries are called \"%s\" in the header at byte offset "
                             "8", path, c->string);
                goto done;
            }
        }
        tr_st_tensor *t = &f->tensors[f->n];
        memcpy(t->name, c->string, nl + 1);
        if (parse_entry(path, c, base, data_len, t, err) != TR_OK)
            goto done;
        f->n++;
    }

    /* The entries must tile the data section: sorted by offset, each begins where the previous ended. */
    const tr_st_tensor **order = malloc((count ? count : 1) * sizeof *order);
    if (!order) {
        tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        order[i] = &f->tensors[i];
    qsort(order, count, sizeof *order, cmp_offsets);
    uint64_t pos = 0;
    const tr_st_tensor *prev = NULL;
    for (size_t i = 0; i < count; i++) {
        const tr_st_tensor *t = order[i];
        if (t->offset < pos) {
            tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 " (data_offsets [%" PRIu64
                         ",%" PRIu64 "]) overlaps entry \"%s\" (data_offsets [%" PRIu64 ",%" PRIu64 "])", path,
                         t->name, base + t->offset, t->offset, t->offset + t->nbytes, prev->name, prev->offset,
                         prev->offset + prev->nbytes);
            free(order);
            goto done;
        }
        if (t->offset > pos) {
            tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\" at byte offset %" PRIu64 " leaves a gap: %" PRIu64
                         " bytes from byte offset %" PRIu64 " belong to no entry", path, t->name, base + t->offset,
                         t->offset - pos, base + pos);
            free(order);
            goto done;
        }
        pos = t->offset + t->nbytes;
        prev = t;
    }
    free(order);
    if (pos != data_len) {
        tr_error_set(err, TR_E_RUNTIME, "%s: %" PRIu64 " bytes from byte offset %" PRIu64 " to the end of the file "
                     "belong to no entry", path, data_len - pos, base + pos);
        goto done;
    }
    rc = TR_OK;
done:
    cJSON_Delete(root);
    return rc;
}

int tr_st_read(const char *path, tr_st_file *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    if (!path)
        return tr_error_set(err, TR_E_RUNTIME, "cannot read a safetensors file: no path given");
    if (tr_io_read_file(path, 0, &out->buf, &out->size, err) != TR_OK) { /* the one file reader (io.h) */
        if (err) err->code = TR_E_RUNTIME; /* a tensor file is the checkpoint's, never the user's input */
        return TR_E_RUNTIME;
    }
    if (parse_file(path, out, err) != TR_OK) {
        tr_st_close(out);
        return TR_E_RUNTIME;
    }
    return TR_OK;
}

const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *tr_st_meta_get(const tr_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

const void *tr_st_data(const tr_st_file *f, const tr_st_tensor *t)
{
    return f->data + t->offset;
}

void tr_st_close(tr_st_file *f)
{
    if (!f)
        return;
    free(f->buf);
    free(f->tensors);
    free(f->meta);
    memset(f, 0, sizeof *f);
}

/* ---- hashing --------------------------------------------------------------------------------------------- */

int tr_sha256_file(const char *path, char hex[65], uint64_t *size, tr_error *err)
{
    return tr_hash_file(path, TR_HASH_SHA256, hex, size, err);
}
