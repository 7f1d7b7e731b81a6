/*
 * npy.c -- the .npy / .npz reader and an .npy writer (see npy.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <zlib.h>

#include "csv.h"
#include "io.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c copies little-endian elements as they are: a big-endian host needs byte swapping here"
#endif

static const uint8_t k_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

const char *tr_npy_dtype_name(tr_npy_dtype dtype)
{
    static const char *const names[] = {"float32", "float64", "uint8", "int32", "int64"};
    return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "unknown";
}

/* ------------------------------------------------------------------------------------------------ header */

/* A cursor over the header text: p .. end, with base the offset of p's stream start for messages. */
typedef struct hdr_cursor {
    const char *start, *p, *end;
    uint64_t base; /* stream offset of start */
    const char *name;
    tr_error *err;
} hdr_cursor;

static int hfail(const hdr_cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int hfail(const hdr_cursor *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tr_error_set(c->err, TR_E_CONFIG, "%s: byte %llu: %s", c->name,
                        (unsigned long long)(c->base + (uint64_t)(c->p - c->start)), msg);
}

static void skip_ws(hdr_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static int expect(hdr_cursor *c, char ch)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch) {
        char what[2] = {ch, 0};
        return hfail(c, "malformed header: expected '%s'", what);
    }
    c->p++;
    return TR_OK;
}

/* A quoted Python string literal without escapes ('...' or "..."), at most cap-1 chars, into out. */
static int parse_str(hdr_cursor *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return hfail(c, "malformed header: expected %s", "a string");
    const char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20) return hfail(c, "malformed header: %s in a string", "escape or control character");
        if (n + 1 >= cap) return hfail(c, "malformed header: %s", "string too long");
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return hfail(c, "malformed header: %s", "unterminated string");
    c->p++;
    out[n] = '\0';
    return TR_OK;
}

static int parse_descr(hdr_cursor *c, tr_npy_array *a)
{
    const char *at = c->p;
    char d[32];
    int rc = parse_str(c, d, sizeof d);
    if (rc) return rc;
    c->p = at; /* messages below point at the value */
    skip_ws(c);
    static const struct {
        const char *descr;
        tr_npy_dtype dtype;
        size_t size;
    } ok[] = {{"<f4", TR_NPY_FLOAT32, 4}, {"<f8", TR_NPY_FLOAT64, 8}, {"|u1", TR_NPY_UINT8, 1},
              {"<u1", TR_NPY_UINT8, 1},   {"<i4", TR_NPY_INT32, 4},   {"<i8", TR_NPY_INT64, 8}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(d, ok[i].descr) == 0) {
            a->dtype = ok[i].dtype;
            a->elem_size = ok[i].size;
            return parse_str(c, d, sizeof d);
        }
    if (d[0] == '>') return hfail(c, "dtype '%s' is big-endian; save little-endian data (arr.astype(arr.dtype.newbyteorder('<')))", d);
    if (strchr(d, 'O')) return hfail(c, "dtype '%s' is an object array (a pickle); only numeric arrays are read", d);
    return hfail(c, "dtype '%s' is not one of float32 '<f4', float64 '<f8', uint8 '|u1', int32 '<i4', int64 '<i8'", d);
}

static int parse_bool(hdr_cursor *c, int *v)
{
    skip_ws(c);
    const size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        *v = 1;
        c->p += 4;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        *v = 0;
        c->p += 5;
    } else {
        return hfail(c, "malformed header: fortran_order must be %s", "True or False");
    }
    return TR_OK;
}

/* "(a, b, c)", "(a,)", "()": non-negative decimal integers without signs or leading zeros (other than "0"). */
static int parse_shape(hdr_cursor *c, tr_npy_array *a)
{
    int rc = expect(c, '(');
    if (rc) return rc;
    a->ndim = 0;
    int comma = 0; /* a comma followed the last size */
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == ')') {
            if (a->ndim == 1 && !comma) return hfail(c, "malformed header: %s", "a 1-d shape is written (n,)");
            c->p++;
            return TR_OK;
        }
        if (a->ndim > 0 && !comma) return hfail(c, "malformed header: expected %s in shape", "',' or ')'");
        if (a->ndim >= TR_NPY_MAX_DIMS) return hfail(c, "shape has more than %s dims", "8");
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return hfail(c, "malformed header: %s in shape", "expected a size");
        if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
            return hfail(c, "malformed header: %s in shape", "leading zero");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return hfail(c, "shape size %s", "overflows int64");
            v = v * 10 + (*c->p++ - '0');
        }
        a->shape[a->ndim++] = v;
        skip_ws(c);
        comma = c->p < c->end && *c->p == ',';
        if (comma) c->p++;
    }
}

