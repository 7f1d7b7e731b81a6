/*
 * image.c -- PNG (libpng) and JPEG (TurboJPEG) decoding from memory, PIL's mode conversions, PIL's bilinear
 * resampling and torchvision's centre crop (see image.h).
 */
#include "image.h"

#include <limits.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <jconfig.h> /* LIBJPEG_TURBO_VERSION_NUMBER */

static const uint8_t k_png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static int is_png(const uint8_t *b, size_t n) { return n >= 8 && memcmp(b, k_png_sig, 8) == 0; }
static int is_jpeg(const uint8_t *b, size_t n) { return n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff; }

void tr_image_free(tr_image *im)
{
    if (!im) return;
    free(im->px);
    memset(im, 0, sizeof *im);
}

static int not_an_image(const uint8_t *buf, size_t len, const char *name, tr_error *err)
{
    if (len == 0) return tr_error_set(err, TR_E_RUNTIME, "%s: empty file (0 bytes): not a PNG or JPEG image", name);
    char shown[64];
    tr_escape_bytes((const char *)buf, len < 8 ? len : 8, shown, sizeof shown);
    return tr_error_set(err, TR_E_RUNTIME,
                        "%s: not a PNG or JPEG image (first bytes \"%s\"; trainrun decodes PNG "
                        "and JPEG, found by their signature bytes)",
                        name, shown);
}

