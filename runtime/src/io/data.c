/*
 * data.c -- the IDX reader, normalisation, the validation split and the epoch order (see data.h).
 */
#include "data.h"

#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "splitmix.h"
#include "sys.h" /* tr_memory_available */

/* ------------------------------------------------------------------------------------------------------------ */
/* IDX reader                                                                                                    */
/* ------------------------------------------------------------------------------------------------------------ */

#define IDX_MAGIC_IMAGES 0x00000803u /* ubyte, 3 dims */
#define IDX_MAGIC_LABELS 0x00000801u /* ubyte, 1 dim  */
#define IDX_MAX_PIXELS   (1u << 24)  /* rows * cols above this is rejected as absurd */
#define IDX_CHUNK        (1u << 22)  /* bytes per gzread call (gzread's length is an int) */

/** An open IDX stream: the zlib handle, its path (for messages) and the decompressed byte offset. */
typedef struct idx_file {
    gzFile gz;
    const char *path;
    int64_t off;
    int64_t file_bytes; /* the file's size on disk (-1: unknown, a pipe) */
} idx_file;

/* deflate's best ratio is 1032:1 (RFC 1951: a 258-byte match in at most 2 bits); a gzip file of S bytes cannot
 * hold more than this many bytes of data. */
#define IDX_MAX_INFLATE 1032

static int idx_open(idx_file *f, const char *path, tr_error *err)
{
    f->path = path;
    f->off = 0;
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz) { /* a path that names nothing readable is the user's input (2); anything else the machine's */
        const int e = errno, user = e == ENOENT || e == ENOTDIR || e == EACCES || e == EISDIR || e == ENAMETOOLONG;
        return tr_error_set(err, user ? TR_E_CONFIG : TR_E_RUNTIME, "%s: cannot open: %s", path,
                            e ? strerror(e) : "out of memory");
    }
    gzbuffer(f->gz, 1u << 17); /* larger input buffer than zlib's 8 KiB default: fewer read() calls */
    struct stat st;
    f->file_bytes = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
    return TR_OK;
}

static void idx_close(idx_file *f)
{
    if (f->gz)
        gzclose(f->gz);
    f->gz = NULL;
}

/**
 * Read up to `len` bytes at the current offset. Returns the number read (short only at the end of the data) and
 * advances f->off, or -1 after filling `err` on a read / decompression error.
 */
static int64_t idx_read(idx_file *f, void *buf, int64_t len, tr_error *err)
{
    unsigned char *p = buf;
    int64_t got = 0;
    while (got < len) {
        int64_t want = len - got;
        unsigned n = want > (int64_t)IDX_CHUNK ? IDX_CHUNK : (unsigned)want;
        int r = gzread(f->gz, p + got, n);
        if (r < 0) {
            int zerr = 0;
            const char *zmsg = gzerror(f->gz, &zerr);
            /* an I/O error is the machine's; corrupt compressed data the file's (the user's input) */
            return tr_error_set(err, zerr == Z_ERRNO ? TR_E_RUNTIME : TR_E_CONFIG,
                                "%s: read error at byte offset %lld: %s", f->path, (long long)(f->off + got),
                                zerr == Z_ERRNO ? strerror(errno) : zmsg), -1;
        }
        got += r;
        if ((unsigned)r < n)
            break;
    }
    f->off += got;
    return got;
}