int tr_npy_parse_header(const uint8_t *buf, size_t len, const char *name, tr_npy_array *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    if (!name) name = "(npy)";
    if (len < 10 || memcmp(buf, k_magic, 6) != 0)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte 0: not a NumPy .npy file (no \\x93NUMPY magic)", name);
    const int major = buf[6], minor = buf[7];
    uint64_t hlen, hstart;
    if (major == 1) {
        hlen = (uint64_t)buf[8] | (uint64_t)buf[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: truncated header length", name, len);
        hlen = (uint64_t)buf[8] | (uint64_t)buf[9] << 8 | (uint64_t)buf[10] << 16 | (uint64_t)buf[11] << 24;
        hstart = 12;
    } else {
        return tr_error_set(err, TR_E_CONFIG, "%s: byte 6: format version %d.%d is not 1.0, 2.0 or 3.0", name, major,
                            minor);
    }
    if (minor != 0)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte 7: format version %d.%d is not 1.0, 2.0 or 3.0", name, major,
                            minor);
    if (hlen > TR_NPY_MAX_HEADER)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte 8: header length %llu is more than %d bytes", name,
                            (unsigned long long)hlen, TR_NPY_MAX_HEADER);
    if (hlen == 0 || hstart + hlen > len)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: truncated header (%llu header bytes declared at byte 8)",
                            name, len, (unsigned long long)hlen);
    const char *h = (const char *)buf + hstart;
    if (h[hlen - 1] != '\n')
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: the header does not end with a newline", name,
                            (unsigned long long)(hstart + hlen - 1));
    for (uint64_t i = 0; i < hlen - 1; i++)
        if ((unsigned char)h[i] < 0x20 || (unsigned char)h[i] > 0x7e)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: the header has a byte 0x%02x that is not printable "
                                "ASCII", name, (unsigned long long)(hstart + i), (unsigned char)h[i]);
    hdr_cursor c = {.start = h, .p = h, .end = h + hlen - 1, .base = hstart, .name = name, .err = err};
    int rc = expect(&c, '{');
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0, fortran = 0;
    while (!rc) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') {
            c.p++;
            break;
        }
        const char *key_at = c.p;
        char key[32];
        if ((rc = parse_str(&c, key, sizeof key)) || (rc = expect(&c, ':'))) break;
        int *seen = strcmp(key, "descr") == 0 ? &seen_descr
                    : strcmp(key, "fortran_order") == 0 ? &seen_fortran
                    : strcmp(key, "shape") == 0 ? &seen_shape
                                                : NULL;
        if (!seen || *seen) {
            c.p = key_at;
            rc = hfail(&c, seen ? "malformed header: key '%s' appears twice" : "malformed header: unknown key '%s'", key);
            break;
        }
        *seen = 1;
        if (seen == &seen_descr) rc = parse_descr(&c, out);
        else if (seen == &seen_fortran) rc = parse_bool(&c, &fortran);
        else rc = parse_shape(&c, out);
        if (rc) break;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') c.p++;
        else if (!(c.p < c.end && *c.p == '}')) rc = hfail(&c, "malformed header: expected %s", "',' or '}'");
    }
    if (rc) return rc;
    skip_ws(&c);
    if (c.p != c.end) return hfail(&c, "malformed header: %s after the dict", "text");
    if (!seen_descr || !seen_fortran || !seen_shape)
        return hfail(&c, "malformed header: missing key '%s'",
                     !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    if (fortran) {
        c.p = c.start;
        return hfail(&c, "fortran_order is %s: save a C-order array (np.ascontiguousarray)", "True");
    }
    int64_t count = 1;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] != 0 && count > INT64_MAX / out->shape[i]) {
            c.p = c.start;
            return hfail(&c, "the shape's element count %s", "overflows int64");
        }
        count *= out->shape[i];
    }
    if ((uint64_t)count > (UINT64_MAX - (hstart + hlen)) / out->elem_size || (uint64_t)count > SIZE_MAX / out->elem_size) {
        c.p = c.start;
        return hfail(&c, "the shape's byte size %s", "overflows");
    }
    out->count = count;
    out->data_offset = hstart + hlen;
    return TR_OK;
}