static int size_ok(int64_t w, int64_t h, int64_t max_pixels, const char *name, const char *format, tr_error *err)
{
    if (w < 1 || h < 1)
        return tr_error_set(err, TR_E_RUNTIME, "%s: %s header: %lld x %lld pixels (width and height must be >= 1)",
                            name, format, (long long)w, (long long)h);
    if (w > max_pixels / h)
        return tr_error_set(err, TR_E_RUNTIME,
                            "%s: %s header claims %lld x %lld pixels, more than data.max_image_pixels "
                            "(%lld; PIL's decompression-bomb bound): refused before decoding",
                            name, format, (long long)w, (long long)h, (long long)max_pixels);
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ PNG (libpng) */

/* libpng reports errors by longjmp: the message is kept here and the read function never reads past the end. */
typedef struct png_src {
    const uint8_t *buf;
    size_t len, off;
    const char *name;
    char msg[256];
    jmp_buf jmp;
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->off) {
        snprintf(s->msg, sizeof s->msg, "truncated: the data ends at byte offset %zu, %zu bytes short", s->len,
                 n - (s->len - s->off));
        png_error(png, s->msg);
    }
    memcpy(out, s->buf + s->off, n);
    s->off += n;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    if (msg != s->msg) snprintf(s->msg, sizeof s->msg, "%s", msg);
    longjmp(s->jmp, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* an ancillary chunk libpng discards (a bad CRC in tEXt, say) does not change the pixels */
}

/* Everything a PNG decode holds, freed on every way out (libpng's errors longjmp past the frames in between). */
typedef struct png_job {
    png_structp png;
    png_infop info;
    uint8_t *px, *row, *native;
    png_bytep *rows;
} png_job;

static void png_job_free(png_job *j)
{
    if (j->png) png_destroy_read_struct(&j->png, j->info ? &j->info : NULL, NULL);
    free(j->px);
    free(j->row);
    free(j->native);
    free(j->rows);
    memset(j, 0, sizeof *j);
}

/* One pixel of the file's nc channels (8-bit gray, gray + alpha, RGB, RGBA) as `channels` channels. */
static void convert_px(const uint8_t *in, int nc, uint8_t *o, int channels)
{
    const int gray = nc <= 2;
    const uint8_t r = in[0], g = gray ? in[0] : in[1], b = gray ? in[0] : in[2];
    const uint8_t a = nc == 2 ? in[1] : nc == 4 ? in[3] : 255;
    if (channels == 1) {
        o[0] = gray ? r : (uint8_t)(((uint32_t)r * 19595 + (uint32_t)g * 38470 + (uint32_t)b * 7471 + 0x8000) >> 16);
        return;
    }
    o[0] = r, o[1] = g, o[2] = b;
    if (channels == 4) o[3] = a;
}

/* A PNG's header and, when `out` is not NULL, its pixels as `channels` channels. `info` may be NULL. */
static int png_decode(const uint8_t *buf, size_t len, const char *name, int channels, int64_t max_pixels,
                      tr_image_info *info, tr_image *out, tr_error *err)
{
    png_src src = {.buf = buf, .len = len, .name = name};
    png_job job = {0}; /* reached through &job only after setjmp: its members are not kept in registers */
    png_job *volatile j = &job;
    j->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    if (j->png) j->info = png_create_info_struct(j->png);
    if (!j->png || !j->info) {
        png_job_free(j);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory starting the PNG decoder", name);
    }
    if (setjmp(src.jmp)) {
        png_job_free(j);
        return tr_error_set(err, TR_E_RUNTIME, "%s: corrupt or truncated PNG: %s", name, src.msg);
    }
    png_structp png = j->png;
    png_infop pinfo = j->info;
    png_set_read_fn(png, &src, png_read_mem);
    /* libpng's own bounds too: no chunk (iCCP, zTXt, ...) inflates past 8 MiB, no dimension past 2^20 */
    png_set_user_limits(png, 1u << 20, 1u << 20);
    png_set_chunk_malloc_max(png, 8u << 20);
    png_read_info(png, pinfo);
    const int64_t w = png_get_image_width(png, pinfo), h = png_get_image_height(png, pinfo);
    const int color = png_get_color_type(png, pinfo), depth = png_get_bit_depth(png, pinfo);
    int rc = size_ok(w, h, max_pixels, name, "PNG", err);
    if (rc) {
        png_job_free(j);
        return rc;
    }
    const int has_trns = png_get_valid(png, pinfo, PNG_INFO_tRNS) != 0;
    const int file_channels = color == PNG_COLOR_TYPE_GRAY         ? (has_trns ? 2 : 1)
                              : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                              : color == PNG_COLOR_TYPE_RGB        ? (has_trns ? 4 : 3)
                              : color == PNG_COLOR_TYPE_PALETTE    ? (has_trns ? 4 : 3)
                                                                   : 4;
    if (info) *info = (tr_image_info){.w = w, .h = h, .channels = file_channels, .format = "PNG"};
    if (!out) {
        png_job_free(j);
        return TR_OK;
    }
    /* to 8-bit gray, gray + alpha, RGB or RGBA */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (has_trns) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_strip_16(png);
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, pinfo);
    const int nc = png_get_channels(png, pinfo);
    const size_t rowbytes = png_get_rowbytes(png, pinfo);
    if (nc < 1 || nc > 4 || rowbytes != (size_t)w * (size_t)nc) png_error(png, "unexpected row layout");
    /* the file's rows at its own channel count, converted one by one into the requested count */
    j->px = malloc((size_t)(w * h) * (size_t)channels);
    if (!j->px) png_error(png, "out of memory");
    if (passes > 1) { /* interlaced: libpng needs the whole image to combine its passes */
        j->native = malloc((size_t)(w * h) * (size_t)nc);
        j->rows = malloc((size_t)h * sizeof *j->rows);
        if (!j->native || !j->rows) png_error(png, "out of memory");
        for (int64_t y = 0; y < h; y++) j->rows[y] = j->native + (size_t)y * rowbytes;
        png_read_image(png, j->rows);
    } else if (!(j->row = malloc(rowbytes))) {
        png_error(png, "out of memory");
    }
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *in = j->native ? j->native + (size_t)y * rowbytes : j->row;
        if (!j->native) png_read_row(png, j->row, NULL);
        uint8_t *o = j->px + (size_t)(y * w) * (size_t)channels;
        for (int64_t x = 0; x < w; x++)
            convert_px(in + (size_t)x * (size_t)nc, nc, o + (size_t)x * (size_t)channels, channels);
    }
    png_read_end(png, NULL);
    *out = (tr_image){.px = j->px, .w = w, .h = h, .c = channels};
    j->px = NULL;
    png_job_free(j);
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------ JPEG (TurboJPEG) */