/** Short-read message: a truncated gzip stream is said to be one (zlib reports "unexpected end of file"). */
static const char *idx_eof_note(idx_file *f)
{
    int zerr = Z_OK;
    gzerror(f->gz, &zerr);
    return zerr == Z_BUF_ERROR ? " (compressed stream ends early)" : "";
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/** Read a header of `nwords` big-endian uint32 words and check the magic number (word 0). */
static int idx_header(idx_file *f, uint32_t *words, int nwords, uint32_t magic, const char *what, tr_error *err)
{
    unsigned char b[16];
    int64_t need = 4 * (int64_t)nwords;
    int64_t got = idx_read(f, b, need, err);
    if (got < 0)
        return err ? err->code : TR_E_RUNTIME;
    /* a wrong magic number is the more useful message even when the file is also short */
    if (got >= 4 && be32(b) != magic) {
        uint32_t m = be32(b);
        const char *hint = "";
        if (magic == IDX_MAGIC_IMAGES && m == IDX_MAGIC_LABELS)
            hint = "; this is an IDX label file: are the image and label paths swapped?";
        else if (magic == IDX_MAGIC_LABELS && m == IDX_MAGIC_IMAGES)
            hint = "; this is an IDX image file: are the image and label paths swapped?";
        return tr_error_set(err, TR_E_CONFIG,
                            "%s: wrong magic number 0x%08x at byte offset 0 (expected 0x%08x, an IDX ubyte %s file%s)",
                            f->path, (unsigned)m, (unsigned)magic, what, hint);
    }
    if (got < need)
        return tr_error_set(err, TR_E_CONFIG,
                            "%s: truncated header: expected %lld header bytes, file ends at byte offset %lld%s",
                            f->path, (long long)need, (long long)got, idx_eof_note(f));
    for (int i = 0; i < nwords; i++)
        words[i] = be32(b + 4 * i);
    return TR_OK;
}

int tr_idx_load(const char *images_path, const char *labels_path, int64_t limit, tr_dataset *out, tr_error *err)
{
    idx_file fi = {0}, fl = {0};
    uint32_t hi[4], hl[2];
    unsigned char *chunk = NULL, *lab = NULL;
    float *x = NULL;
    int64_t *y = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    const int labeled = labels_path != NULL; /* NULL: images alone, unlabeled (trainrun predict) */
    if ((rc = idx_open(&fi, images_path, err)) || (labeled && (rc = idx_open(&fl, labels_path, err))))
        goto fail;
    if ((rc = idx_header(&fi, hi, 4, IDX_MAGIC_IMAGES, "image", err)) ||
        (labeled && (rc = idx_header(&fl, hl, 2, IDX_MAGIC_LABELS, "label", err))))
        goto fail;
    if (!labeled) hl[1] = hi[1];

    int64_t n = hi[1], rows = hi[2], cols = hi[3];
    rc = TR_E_CONFIG; /* what the files say is the user's input; memory and I/O below set their own */
    if (n == 0) {
        tr_error_set(err, rc, "%s: image count is 0 at byte offset 4", images_path);
        goto fail;
    }
    if (rows == 0 || cols == 0 || (uint64_t)rows * (uint64_t)cols > IDX_MAX_PIXELS) {
        tr_error_set(err, rc, "%s: bad image size %lldx%lld at byte offset 8 (rows and cols must be >= 1, "
                     "rows*cols <= %u)", images_path, (long long)rows, (long long)cols, IDX_MAX_PIXELS);
        goto fail;
    }
    if ((int64_t)hl[1] != n) {
        tr_error_set(err, rc, "%s: image count %lld does not match label count %lld in %s", images_path,
                     (long long)n, (long long)hl[1], labels_path);
        goto fail;
    }

    int64_t keep = (limit > 0 && limit < n) ? limit : n;
    int64_t d = rows * cols;
    size_t npix = (size_t)keep * (size_t)d;
    /* The header's claim against what the file can hold and what memory there is, before allocating for it: a
     * 56-byte file claiming 300 images of 4096x4096 is refused here, not after a 20 GB malloc. */
    const int direct = gzdirect(fi.gz); /* valid once the header was read: 1 for a file that is not gzip'd */
    const int64_t can_hold = fi.file_bytes < 0 ? INT64_MAX
                             : direct ? fi.file_bytes - 16
                             : (fi.file_bytes > INT64_MAX / IDX_MAX_INFLATE ? INT64_MAX
                                                                            : fi.file_bytes * IDX_MAX_INFLATE);
    if ((int64_t)npix > can_hold && direct) {
        tr_error_set(err, rc, "%s: truncated: expected %lld bytes of image data (%lld images of %lldx%lld, through "
                     "byte offset %lld), file ends at byte offset %lld (refused before allocating)", images_path,
                     (long long)npix, (long long)keep, (long long)rows, (long long)cols, (long long)(16 + npix),
                     (long long)fi.file_bytes);
        goto fail;
    }
    if ((int64_t)npix > can_hold) {
        tr_error_set(err, rc, "%s: the header claims %lld images of %lldx%lld (%lld bytes of pixels), but the file "
                     "(%lld bytes, gzip'd) can hold at most %lld (refused before allocating)", images_path,
                     (long long)keep, (long long)rows, (long long)cols, (long long)npix, (long long)fi.file_bytes,
                     (long long)can_hold);
        goto fail;
    }
    const int64_t avail = tr_memory_available();
    if (avail > 0 && (int64_t)npix > avail / (int64_t)sizeof *x) {
        rc = TR_E_RUNTIME;
        tr_error_set(err, rc, "%s: %lld images of %lldx%lld need %lld bytes as float32, more than the %lld bytes of "
                     "memory available (use data.train_subset to load fewer)", images_path, (long long)keep,
                     (long long)rows, (long long)cols, (long long)(npix * sizeof *x), (long long)avail);
        goto fail;
    }
    x = malloc(npix * sizeof *x);
    y = malloc((size_t)keep * sizeof *y);
    lab = malloc((size_t)keep);
    chunk = malloc(IDX_CHUNK);
    if (!x || !y || !lab || !chunk) {
        rc = TR_E_RUNTIME;
        tr_error_set(err, rc, "%s: cannot allocate %lld samples of %lldx%lld", images_path, (long long)keep,
                     (long long)rows, (long long)cols);
        goto fail;
    }

    /* Pixels: gzread large chunks of ubyte into a staging buffer and scale each chunk to float, so peak memory
     * is the float array plus one chunk rather than the float array plus a full ubyte copy. */
    int64_t end = fi.off + (int64_t)npix;
    for (size_t done = 0; done < npix;) {
        size_t n_chunk = npix - done < IDX_CHUNK ? npix - done : IDX_CHUNK;
        int64_t got = idx_read(&fi, chunk, (int64_t)n_chunk, err);
        if (got < 0) {
            rc = err ? err->code : TR_E_RUNTIME;
            goto fail;
        }
        if ((size_t)got < n_chunk) {
            tr_error_set(err, rc, "%s: truncated: expected %lld bytes of image data (%lld images of %lldx%lld, "
                         "through byte offset %lld), file ends at byte offset %lld%s", images_path,
                         (long long)npix, (long long)keep, (long long)rows, (long long)cols, (long long)end,
                         (long long)fi.off, idx_eof_note(&fi));
            goto fail;
        }
        float *dst = x + done;
        for (size_t i = 0; i < n_chunk; i++)
            dst[i] = (float)chunk[i] / 255.0f;
        done += n_chunk;
    }

    int64_t got = labeled ? idx_read(&fl, lab, keep, err) : keep;
    if (!labeled) memset(lab, 0, (size_t)keep);
    if (got < 0) {
        rc = err ? err->code : TR_E_RUNTIME;
        goto fail;
    }
    if (got < keep) {
        tr_error_set(err, rc, "%s: truncated: expected %lld bytes of label data (through byte offset %lld), "
                     "file ends at byte offset %lld%s", labels_path, (long long)keep, (long long)(8 + keep),
                     (long long)fl.off, idx_eof_note(&fl));
        goto fail;
    }
    int64_t maxlab = 0;
    for (int64_t i = 0; i < keep; i++) {
        y[i] = lab[i];
        if (y[i] > maxlab)
            maxlab = y[i];
    }

    out->x = x;
    out->y = y;
    out->n = keep;
    out->c = 1;
    out->h = rows;
    out->w = cols;
    out->num_classes = labeled ? maxlab + 1 : 0;
    out->unlabeled = !labeled;
    x = NULL; /* out owns them now */
    y = NULL;
    rc = TR_OK;

fail: /* the one way out: success arrives with x and y handed over */
    idx_close(&fi);
    idx_close(&fl);
    free(chunk);
    free(lab);
    free(x);
    free(y);
    return rc;
}

void tr_dataset_free(tr_dataset *ds)
{
    if (!ds)
        return;
    free(ds->x);
    free(ds->y);
    free(ds->t);
    free(ds->tokens);
    tr_vocab_free(&ds->vocab);
    if (ds->images && ds->free_images) ds->free_images(ds->images);
    memset(ds, 0, sizeof *ds);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Normalisation                                                                                                 */
/* ------------------------------------------------------------------------------------------------------------ */

/* Computed in float32 as (x - mean) / std, the same arithmetic as torchvision's Normalize on a float tensor. */
int tr_dataset_normalize(tr_dataset *ds, const double *mean, const double *std, int n_ch, tr_error *err)
{
    if (!mean || !std || n_ch < 1 || (n_ch != 1 && n_ch != ds->c))
        return tr_error_set(err, TR_E_CONFIG,
                            "normalize: %d mean/std values given for data with %lld channels (need 1 or %lld)",
                            n_ch, (long long)ds->c, (long long)ds->c);
    for (int k = 0; k < n_ch; k++) {
        if (!isfinite(mean[k]) || !(std[k] > 0) || !isfinite(std[k]))
            return tr_error_set(err, TR_E_CONFIG,
                                "normalize: channel %d: mean %g and std %g (std must be > 0, both finite)", k,
                                mean[k], std[k]);
    }
    int64_t hw = ds->h * ds->w;
    for (int64_t ch = 0; ch < ds->c; ch++) {
        int k = n_ch == 1 ? 0 : (int)ch;
        float m = (float)mean[k], s = (float)std[k];
        for (int64_t i = 0; i < ds->n; i++) {
            float *p = ds->x + (i * ds->c + ch) * hw;
            for (int64_t j = 0; j < hw; j++)
                p[j] = (p[j] - m) / s;
        }
    }
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Epoch order                                                                                                   */
/* ------------------------------------------------------------------------------------------------------------ */

/*
 * The generator is splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014; constants from Sebastiano Vigna's public-domain reference splitmix64.c, prng.di.unimi.it), used in
 * counter form: output k of the stream keyed by K is mix64(K + (k + 1) * GOLDEN), exactly what splitmix64 seeded
 * with K returns on its (k+1)-th call. The key is K = mix64(mix64(seed ^ SEED_SALT) ^ mix64(epoch ^ EPOCH_SALT)):
 * every bit of seed and epoch reaches every bit of K, consecutive epochs or seeds give unrelated keys, and the
 * nesting keeps (seed a, epoch b) distinct from (seed b, epoch a).
 *
 * Fisher-Yates (Durstenfeld): for i = n-1 down to 1, swap perm[i] with perm[j], j uniform in [0, i]. j comes from
 * Lemire's multiply-shift with rejection ("Fast Random Integer Generation in an Interval", ACM TOMACS 2019):
 * j = high 64 bits of r * (i + 1); the rare r whose low 64 bits fall below 2^64 mod (i + 1) are rejected and the
 * next stream output is drawn, so j is exactly uniform (no modulo bias). Each output consumed, rejected or not,
 * advances the counter k by one, so the result is a pure function of (seed, epoch, n).
 *
 * mix64 is splitmix64's output function, tr_mix64 (splitmix.h). Changing any of this changes every run's data
 * order; tests/test_data.c pins the first values.
 */
#define SM64_GOLDEN TR_SPLITMIX64_GOLDEN
#define SEED_SALT   0x5eed5eed5eed5eedull
#define EPOCH_SALT  0xe90c4e90c4e90c4eull

/** 64x64 -> 128-bit product, portable C11 (no __int128). */
static void mul128(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    *lo = (mid << 32) | (ll & 0xffffffffu);
    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

/** Uniform integer in [0, range), range >= 1, drawing stream outputs mix64(key + (++*ctr) * GOLDEN). */
static uint64_t uniform_below(uint64_t key, uint64_t *ctr, uint64_t range)
{
    uint64_t hi, lo;
    mul128(tr_mix64(key + ++*ctr * SM64_GOLDEN), range, &hi, &lo);
    if (lo < range) {
        uint64_t threshold = (0 - range) % range; /* 2^64 mod range */
        while (lo < threshold)
            mul128(tr_mix64(key + ++*ctr * SM64_GOLDEN), range, &hi, &lo);
    }
    return hi;
}

void tr_permutation(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm)
{
    if (n <= 0)
        return;
    uint64_t key = tr_mix64(tr_mix64(seed ^ SEED_SALT) ^ tr_mix64(epoch ^ EPOCH_SALT));
    uint64_t ctr = 0;
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)uniform_below(key, &ctr, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Validation split and gather                                                                                   */
/* ------------------------------------------------------------------------------------------------------------ */

int tr_dataset_split(tr_dataset *train, int64_t val_size, uint64_t seed, tr_dataset *val, tr_error *err)
{
    int64_t n = train->n, d = train->c * train->h * train->w;
    if (val_size < 0 || val_size >= n)
        return tr_error_set(err, TR_E_CONFIG,
                            "validation split: val_size %lld must be >= 0 and smaller than the %lld training samples",
                            (long long)val_size, (long long)n);

    memset(val, 0, sizeof *val);
    val->c = train->c;
    val->h = train->h;
    val->w = train->w;
    val->num_classes = train->num_classes;
    val->t_cols = train->t_cols;
    if (val_size == 0)
        return TR_OK;
    const size_t tc = (size_t)train->t_cols;
    float *vt = NULL;
    if (train->t && !(vt = malloc((size_t)val_size * tc * sizeof *vt)))
        return tr_error_set(err, TR_E_RUNTIME, "validation split: cannot allocate %lld targets", (long long)val_size);

    int64_t *perm = malloc((size_t)n * sizeof *perm);
    bool *is_val = calloc((size_t)n, sizeof *is_val);
    float *vx = malloc((size_t)val_size * (size_t)d * sizeof *vx);
    int64_t *vy = malloc((size_t)val_size * sizeof *vy);
    if (!perm || !is_val || !vx || !vy) {
        free(perm);
        free(is_val);
        free(vx);
        free(vy);
        free(vt);
        return tr_error_set(err, TR_E_RUNTIME, "validation split: cannot allocate %lld samples",
                            (long long)val_size);
    }

    tr_permutation(seed, UINT64_MAX, n, perm);
    for (int64_t k = 0; k < val_size; k++)
        is_val[perm[k]] = true;
    tr_dataset_gather(train, perm, val_size, vx, vy);
    tr_dataset_gather_targets(train, perm, val_size, vt);

    /* Compact the training samples in place (stable), then give the tail back. */
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        if (is_val[i])
            continue;
        if (w != i) {
            memcpy(train->x + w * d, train->x + i * d, (size_t)d * sizeof *train->x);
            train->y[w] = train->y[i];
            if (train->t) memcpy(train->t + (size_t)w * tc, train->t + (size_t)i * tc, tc * sizeof *train->t);
        }
        w++;
    }
    float *tx = realloc(train->x, (size_t)w * (size_t)d * sizeof *tx);
    int64_t *ty = realloc(train->y, (size_t)w * sizeof *ty);
    if (tx)
        train->x = tx; /* a failed shrink keeps the larger block, which stays valid */
    if (ty)
        train->y = ty;
    train->n = w;

    val->x = vx;
    val->y = vy;
    val->t = vt;
    val->n = val_size;
    free(perm);
    free(is_val);
    return TR_OK;
}

int tr_dataset_carve(tr_dataset *from, int64_t size, uint64_t seed, tr_dataset *to, const char *key, tr_error *err)
{
    const int rc = tr_dataset_split(from, size, seed, to, err);
    if (rc != TR_E_CONFIG) return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return tr_error_set(err, TR_E_CONFIG, "%s: %s", key, msg);
}

void tr_dataset_gather(const tr_dataset *ds, const int64_t *idx, int64_t count, float *xbuf, int64_t *ybuf)
{
    size_t d = (size_t)(ds->c * ds->h * ds->w);
    for (int64_t k = 0; k < count; k++) {
        int64_t i = idx[k];
        memcpy(xbuf + (size_t)k * d, ds->x + (size_t)i * d, d * sizeof *xbuf);
        ybuf[k] = ds->y[i];
    }
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Augmentation                                                                                                  */
/* ------------------------------------------------------------------------------------------------------------ */

/* The augmentation stream of one sample: keyed like the epoch order (above) with a third, salted term for the
 * sample index, so each (seed, epoch, sample) has its own stream and the epoch order's streams are untouched. */
#define AUGMENT_SALT 0xa06e0a06e0a06e0aull

int tr_augment_enabled(const tr_augment *a)
{
    return a && (a->crop_padding > 0 || a->hflip > 0);
}

void tr_augment_draw(const tr_augment *a, uint64_t seed, uint64_t epoch, int64_t sample, int64_t *dy, int64_t *dx,
                     int *flip)
{
    const uint64_t key = tr_mix64(tr_mix64(tr_mix64(seed ^ SEED_SALT) ^ tr_mix64(epoch ^ EPOCH_SALT)) ^
                                  tr_mix64((uint64_t)sample ^ AUGMENT_SALT));
    uint64_t ctr = 0;
    const uint64_t span = (uint64_t)(2 * a->crop_padding + 1);
    *dy = a->crop_padding > 0 ? (int64_t)uniform_below(key, &ctr, span) : a->crop_padding;
    *dx = a->crop_padding > 0 ? (int64_t)uniform_below(key, &ctr, span) : a->crop_padding;
    /* u uniform in [0, 1) from the top 53 bits of the next output; flip when u < p (p = 1 always, p = 0 never) */
    const double u = (double)(tr_mix64(key + ++ctr * SM64_GOLDEN) >> 11) * 0x1.0p-53;
    *flip = u < a->hflip;
}

void tr_augment_sample(const tr_augment *a, uint64_t seed, uint64_t epoch, int64_t sample, const float *src, int64_t c,
                       int64_t h, int64_t w, float *dst)
{
    const int64_t p = a->crop_padding;
    int64_t dy, dx;
    int flip;
    tr_augment_draw(a, seed, epoch, sample, &dy, &dx, &flip);
    for (int64_t ch = 0; ch < c; ch++) {
        const float fill = a->fill[a->n_fill > 1 ? ch : 0];
        for (int64_t y = 0; y < h; y++) {
            /* output row y is row sy of the source; output column x is column sx = x + dx - p of the crop,
             * mirrored first when flipped (the flip acts on the cropped window) */
            const int64_t sy = y + dy - p;
            float *out = dst + (size_t)((ch * h + y) * w);
            if (sy < 0 || sy >= h) {
                for (int64_t x = 0; x < w; x++) out[x] = fill;
                continue;
            }
            const float *row = src + (size_t)((ch * h + sy) * w);
            for (int64_t x = 0; x < w; x++) {
                const int64_t sx = (flip ? w - 1 - x : x) + dx - p;
                out[x] = sx >= 0 && sx < w ? row[sx] : fill;
            }
        }
    }
}

void tr_dataset_gather_augmented(const tr_dataset *ds, const int64_t *idx, int64_t count, const tr_augment *a,
                                 uint64_t seed, uint64_t epoch, float *xbuf, int64_t *ybuf)
{
    const int64_t c = ds->c, h = ds->h, w = ds->w;
    for (int64_t k = 0; k < count; k++) {
        const int64_t i = idx[k];
        tr_augment_sample(a, seed, epoch, i, ds->x + (size_t)i * (size_t)(c * h * w), c, h, w,
                          xbuf + (size_t)k * (size_t)(c * h * w));
        ybuf[k] = ds->y[i];
    }
}

void tr_dataset_gather_targets(const tr_dataset *ds, const int64_t *idx, int64_t count, float *tbuf)
{
    if (!ds->t || !tbuf)
        return;
    const size_t tc = (size_t)ds->t_cols;
    for (int64_t k = 0; k < count; k++)
        memcpy(tbuf + (size_t)k * tc, ds->t + (size_t)idx[k] * tc, tc * sizeof *tbuf);
}