int tr_npy_parse(const uint8_t *buf, size_t len, const char *name, tr_npy_array *out, tr_error *err)
{
    int rc = tr_npy_parse_header(buf, len, name, out, err);
    if (rc) return rc;
    if (!name) name = "(npy)";
    const uint64_t need = (uint64_t)out->count * out->elem_size, have = len - out->data_offset;
    if (have < need)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: truncated data: the shape needs %llu bytes from byte %llu",
                            name, len, (unsigned long long)need, (unsigned long long)out->data_offset);
    if (have > need)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: %llu bytes after the array's data", name,
                            (unsigned long long)(out->data_offset + need), (unsigned long long)(have - need));
    out->data = malloc(need > 0 ? (size_t)need : 1);
    if (!out->data) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %llu bytes", name, (unsigned long long)need);
    memcpy(out->data, buf + out->data_offset, (size_t)need);
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ npz */

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }

int tr_npz_parse(const uint8_t *buf, size_t len, const char *name, const char *member, tr_npy_array *out,
                 tr_error *err)
{
    memset(out, 0, sizeof *out);
    if (!name) name = "(npz)";
    /* End of central directory: 22 bytes + a comment of at most 65535, searched backwards. */
    if (len < 22) return tr_error_set(err, TR_E_CONFIG, "%s: byte 0: too short for a zip (.npz) archive", name);
    size_t eocd = (size_t)-1;
    for (size_t i = len - 22 + 1; i-- > 0 && len - i <= 22 + 65535;)
        if (rd32(buf + i) == 0x06054b50u && i + 22 + rd16(buf + i + 20) == len) {
            eocd = i;
            break;
        }
    if (eocd == (size_t)-1)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: no zip end-of-central-directory record: not an .npz",
                            name, len);
    const uint32_t entries = rd16(buf + eocd + 10), cd_size = rd32(buf + eocd + 12), cd_off = rd32(buf + eocd + 16);
    if (entries == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: a zip64 archive (over 4 GiB or 65535 members) is not "
                            "read; save smaller arrays", name, eocd);
    if ((uint64_t)cd_off + cd_size > eocd)
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: the central directory (%u bytes at %u) overlaps the "
                            "end record", name, eocd + 16, cd_size, cd_off);
    char want[256];
    if (member && member[0]) {
        const size_t ml = strlen(member);
        snprintf(want, sizeof want, "%s%s", member, ml > 4 && strcmp(member + ml - 4, ".npy") == 0 ? "" : ".npy");
    } else if (entries != 1) {
        char names[1024] = "";
        size_t p = cd_off, used = 0;
        for (uint32_t e = 0; e < entries && p + 46 <= (size_t)cd_off + cd_size && rd32(buf + p) == 0x02014b50u; e++) {
            const uint32_t nl = rd16(buf + p + 28);
            if (p + 46 + nl > (size_t)cd_off + cd_size) break;
            used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0, "%s%.*s",
                                     e ? ", " : "", (int)(nl > 200 ? 200 : nl), (const char *)buf + p + 46);
            if (used >= sizeof names) break;
            p += 46 + nl + rd16(buf + p + 30) + rd16(buf + p + 32);
        }
        return tr_error_set(err, TR_E_CONFIG, "%s: %u arrays in the archive (%s): name one as %s:NAME", name, entries,
                            names, name);
    } else {
        want[0] = '\0';
    }
    size_t p = cd_off;
    for (uint32_t e = 0; e < entries; e++) {
        if (p + 46 > (size_t)cd_off + cd_size || rd32(buf + p) != 0x02014b50u)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: central directory entry %u is malformed", name, p, e);
        const uint32_t flags = rd16(buf + p + 8), method = rd16(buf + p + 10), crc = rd32(buf + p + 16),
                       csize = rd32(buf + p + 20), usize = rd32(buf + p + 24), nl = rd16(buf + p + 28),
                       xl = rd16(buf + p + 30), cl = rd16(buf + p + 32), loff = rd32(buf + p + 42);
        if (p + 46 + (size_t)nl + xl + cl > (size_t)cd_off + cd_size)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: central directory entry %u runs past the directory",
                                name, p, e);
        const char *ename = (const char *)buf + p + 46;
        const size_t entry_at = p;
        p += 46 + (size_t)nl + xl + cl;
        if (want[0] && (nl != strlen(want) || memcmp(ename, want, nl) != 0)) continue;
        char full[1300];
        snprintf(full, sizeof full, "%s:%.*s", name, (int)(nl > 255 ? 255 : nl), ename);
        if (flags & 1) return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: the member is encrypted", full, entry_at + 8);
        if (method != 0 && method != 8)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: compression method %u is not stored (0) or deflate (8)",
                                full, entry_at + 10, method);
        if (csize == 0xffffffffu || usize == 0xffffffffu || loff == 0xffffffffu)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: a zip64 member (over 4 GiB) is not read", full,
                                entry_at + 20);
        if ((uint64_t)loff + 30 > cd_off || rd32(buf + loff) != 0x04034b50u)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %u: no local file header where the directory says", full,
                                loff);
        const uint64_t data_at = (uint64_t)loff + 30 + rd16(buf + loff + 26) + rd16(buf + loff + 28);
        if (data_at + csize > cd_off)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: the member's %u compressed bytes run past the data",
                                full, (unsigned long long)data_at, csize);
        if (method == 0 && csize != usize)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: a stored member with sizes %u and %u", full,
                                entry_at + 20, csize, usize);
        /* Deflate expands at most ~1032:1 (zlib's technical details): a larger declared size is a lie, and is
         * refused before it is allocated. */
        if (method == 8 && (uint64_t)usize > (uint64_t)csize * 1032u + 1024u)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: %u uncompressed bytes declared from %u compressed: "
                                "more than deflate can produce", full, entry_at + 24, usize, csize);
        uint8_t *raw = malloc(usize > 0 ? usize : 1);
        if (!raw) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %u bytes", full, usize);
        if (method == 0) {
            memcpy(raw, buf + data_at, usize);
        } else {
            z_stream z;
            memset(&z, 0, sizeof z);
            if (inflateInit2(&z, -15) != Z_OK) {
                free(raw);
                return tr_error_set(err, TR_E_RUNTIME, "%s: zlib inflateInit2 failed", full);
            }
            z.next_in = (Bytef *)(buf + data_at);
            z.avail_in = csize;
            z.next_out = raw;
            z.avail_out = usize;
            const int zr = inflate(&z, Z_FINISH);
            const uLong total = z.total_out, consumed = z.total_in;
            inflateEnd(&z);
            if (zr != Z_STREAM_END || total != usize) {
                free(raw);
                return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: corrupt deflate data (%s after %lu of %u "
                                    "bytes)", full, (unsigned long long)(data_at + consumed),
                                    zr == Z_STREAM_END ? "ended early" : zr == Z_BUF_ERROR ? "more data than declared"
                                                                                            : "zlib error",
                                    total, usize);
            }
        }
        const uLong got_crc = crc32(crc32(0L, Z_NULL, 0), raw, usize);
        if (got_crc != crc) {
            free(raw);
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %zu: CRC-32 %08lx does not match the directory's %08x",
                                full, entry_at + 16, got_crc, crc);
        }
        const int rc = tr_npy_parse(raw, usize, full, out, err);
        free(raw);
        return rc;
    }
    return tr_error_set(err, TR_E_CONFIG, "%s: no member '%s' in the archive", name, want);
}