static int jpeg_decode(const uint8_t *buf, size_t len, const char *name, int channels, int64_t max_pixels,
                       tr_image_info *info, tr_image *out, tr_error *err)
{
    if (len > ULONG_MAX) return tr_error_set(err, TR_E_RUNTIME, "%s: JPEG file too large", name);
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot start the JPEG decoder: %s", name, tjGetErrorStr2(NULL));
    int w = 0, h = 0, subsamp = 0, cs = 0;
    int rc = TR_OK;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &subsamp, &cs) != 0) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: corrupt or truncated JPEG header: %s", name, tjGetErrorStr2(tj));
        goto done;
    }
    if (w < 1 || h < 1) { /* TurboJPEG reads a header cut before its frame size as 0 x 0 */
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: corrupt or truncated JPEG header: no frame size before the data ends",
                          name);
        goto done;
    }
    if ((rc = size_ok(w, h, max_pixels, name, "JPEG", err))) goto done;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
        rc = tr_error_set(err, TR_E_RUNTIME,
                          "%s: a %s JPEG: trainrun decodes grayscale and colour (YCbCr / RGB) "
                          "JPEGs",
                          name, cs == TJCS_CMYK ? "CMYK" : "YCCK");
        goto done;
    }
    const int gray = cs == TJCS_GRAY;
    if (info) *info = (tr_image_info){.w = w, .h = h, .channels = gray ? 1 : 3, .format = "JPEG"};
    if (!out) goto done;
    /* gray files decode to gray, colour ones to RGB (then to L by PIL's formula, not libjpeg's Y) */
    const int nc = gray ? 1 : 3;
    uint8_t *native = malloc((size_t)w * (size_t)h * (size_t)nc);
    uint8_t *px = native && channels != nc ? malloc((size_t)w * (size_t)h * (size_t)channels) : native;
    if (!native || !px) {
        free(native);
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory decoding %d x %d pixels", name, w, h);
        goto done;
    }
    if (tjDecompress2(tj, buf, (unsigned long)len, native, w, 0, h, gray ? TJPF_GRAY : TJPF_RGB,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: corrupt or truncated JPEG: %s", name, tjGetErrorStr2(tj));
        if (px != native) free(px);
        free(native);
        goto done;
    }
    if (px != native) {
        const size_t n = (size_t)w * (size_t)h;
        for (size_t i = 0; i < n; i++) convert_px(native + i * (size_t)nc, nc, px + i * (size_t)channels, channels);
        free(native);
    }
    *out = (tr_image){.px = px, .w = w, .h = h, .c = channels};
done:
    tjDestroy(tj);
    if (rc && out) memset(out, 0, sizeof *out);
    return rc;
}

int tr_image_probe(const uint8_t *buf, size_t len, const char *name, int64_t max_pixels, tr_image_info *info,
                   tr_error *err)
{
    if (is_png(buf, len)) return png_decode(buf, len, name, 1, max_pixels, info, NULL, err);
    if (is_jpeg(buf, len)) return jpeg_decode(buf, len, name, 1, max_pixels, info, NULL, err);
    return not_an_image(buf, len, name, err);
}

int tr_image_decode(const uint8_t *buf, size_t len, const char *name, int channels, int64_t max_pixels, tr_image *out,
                    tr_error *err)
{
    memset(out, 0, sizeof *out);
    if (channels != 1 && channels != 3 && channels != 4)
        return tr_error_set(err, TR_E_RUNTIME, "%s: %d channels requested (1, 3 or 4)", name, channels);
    if (is_png(buf, len)) return png_decode(buf, len, name, channels, max_pixels, NULL, out, err);
    if (is_jpeg(buf, len)) return jpeg_decode(buf, len, name, channels, max_pixels, NULL, out, err);
    return not_an_image(buf, len, name, err);
}

/* ------------------------------------------------------------------------------------ resize (PIL's bilinear) */

/*
 * PIL's resampling in its own arithmetic: for output pixel i of n over an input of size N, scale = N / n, the
 * filter is stretched by fs = max(scale, 1), support = fs (the triangle's half-width is 1); its centre is
 * (i + 0.5) * scale; the input taps run from xmin = (int)(centre - support + 0.5) (>= 0) to
 * (int)(centre + support + 0.5) (<= N), tap j weighted by triangle((j - centre + 0.5) / fs) and the weights
 * normalised to sum 1, then rounded to 22-bit fixed point away from zero. A pass sums taps into an int started
 * at 2^21 (the rounding half) and keeps the result's bits 22..29 clipped to [0, 255].
 */
#define RS_BITS 22

typedef struct rs_taps {
    int *first, *count; /* [n] */
    int32_t *k;         /* [n, ksize] */
    int ksize;
} rs_taps;

static double triangle(double x)
{
    x = x < 0 ? -x : x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static void taps_free(rs_taps *t)
{
    free(t->first);
    free(t->count);
    free(t->k);
}

static int taps_make(int64_t in_size, int64_t out_size, rs_taps *t)
{
    memset(t, 0, sizeof *t);
    const double scale = (double)(float)in_size / (double)out_size; /* PIL's box edge is a float */
    const double fs = scale < 1.0 ? 1.0 : scale, support = fs;
    const int ksize = (int)ceil(support) * 2 + 1;
    t->ksize = ksize;
    t->first = malloc((size_t)out_size * sizeof *t->first);
    t->count = malloc((size_t)out_size * sizeof *t->count);
    t->k = malloc((size_t)out_size * (size_t)ksize * sizeof *t->k);
    double *w = malloc((size_t)ksize * sizeof *w);
    if (!t->first || !t->count || !t->k || !w) {
        free(w);
        taps_free(t);
        return -1;
    }
    for (int64_t i = 0; i < out_size; i++) {
        const double centre = ((double)i + 0.5) * scale, ss = 1.0 / fs;
        int lo = (int)(centre - support + 0.5), hi = (int)(centre + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = (int)in_size;
        const int cnt = hi - lo;
        double sum = 0;
        for (int j = 0; j < cnt; j++) sum += (w[j] = triangle(((double)(j + lo) - centre + 0.5) * ss));
        int32_t *k = t->k + (size_t)i * (size_t)ksize;
        for (int j = 0; j < ksize; j++) {
            const double v = j < cnt ? (sum != 0.0 ? w[j] / sum : w[j]) : 0.0;
            k[j] = (int32_t)(v < 0 ? -0.5 + v * (1 << RS_BITS) : 0.5 + v * (1 << RS_BITS));
        }
        t->first[i] = lo;
        t->count[i] = cnt;
    }
    free(w);
    return 0;
}

static uint8_t clip8(int32_t v)
{
    v >>= RS_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* in [h, w_in, c] -> out [h, w_out, c], rows y0 .. y0 + h of the input */
static void pass_h(const uint8_t *in, int64_t w_in, int c, int64_t y0, int64_t h, const rs_taps *t, int64_t w_out,
                   uint8_t *out)
{
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)((y0 + y) * w_in) * (size_t)c;
        for (int64_t x = 0; x < w_out; x++) {
            const int32_t *k = t->k + (size_t)x * (size_t)t->ksize;
            const uint8_t *p = row + (size_t)t->first[x] * (size_t)c;
            for (int ch = 0; ch < c; ch++) {
                int32_t s = 1 << (RS_BITS - 1);
                for (int j = 0; j < t->count[x]; j++) s += (int32_t)p[(size_t)j * (size_t)c + (size_t)ch] * k[j];
                out[(size_t)(y * w_out + x) * (size_t)c + (size_t)ch] = clip8(s);
            }
        }
    }
}

/* in [*, w, c] (row 0 = input row `base`) -> out [h_out, w, c] */
static void pass_v(const uint8_t *in, int64_t w, int c, int64_t base, const rs_taps *t, int64_t h_out, uint8_t *out)
{
    const size_t stride = (size_t)w * (size_t)c;
    for (int64_t y = 0; y < h_out; y++) {
        const int32_t *k = t->k + (size_t)y * (size_t)t->ksize;
        const uint8_t *col = in + (size_t)(t->first[y] - base) * stride;
        for (size_t e = 0; e < stride; e++) {
            int32_t s = 1 << (RS_BITS - 1);
            for (int j = 0; j < t->count[y]; j++) s += (int32_t)col[(size_t)j * stride + e] * k[j];
            out[(size_t)y * stride + e] = clip8(s);
        }
    }
}

int tr_image_resize(const tr_image *in, int64_t out_h, int64_t out_w, tr_image *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    const int c = in->c;
    const size_t n_out = (size_t)(out_h * out_w) * (size_t)c;
    uint8_t *px = malloc(n_out ? n_out : 1);
    if (!px)
        return tr_error_set(err, TR_E_RUNTIME, "out of memory resizing to %lld x %lld", (long long)out_h,
                            (long long)out_w);
    if (in->h == out_h && in->w == out_w) {
        memcpy(px, in->px, n_out);
        *out = (tr_image){.px = px, .w = out_w, .h = out_h, .c = c};
        return TR_OK;
    }
    rs_taps tv, th = {0};
    uint8_t *tmp = NULL;
    if (taps_make(in->h, out_h, &tv)) goto oom;
    const uint8_t *src = in->px;
    int64_t base = 0, w_now = in->w;
    if (out_w != in->w) { /* horizontal pass over the input rows the vertical pass will read */
        const int64_t first = tv.first[0], last = tv.first[out_h - 1] + tv.count[out_h - 1];
        if (taps_make(in->w, out_w, &th)) goto oom;
        tmp = malloc((size_t)((last - first) * out_w) * (size_t)c + 1);
        if (!tmp) goto oom;
        pass_h(in->px, in->w, c, first, last - first, &th, out_w, tmp);
        src = tmp;
        base = first;
        w_now = out_w;
    }
    if (out_h != in->h) pass_v(src, w_now, c, base, &tv, out_h, px);
    else memcpy(px, src, n_out); /* only the width changed: the horizontal pass's rows are the output */
    taps_free(&tv);
    taps_free(&th);
    free(tmp);
    *out = (tr_image){.px = px, .w = out_w, .h = out_h, .c = c};
    return TR_OK;
oom:
    taps_free(&tv);
    taps_free(&th);
    free(tmp);
    free(px);
    return tr_error_set(err, TR_E_RUNTIME, "out of memory resizing to %lld x %lld", (long long)out_h, (long long)out_w);
}

void tr_image_shorter_side_size(int64_t h, int64_t w, int64_t size, int64_t *out_h, int64_t *out_w)
{
    const int64_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
    const int64_t new_long = (int64_t)((double)(size * longer) / (double)shorter);
    *out_w = w <= h ? size : new_long;
    *out_h = w <= h ? new_long : size;
}

/* Python's round() of x / 2 for an integer x: halves go to the even neighbour. */
static int64_t round_half(int64_t x)
{
    const int64_t q = x >= 0 ? x / 2 : -((-x) / 2), r = x - 2 * q; /* x = 2q + r, r in {-1, 0, 1} */
    if (r == 0) return q;
    /* x / 2 = q + r / 2: exactly halfway between q and q + r; pick the even one */
    return (q % 2 == 0) ? q : q + r;
}

int tr_image_center_crop(const tr_image *in, int64_t crop_h, int64_t crop_w, tr_image *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    const int c = in->c;
    /* padding first (left / top get the smaller half), as torchvision's center_crop pads */
    const int64_t pad_l = crop_w > in->w ? (crop_w - in->w) / 2 : 0, pad_t = crop_h > in->h ? (crop_h - in->h) / 2 : 0;
    const int64_t w = crop_w > in->w ? crop_w : in->w, h = crop_h > in->h ? crop_h : in->h;
    const int64_t top = round_half(h - crop_h), left = round_half(w - crop_w);
    uint8_t *px = calloc((size_t)(crop_h * crop_w) * (size_t)c + 1, 1);
    if (!px)
        return tr_error_set(err, TR_E_RUNTIME, "out of memory cropping to %lld x %lld", (long long)crop_h,
                            (long long)crop_w);
    for (int64_t y = 0; y < crop_h; y++) {
        const int64_t sy = y + top - pad_t; /* row in the unpadded image */
        if (sy < 0 || sy >= in->h) continue;
        for (int64_t x = 0; x < crop_w; x++) {
            const int64_t sx = x + left - pad_l;
            if (sx < 0 || sx >= in->w) continue;
            memcpy(px + (size_t)(y * crop_w + x) * (size_t)c, in->px + (size_t)(sy * in->w + sx) * (size_t)c,
                   (size_t)c);
        }
    }
    *out = (tr_image){.px = px, .w = crop_w, .h = crop_h, .c = c};
    return TR_OK;
}

void tr_image_decoder_versions(uint32_t *png, uint32_t *jpeg)
{
    *png = (uint32_t)png_access_version_number();
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
    *jpeg = (uint32_t)LIBJPEG_TURBO_VERSION_NUMBER;
#else
    *jpeg = 0;
#endif
}