/* ------------------------------------------------------------------------------------------------ files */


int tr_npy_load(const char *path, tr_npy_array *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    char file[4096];
    const char *member = NULL;
    snprintf(file, sizeof file, "%s", path);
    char *npz = strstr(file, ".npz");
    if (npz && (npz[4] == '\0' || npz[4] == ':')) {
        if (npz[4] == ':') {
            npz[4] = '\0';
            member = npz + 5;
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        int rc = tr_io_read_file(file, 0, &buf, &len, err);
        if (rc) return rc;
        rc = tr_npz_parse(buf, len, file, member, out, err);
        free(buf);
        return rc;
    }
    /* .npy: the header first, then the data straight into the array once the file's size fits the shape. */
    FILE *f;
    int64_t file_size;
    int rc = tr_io_open_regular(path, &f, &file_size, err);
    if (rc) return rc;
    static const size_t cap = 12 + TR_NPY_MAX_HEADER;
    uint8_t *head = malloc(cap);
    if (!head) {
        fclose(f);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    }
    const size_t hn = fread(head, 1, cap, f);
    rc = tr_npy_parse_header(head, hn, path, out, err);
    free(head);
    if (rc) {
        fclose(f);
        return rc;
    }
    const uint64_t need = (uint64_t)out->count * out->elem_size, size = (uint64_t)file_size;
    if (size < out->data_offset + need || size > out->data_offset + need) {
        fclose(f);
        if (size < out->data_offset + need)
            return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: truncated data: the shape needs %llu bytes from "
                                "byte %llu", path, (unsigned long long)size, (unsigned long long)need,
                                (unsigned long long)out->data_offset);
        return tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: %llu bytes after the array's data", path,
                            (unsigned long long)(out->data_offset + need),
                            (unsigned long long)(size - out->data_offset - need));
    }
    out->data = malloc(need > 0 ? (size_t)need : 1);
    if (!out->data) {
        fclose(f);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %llu bytes", path, (unsigned long long)need);
    }
    size_t got = 0;
    if (fseeko(f, (off_t)out->data_offset, SEEK_SET) == 0) got = fread(out->data, 1, (size_t)need, f);
    fclose(f);
    if (got != need) {
        tr_npy_free(out);
        return tr_error_set(err, TR_E_RUNTIME, "%s: byte %llu: read failed", path,
                            (unsigned long long)(out->data_offset + got));
    }
    return TR_OK;
}

void tr_npy_free(tr_npy_array *a)
{
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

int tr_npy_save(const char *path, tr_npy_dtype dtype, const int64_t *shape, int ndim, const void *data,
                tr_error *err)
{
    static const char *const descr[] = {"<f4", "<f8", "|u1", "<i4", "<i8"};
    static const size_t size[] = {4, 8, 1, 4, 8};
    if ((unsigned)dtype > TR_NPY_INT64 || ndim < 0 || ndim > TR_NPY_MAX_DIMS)
        return tr_error_set(err, TR_E_CONFIG, "%s: bad dtype or ndim", path);
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr[dtype]);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)shape[i], i + 1 < ndim ? " " : "");
        count *= shape[i];
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    const int total = ((10 + n + 1 + 63) / 64) * 64; /* magic + header, newline-terminated, to a multiple of 64 */
    uint8_t head[640];
    memcpy(head, k_magic, 6);
    head[6] = 1;
    head[7] = 0;
    head[8] = (uint8_t)((total - 10) & 0xff);
    head[9] = (uint8_t)((total - 10) >> 8);
    memcpy(head + 10, dict, (size_t)n);
    memset(head + 10 + n, ' ', (size_t)(total - 10 - n - 1));
    head[total - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    const size_t bytes = (size_t)count * size[dtype];
    const int ok = fwrite(head, 1, (size_t)total, f) == (size_t)total && fwrite(data, 1, bytes, f) == bytes;
    if (fclose(f) != 0 || !ok) return tr_error_set(err, TR_E_RUNTIME, "%s: write failed", path);
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ data sets */

/* Element i of a as a double. */
static double elem(const tr_npy_array *a, int64_t i)
{
    const uint8_t *p = (const uint8_t *)a->data + (size_t)i * a->elem_size;
    switch (a->dtype) {
    case TR_NPY_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case TR_NPY_FLOAT64: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    case TR_NPY_UINT8: return *p;
    case TR_NPY_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case TR_NPY_INT64:
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    }
}

static int64_t elem_i64(const tr_npy_array *a, int64_t i)
{
    const uint8_t *p = (const uint8_t *)a->data + (size_t)i * a->elem_size;
    if (a->dtype == TR_NPY_UINT8) return *p;
    if (a->dtype == TR_NPY_INT32) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static unsigned long long byte_of(const tr_npy_array *a, int64_t i)
{
    return (unsigned long long)(a->data_offset + (uint64_t)i * a->elem_size);
}

/* One split from its two files: inputs to float32 [n, c, h, w], targets to y or t by data.target. ypath NULL:
 * inputs alone (out->unlabeled = 1, y all zeros, no t: what `trainrun predict` reads). */
static int load_split(const tr_config *cfg, const char *xpath, const char *ypath, int64_t subset, tr_dataset *out,
                      tr_error *err)
{
    tr_npy_array x, y;
    memset(&y, 0, sizeof y);
    int rc = tr_npy_load(xpath, &x, err);
    if (rc) return rc;
    if (ypath && (rc = tr_npy_load(ypath, &y, err))) {
        tr_npy_free(&x);
        return rc;
    }
    memset(out, 0, sizeof *out);
    const tr_target_kind kind = ypath ? cfg->data.target : TR_TARGET_CLASS;
    if (!ypath) {
        y.ndim = 1;
        y.shape[0] = x.ndim >= 1 ? x.shape[0] : 0;
        out->unlabeled = 1;
    }
    if (x.ndim < 1 || x.ndim > 4) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: inputs of rank %d; the npy format takes [N], [N, D], [N, H, W] or "
                          "[N, C, H, W]", xpath, x.ndim);
        goto done;
    }
    if (!ypath) {
    } else if (y.ndim < 1 || y.shape[0] != x.shape[0]) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: %lld targets but %s has %lld samples", ypath,
                          (long long)(y.ndim < 1 ? 0 : y.shape[0]), xpath, (long long)x.shape[0]);
        goto done;
    }
    if (ypath && kind == TR_TARGET_CLASS && (y.ndim != 1 || y.dtype == TR_NPY_FLOAT32 || y.dtype == TR_NPY_FLOAT64)) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: data.target: class needs [N] integer class indices (uint8, int32, "
                          "int64); this array is %s of rank %d", ypath, tr_npy_dtype_name(y.dtype), y.ndim);
        goto done;
    }
    if (ypath && kind != TR_TARGET_CLASS && y.ndim > 2) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: data.target: %s needs [N, K] targets; this array has rank %d", ypath,
                          kind == TR_TARGET_MULTI_HOT ? "multi_hot" : "regression", y.ndim);
        goto done;
    }
    const int64_t n_all = x.shape[0], n = subset > 0 && subset < n_all ? subset : n_all;
    const int64_t per = n_all > 0 ? x.count / n_all : 0;
    const int64_t k = y.ndim == 2 ? y.shape[1] : 1;
    if (n < 1 || per < 1 || k < 1) {
        rc = tr_error_set(err, TR_E_CONFIG, "%s: no samples (shape has a 0)", xpath);
        goto done;
    }
    out->c = x.ndim == 4 ? x.shape[1] : x.ndim == 2 ? x.shape[1] : 1;
    out->h = x.ndim == 4 ? x.shape[2] : x.ndim == 3 ? x.shape[1] : 1;
    out->w = x.ndim == 4 ? x.shape[3] : x.ndim == 3 ? x.shape[2] : 1;
    out->n = n;
    out->x = malloc((size_t)(n * per) * sizeof *out->x);
    out->y = calloc((size_t)n, sizeof *out->y);
    if (kind != TR_TARGET_CLASS) out->t = malloc((size_t)(n * k) * sizeof *out->t);
    if (!out->x || !out->y || (kind != TR_TARGET_CLASS && !out->t)) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %lld samples", xpath, (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n * per; i++) {
        const double v = elem(&x, i);
        const float f = (float)v;
        if (!isfinite(f)) {
            rc = tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: input element %lld is %g, not a finite float32",
                              xpath, byte_of(&x, i), (long long)i, v);
            goto done;
        }
        out->x[i] = f;
    }
    if (!ypath) {
    } else if (kind == TR_TARGET_CLASS) {
        int64_t maxlab = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t v = elem_i64(&y, i);
            if (v < 0) {
                rc = tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: class index %lld of sample %lld is negative",
                                  ypath, byte_of(&y, i), (long long)v, (long long)i);
                goto done;
            }
            out->y[i] = v;
            if (v > maxlab) maxlab = v;
        }
        out->num_classes = maxlab + 1;
    } else {
        for (int64_t i = 0; i < n * k; i++) {
            const double v = elem(&y, i);
            if (!isfinite((float)v) || (kind == TR_TARGET_MULTI_HOT && v != 0.0 && v != 1.0)) {
                rc = tr_error_set(err, TR_E_CONFIG, "%s: byte %llu: target %lld of sample %lld is %g; %s", ypath,
                                  byte_of(&y, i), (long long)(i % k), (long long)(i / k), v,
                                  kind == TR_TARGET_MULTI_HOT ? "multi_hot targets are 0 or 1" : "not finite");
                goto done;
            }
            out->t[i] = (float)v;
        }
        out->t_cols = k;
        out->num_classes = k;
    }
done:
    tr_npy_free(&x);
    tr_npy_free(&y);
    if (rc) tr_dataset_free(out);
    return rc;
}

/* load_split's error with the config key that named the file put first ("data.train_inputs: ./x.npy: cannot open:
 * ..."): the message says which file it is and where the user gave it. */
static int keyed_split(const tr_config *cfg, const char *xkey, const char *xpath, const char *ykey, const char *ypath,
                       int64_t subset, tr_dataset *out, tr_error *err)
{
    const int rc = load_split(cfg, xpath, ypath, subset, out, err);
    if (!rc || !err) return rc;
    const char *key = ypath && strncmp(err->msg, ypath, strlen(ypath)) == 0 ? ykey : xkey;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return tr_error_set(err, rc, "%s: %s", key, msg);
}

int tr_npy_setup(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err)
{
    char px[2 * TR_PATH_MAX], py[2 * TR_PATH_MAX];
    tr_config_resolve_data_path(cfg, cfg->data.train_inputs, px, sizeof px);
    tr_config_resolve_data_path(cfg, cfg->data.train_targets, py, sizeof py);
    int rc = keyed_split(cfg, "data.train_inputs", px, "data.train_targets", py, cfg->data.train_subset, train, err);
    if (rc) return rc;
    if (cfg->data.test_inputs[0] && (cfg->eval.test_at_end || cfg->eval.split == TR_EVAL_TEST)) {
        tr_config_resolve_data_path(cfg, cfg->data.test_inputs, px, sizeof px);
        tr_config_resolve_data_path(cfg, cfg->data.test_targets, py, sizeof py);
        const char *ypath = cfg->data.test_targets[0] ? py : NULL; /* inputs alone: unlabeled */
        if ((rc = keyed_split(cfg, "data.test_inputs", px, "data.test_targets", ypath, cfg->data.test_subset, test,
                              err)))
            return rc;
        if (test->c * test->h * test->w != train->c * train->h * train->w ||
            (!test->unlabeled && test->t_cols != train->t_cols))
            return tr_error_set(err, TR_E_CONFIG, "data.test_inputs: samples of [%lld, %lld, %lld] with %lld target "
                                "columns; training has [%lld, %lld, %lld] with %lld", (long long)test->c,
                                (long long)test->h, (long long)test->w, (long long)test->t_cols, (long long)train->c,
                                (long long)train->h, (long long)train->w, (long long)train->t_cols);
    }
    if (cfg->data.val_size > 0 &&
        (rc = tr_dataset_carve(train, cfg->data.val_size, cfg->seed, val, "data.val_size", err)))
        return rc;
    tr_tabular_finish(cfg, train, val, test, train->c * train->h * train->w);
    return TR_OK;
}
