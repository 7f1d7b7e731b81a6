/*
 * test_image.c -- PNG / JPEG decoding (image.h), PIL's conversions and bilinear resize and torchvision's centre crop
 * against references made by PIL 9.4 / torchvision 0.14 (tests/data/images/make_reference.py), every kind of bad
 * file, and the ImageFolder listing (image_folder.h): its order, classes, and the bad trees (an empty class folder,
 * a symbolic link loop, undecodable files with and without data.skip_bad_files), and data.cache (memory, none, and
 * disk: its file written, read, invalidated, damaged and unwritable). Unit: no training run.
 */
#define _DEFAULT_SOURCE /* symlink */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "image.h"
#include "image_folder.h"
#include "support.h"

TestSuite(image, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 120);

#define REF TR_SOURCE_DIR "/tests/data/images/"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len + 1);
    cr_assert_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void load(const char *path, int channels, tr_image *im)
{
    size_t len;
    uint8_t *b = slurp(path, &len);
    tr_error err = {0};
    cr_assert_eq(tr_image_decode(b, len, path, channels, TR_IMAGE_DEFAULT_MAX_PIXELS, im, &err), TR_OK, "%s", err.msg);
    free(b);
}

/* A PNG of w x h pixels of `channels` (1, 2, 3, 4) in memory, from px, by libpng's simplified writer. */
static uint8_t *png_bytes(const uint8_t *px, int w, int h, int channels, size_t *len)
{
    png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w, .height = (png_uint_32)h};
    static const png_uint_32 fmt[] = {0, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
    im.format = fmt[channels];
    png_alloc_size_t n = 0;
    cr_assert(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL));
    uint8_t *b = malloc(n);
    cr_assert(png_image_write_to_memory(&im, b, &n, 0, px, 0, NULL), "%s", im.message);
    *len = n;
    return b;
}

static void expect_same(const tr_image *a, const tr_image *b, const char *what)
{
    cr_assert_eq(a->w, b->w, "%s: width", what);
    cr_assert_eq(a->h, b->h, "%s: height", what);
    cr_assert_eq(a->c, b->c, "%s: channels", what);
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)(a->w * a->h * a->c); i++) diff += a->px[i] != b->px[i];
    cr_expect_eq(diff, 0, "%s: %zu of %lld values differ from PIL's", what, diff, (long long)(a->w * a->h * a->c));
}

Test(image, png_round_trips_in_every_mode_and_converts_as_pil)
{
    uint8_t px[4 * 5 * 4];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37 + 11);
    tr_error err = {0};
    for (int c = 1; c <= 4; c++) {
        size_t len;
        uint8_t *b = png_bytes(px, 5, 4, c, &len);
        tr_image_info info;
        cr_assert_eq(tr_image_probe(b, len, "x.png", 100, &info, &err), TR_OK, "%s", err.msg);
        cr_expect_eq(info.w, 5);
        cr_expect_eq(info.h, 4);
        cr_expect_eq(info.channels, c);
        cr_expect_str_eq(info.format, "PNG");
        tr_image im;
        const int want = c == 2 ? 1 : c; /* gray + alpha is read as L */
        cr_assert_eq(tr_image_decode(b, len, "x.png", want, 100, &im, &err), TR_OK, "%s", err.msg);
        for (int i = 0; i < 20; i++)
            for (int k = 0; k < want; k++) cr_expect_eq(im.px[i * want + k], px[i * c + k], "c %d px %d.%d", c, i, k);
        tr_image_free(&im);
        /* gray to RGB repeats; RGB(A) to RGBA keeps or adds alpha */
        cr_assert_eq(tr_image_decode(b, len, "x.png", 4, 100, &im, &err), TR_OK, "%s", err.msg);
        for (int i = 0; i < 20; i++) {
            const uint8_t *p = px + i * c;
            cr_expect_eq(im.px[4 * i + 0], p[0]);
            cr_expect_eq(im.px[4 * i + 1], c >= 3 ? p[1] : p[0]);
            cr_expect_eq(im.px[4 * i + 3], c == 2 ? p[1] : c == 4 ? p[3] : 255);
        }
        tr_image_free(&im);
        free(b);
    }
    /* RGB to L: PIL's convert("L"), from its own output */
    tr_image rgb, l, ref;
    load(REF "in_rgb.png", 3, &rgb);
    load(REF "in_rgb.png", 1, &l);
    load(REF "l_of_rgb.png", 1, &ref);
    expect_same(&l, &ref, "convert L");
    tr_image_free(&rgb);
    tr_image_free(&l);
    tr_image_free(&ref);
}

Test(image, resize_and_center_crop_match_torchvision_bit_for_bit)
{
    tr_image rgb, gray, out, tmp, ref;
    tr_error err = {0};
    load(REF "in_rgb.png", 3, &rgb);
    load(REF "in_gray.png", 1, &gray);
    cr_assert_eq(rgb.w, 37);
    cr_assert_eq(rgb.h, 23);
    const struct {
        const char *ref;
        int64_t h, w;
    } cases[] = {{"rgb_down.png", 11, 16}, {"rgb_up.png", 50, 61}, {"rgb_wide.png", 23, 80}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert_eq(tr_image_resize(&rgb, cases[i].h, cases[i].w, &out, &err), TR_OK, "%s", err.msg);
        char path[512];
        snprintf(path, sizeof path, REF "%s", cases[i].ref);
        load(path, 3, &ref);
        expect_same(&out, &ref, cases[i].ref);
        tr_image_free(&out);
        tr_image_free(&ref);
    }
    /* Resize(20) + CenterCrop((17, 19)): shorter side 23 -> 20, longer int(20 * 37 / 23) = 32 */
    int64_t rh, rw;
    tr_image_shorter_side_size(23, 37, 20, &rh, &rw);
    cr_expect_eq(rh, 20);
    cr_expect_eq(rw, 32);
    cr_assert_eq(tr_image_resize(&rgb, rh, rw, &tmp, &err), TR_OK);
    cr_assert_eq(tr_image_center_crop(&tmp, 17, 19, &out, &err), TR_OK);
    load(REF "rgb_short.png", 3, &ref);
    expect_same(&out, &ref, "Resize(20) + CenterCrop((17, 19))");
    tr_image_free(&tmp);
    tr_image_free(&out);
    tr_image_free(&ref);
    tr_image_shorter_side_size(23, 37, 9, &rh, &rw);
    cr_assert_eq(tr_image_resize(&gray, rh, rw, &tmp, &err), TR_OK);
    cr_assert_eq(tr_image_center_crop(&tmp, 9, 9, &out, &err), TR_OK);
    load(REF "gray_short.png", 1, &ref);
    expect_same(&out, &ref, "Resize(9) + CenterCrop(9)");
    tr_image_free(&tmp);
    tr_image_free(&out);
    tr_image_free(&ref);
    /* a crop larger than the image pads with black as torchvision does */
    cr_assert_eq(tr_image_center_crop(&gray, 30, 40, &out, &err), TR_OK);
    load(REF "gray_pad.png", 1, &ref);
    expect_same(&out, &ref, "CenterCrop((30, 40)) of 23 x 37");
    tr_image_free(&out);
    tr_image_free(&ref);
    tr_image_free(&rgb);
    tr_image_free(&gray);
}

/* A PNG chunk's CRC after its bytes changed: CRC-32 (zlib's) over type and data. */
static void fix_crc(uint8_t *chunk_len_at, uint32_t data_len)
{
    const uLong c = crc32(0, chunk_len_at + 4, 4 + data_len);
    uint8_t *p = chunk_len_at + 8 + data_len;
    p[0] = (uint8_t)(c >> 24), p[1] = (uint8_t)(c >> 16), p[2] = (uint8_t)(c >> 8), p[3] = (uint8_t)c;
}

static void expect_refused(const uint8_t *b, size_t len, const char *name, const char *needle)
{
    tr_error err = {0};
    tr_image im;
    cr_expect_eq(tr_image_decode(b, len, name, 3, TR_IMAGE_DEFAULT_MAX_PIXELS, &im, &err), TR_E_RUNTIME, "%s decoded",
                 name);
    cr_expect_null(im.px);
    cr_expect(strstr(err.msg, name), "the message names the file: %s", err.msg);
    cr_expect(strstr(err.msg, needle), "'%s' not in: %s", needle, err.msg);
}

Test(image, bad_files_are_refused_naming_the_file)
{
    uint8_t px[16 * 16 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 7);
    size_t len;
    uint8_t *png = png_bytes(px, 16, 16, 3, &len);
    /* truncated anywhere: in the signature, the header, the pixel data */
    const size_t cuts[] = {5, 20, 40, len / 2, len - 13};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        tr_error err = {0};
        tr_image im;
        cr_expect_eq(tr_image_decode(png, cuts[i], "cut.png", 3, 1000, &im, &err), TR_E_RUNTIME, "cut at %zu", cuts[i]);
        cr_expect(strstr(err.msg, "cut.png"), "%s", err.msg);
    }
    expect_refused(png, len / 2, "half.png", "truncated");
    /* a corrupt byte in the pixel data: the IDAT chunk's CRC no longer holds */
    uint8_t *bad = malloc(len);
    memcpy(bad, png, len);
    bad[len - 20] ^= 0x55;
    expect_refused(bad, len, "flipped.png", "corrupt");
    /* a header claiming 100000 x 100000 pixels (its CRC fixed so that only the size is wrong): refused from the
     * header, before anything of that size is allocated */
    memcpy(bad, png, len);
    const uint8_t big[4] = {0x00, 0x01, 0x86, 0xa0}; /* 100000 */
    memcpy(bad + 16, big, 4);
    memcpy(bad + 20, big, 4);
    fix_crc(bad + 8, 13);
    expect_refused(bad, len, "huge.png", "100000 x 100000");
    tr_error err = {0};
    tr_image_info info;
    cr_expect_eq(tr_image_probe(bad, len, "huge.png", TR_IMAGE_DEFAULT_MAX_PIXELS, &info, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "refused before decoding"), "%s", err.msg);
    free(bad);
    /* not an image at all, and an empty file */
    expect_refused((const uint8_t *)"hello, world\n", 13, "notes.png", "not a PNG or JPEG");
    expect_refused((const uint8_t *)"", 0, "empty.png", "empty file");
    free(png);

    /* JPEG: a real one (TurboJPEG), truncated, and with a 60000 x 60000 frame header */
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long jlen = 0;
    cr_assert_eq(tjCompress2(tj, px, 16, 0, 16, TJPF_RGB, &jpg, &jlen, TJSAMP_420, 90, 0), 0);
    tjDestroy(tj);
    tr_image im;
    cr_assert_eq(tr_image_decode(jpg, jlen, "ok.jpg", 3, 1000, &im, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(im.w, 16);
    tr_image_free(&im);
    expect_refused(jpg, jlen / 2, "half.jpg", "half.jpg");
    expect_refused(jpg, 40, "head.jpg", "corrupt or truncated JPEG");
    size_t sof = 0;
    for (size_t i = 2; i + 9 < jlen && !sof; i++)
        if (jpg[i] == 0xff && jpg[i + 1] == 0xc0) sof = i;
    cr_assert(sof, "no SOF0 marker");
    jpg[sof + 5] = 0xea, jpg[sof + 6] = 0x60; /* height 60000 */
    jpg[sof + 7] = 0xea, jpg[sof + 8] = 0x60; /* width 60000 */
    expect_refused(jpg, jlen, "huge.jpg", "60000 x 60000");
    tjFree(jpg);
}

/* ---------------------------------------------------------------------------------------------- folders */

static void mkdirs(const char *rel)
{
    char path[600], *p;
    snprintf(path, sizeof path, "%s/%s", support_tmpdir, rel);
    for (p = path + strlen(support_tmpdir) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    mkdir(path, 0755);
}

/* A 4 x 3 gray PNG whose pixels are all `v`, at support_tmpdir/rel. */
static void put_png(const char *rel, uint8_t v)
{
    uint8_t px[12];
    memset(px, v, sizeof px);
    size_t len;
    uint8_t *b = png_bytes(px, 4, 3, 1, &len);
    spit(support_path(rel), b, len);
    free(b);
}

static void folder_config(tr_config *cfg, const char *const *extra)
{
    tr_error err = {0};
    tr_config_defaults(cfg);
    char kv[600];
    snprintf(kv, sizeof kv, "data.root=%s", support_tmpdir);
    const char *const base[] = {"data.format=image_folder", "data.image_mode=L", "data.val_size=0", NULL};
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    for (int i = 0; base[i]; i++) cr_assert_eq(tr_config_override(cfg, base[i], &err), TR_OK, "%s", err.msg);
    for (int i = 0; extra && extra[i]; i++) cr_assert_eq(tr_config_override(cfg, extra[i], &err), TR_OK, "%s", err.msg);
}

static int setup(const char *const *extra, tr_dataset *tr, tr_dataset *va, tr_dataset *te, tr_error *err)
{
    tr_config cfg;
    folder_config(&cfg, extra);
    return tr_image_folder_setup(&cfg, tr, va, te, err);
}

static void free3(tr_dataset *a, tr_dataset *b, tr_dataset *c)
{
    tr_dataset_free(a);
    tr_dataset_free(b);
    tr_dataset_free(c);
}

Test(image, folder_lists_files_in_imagefolder_order)
{
    /* sorted(os.walk(root/CLASS, followlinks=True)) sorts the directories by path: "a" < "a/sub" < "a/sub-1" <
     * "a/sub/deep" ('-' sorts before '/'); files sorted in each; names by extension, in any case */
    mkdirs("r/b");
    mkdirs("r/a/sub/deep");
    mkdirs("r/a/sub-1");
    put_png("r/b/x.png", 1);
    put_png("r/a/z.png", 2);
    put_png("r/a/sub/y.PNG", 3);
    put_png("r/a/sub-1/w.png", 4);
    put_png("r/a/sub/deep/v.png", 5);
    spit(support_path("r/a/notes.txt"), "not an image", 12); /* ignored, as ImageFolder ignores it */
    const char *const extra[] = {"data.train_root=r", NULL};
    tr_dataset tr, va, te;
    tr_error err = {0};
    cr_assert_eq(setup(extra, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    const tr_image_set *s = tr.images;
    cr_assert_not_null(s);
    cr_assert_eq(s->n_classes, 2);
    cr_expect_str_eq(s->classes[0], "a");
    cr_expect_str_eq(s->classes[1], "b");
    const char *want[] = {"a/z.png", "a/sub/y.PNG", "a/sub-1/w.png", "a/sub/deep/v.png", "b/x.png"};
    const int64_t labels[] = {0, 0, 0, 0, 1};
    cr_assert_eq(tr.n, 5);
    for (int i = 0; i < 5; i++) {
        cr_expect_str_eq(s->names + s->name_off[i], want[i]);
        cr_expect_eq(tr.y[i], labels[i]);
    }
    cr_expect_eq(tr.c, 1);
    cr_expect_eq(tr.h, 3);
    cr_expect_eq(tr.w, 4);
    /* samples decode to (v / 255 - mean) / std, the IDX reader's arithmetic */
    float x[5 * 12];
    int64_t y[5];
    const int64_t idx[] = {4, 0, 1, 2, 3};
    tr_image_buf buf = {0};
    cr_assert_eq(tr_image_gather(&tr, idx, 5, NULL, 0, 0, x, y, &buf, &err), TR_OK, "%s", err.msg);
    const float m = 0.2860f, sd = 0.3530f;
    cr_expect_eq(x[0], ((float)1 / 255.0f - m) / sd);
    cr_expect_eq(x[12 + 5], ((float)2 / 255.0f - m) / sd);
    cr_expect_eq(x[4 * 12 + 11], ((float)5 / 255.0f - m) / sd); /* sample 3, a/sub/deep/v.png */
    cr_expect_eq(y[0], 1);
    tr_image_buf_free(&buf);
    char *json = tr_image_classes_json(s);
    cr_expect_str_eq(json, "{\"classes\": [\"a\", \"b\"]}\n");
    free(json);
    free3(&tr, &va, &te);
}

Test(image, bad_trees_are_refused_or_skipped_and_counted)
{
    tr_dataset tr, va, te;
    tr_error err = {0};
    /* an empty class folder */
    mkdirs("e/a");
    mkdirs("e/empty");
    put_png("e/a/1.png", 9);
    const char *const e1[] = {"data.train_root=e", NULL};
    cr_expect_eq(setup(e1, &tr, &va, &te, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "/e/empty: an empty class folder"), "%s", err.msg);
    free3(&tr, &va, &te);
    const char *const e2[] = {"data.train_root=e", "data.skip_bad_files=true", NULL};
    cr_assert_eq(setup(e2, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(tr.images->n_classes, 2, "the empty class keeps its index");
    cr_expect_eq(tr.n, 1);
    cr_expect_eq(tr.images->skipped, 1);
    cr_expect(strstr(tr.images->skip_note, "empty class folder"), "%s", tr.images->skip_note);
    free3(&tr, &va, &te);

    /* a symbolic link loop: a/loop -> the class folder itself */
    mkdirs("l/a");
    put_png("l/a/1.png", 9);
    cr_assert_eq(symlink(support_path("l/a"), support_path("l/a/loop")), 0);
    const char *const l1[] = {"data.train_root=l", NULL};
    cr_expect_eq(setup(l1, &tr, &va, &te, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "/l/a/loop: a symbolic link loop"), "%s", err.msg);
    free3(&tr, &va, &te);
    const char *const l2[] = {"data.train_root=l", "data.skip_bad_files=true", NULL};
    cr_assert_eq(setup(l2, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(tr.n, 1);
    cr_expect_eq(tr.images->skipped, 1);
    free3(&tr, &va, &te);

    /* files that do not decode: found when gathered (naming the file), or skipped at load with skip_bad_files */
    mkdirs("b/a");
    put_png("b/a/1.png", 9);
    spit(support_path("b/a/2.png"), "text, not a PNG", 15);
    spit(support_path("b/a/3.jpg"), "\xff\xd8\xff\xe0", 4);
    cr_assert_eq(symlink("4.png", support_path("b/a/4.png")), 0); /* a link to itself: ELOOP on open */
    put_png("b/a/5.png", 7);
    const char *const b1[] = {"data.train_root=b", NULL};
    cr_assert_eq(setup(b1, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr.n, 5);
    float x[12];
    int64_t y;
    tr_image_buf buf = {0};
    const char *why[] = {NULL, "2.png: not a PNG or JPEG", "3.jpg: corrupt or truncated JPEG", "4.png: cannot open",
                         NULL};
    for (int64_t i = 0; i < 5; i++) {
        const int rc = tr_image_gather(&tr, &i, 1, NULL, 0, 0, x, &y, &buf, &err);
        if (!why[i]) cr_expect_eq(rc, TR_OK, "%s", err.msg);
        else {
            cr_expect_eq(rc, TR_E_RUNTIME);
            cr_expect(strstr(err.msg, why[i]), "'%s' not in: %s", why[i], err.msg);
        }
    }
    tr_image_buf_free(&buf);
    free3(&tr, &va, &te);
    const char *const b2[] = {"data.train_root=b", "data.skip_bad_files=true", NULL};
    cr_assert_eq(setup(b2, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(tr.n, 2);
    cr_expect_eq(tr.images->skipped, 3);
    cr_expect_str_eq(tr.images->names + tr.images->name_off[1], "a/5.png");
    free3(&tr, &va, &te);

    /* an image of another size without data.image_size; with it, resized */
    mkdirs("s/a");
    put_png("s/a/1.png", 9);
    uint8_t px[36] = {0};
    size_t len;
    uint8_t *b = png_bytes(px, 6, 6, 1, &len);
    spit(support_path("s/a/2.png"), b, len);
    free(b);
    const char *const s1[] = {"data.train_root=s", NULL};
    cr_assert_eq(setup(s1, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    const int64_t two = 1;
    cr_expect_eq(tr_image_gather(&tr, &two, 1, NULL, 0, 0, x, &y, &buf, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "2.png: 6 x 6 pixels (H x W), but the data set's images are 3 x 4"), "%s", err.msg);
    free3(&tr, &va, &te);
    const char *const s2[] = {"data.train_root=s", "data.image_size=[3, 4]", NULL};
    cr_assert_eq(setup(s2, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(tr_image_gather(&tr, &two, 1, NULL, 0, 0, x, &y, &buf, &err), TR_OK, "%s", err.msg);
    tr_image_buf_free(&buf);
    free3(&tr, &va, &te);

    /* a validation folder with a class the training folder does not have */
    mkdirs("v/zebra");
    put_png("v/zebra/1.png", 3);
    const char *const v1[] = {"data.train_root=b", "data.val_root=v", NULL};
    cr_expect_eq(setup(v1, &tr, &va, &te, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "/v/zebra: a class folder the training data"), "%s", err.msg);
    free3(&tr, &va, &te);
    /* and a root that is not there: a config error naming the key */
    const char *const m1[] = {"data.train_root=missing", NULL};
    cr_expect_eq(setup(m1, &tr, &va, &te, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "data.train_root: "), "%s", err.msg);
    free3(&tr, &va, &te);
}

Test(image, val_size_carves_as_tr_dataset_split)
{
    /* 12 files, one class each of 3; the split by file names equals tr_dataset_split on the labels */
    char rel[64];
    for (int i = 0; i < 12; i++) {
        snprintf(rel, sizeof rel, "t/c%d", i % 3);
        mkdirs(rel);
        snprintf(rel, sizeof rel, "t/c%d/%02d.png", i % 3, i);
        put_png(rel, (uint8_t)(10 * i));
    }
    const char *const extra[] = {"data.train_root=t", "data.val_size=5", "seed=7", NULL};
    tr_dataset tr, va, te;
    tr_error err = {0};
    cr_assert_eq(setup(extra, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr.n, 7);
    cr_assert_eq(va.n, 5);
    /* the same carve of an in-memory set whose x holds each sample's list position */
    tr_dataset mem = {.n = 12, .c = 1, .h = 1, .w = 1, .num_classes = 3}, mval;
    mem.x = malloc(12 * sizeof *mem.x);
    mem.y = malloc(12 * sizeof *mem.y);
    for (int i = 0; i < 12; i++) mem.x[i] = (float)i, mem.y[i] = i / 4;
    cr_assert_eq(tr_dataset_split(&mem, 5, 7, &mval, &err), TR_OK);
    /* listing order: c0/00 c0/03 c0/06 c0/09 c1/01 ...: position p holds file (p % 4) * 3 + p / 4 */
    for (int64_t k = 0; k < 5; k++) {
        const int p = (int)mval.x[k];
        snprintf(rel, sizeof rel, "c%d/%02d.png", p / 4, (p % 4) * 3 + p / 4);
        cr_expect_str_eq(va.images->names + va.images->name_off[k], rel, "val %lld", (long long)k);
        cr_expect_eq(va.y[k], mval.y[k]);
    }
    for (int64_t k = 0; k < 7; k++) {
        const int p = (int)mem.x[k];
        snprintf(rel, sizeof rel, "c%d/%02d.png", p / 4, (p % 4) * 3 + p / 4);
        cr_expect_str_eq(tr.images->names + tr.images->name_off[k], rel, "train %lld", (long long)k);
    }
    tr_dataset_free(&mem);
    tr_dataset_free(&mval);
    free3(&tr, &va, &te);
}

/* Every sample of `tr` gathered in listing order into x [n, 12] (4 x 3 gray images); the gather's status. */
static int gather_all(const tr_dataset *tr, float *x, int64_t *y, tr_error *err)
{
    int64_t idx[8];
    for (int64_t i = 0; i < tr->n; i++) idx[i] = i;
    tr_image_buf buf = {0};
    const int rc = tr_image_gather(tr, idx, tr->n, NULL, 0, 0, x, y, &buf, err);
    tr_image_buf_free(&buf);
    return rc;
}

Test(image, data_cache_keeps_decoded_samples_and_reads_no_file_again)
{
    mkdirs("k/a");
    mkdirs("k/b");
    put_png("k/a/1.png", 10);
    put_png("k/a/2.png", 20);
    put_png("k/b/3.png", 30);
    tr_dataset tr, va, te;
    tr_error err = {0};
    float x1[3 * 12], x2[3 * 12];
    int64_t y1[3], y2[3];
    /* data.cache: memory and auto (3 samples of 12 bytes: far below a quarter of any machine's memory) */
    const char *const modes[] = {"data.cache=memory", "data.cache=auto"};
    for (int m = 0; m < 2; m++) {
        put_png("k/a/1.png", 10);
        put_png("k/a/2.png", 20);
        const char *const extra[] = {"data.train_root=k", modes[m], NULL};
        cr_assert_eq(setup(extra, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
        cr_assert_not_null(tr.images->cache, "%s", modes[m]);
        cr_expect_eq(tr.images->cache_bytes, 3 * 12, "%s", modes[m]);
        cr_assert_eq(gather_all(&tr, x1, y1, &err), TR_OK, "%s", err.msg);
        cr_expect_eq(x1[12], ((float)20 / 255.0f - 0.2860f) / 0.3530f);
        /* the files change or go away: the second epoch's samples are the first's, read from the cache */
        put_png("k/a/1.png", 99);
        cr_assert_eq(unlink(support_path("k/a/2.png")), 0);
        cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s: %s", modes[m], err.msg);
        cr_expect_eq(memcmp(x1, x2, sizeof x1), 0, "%s: a cached sample differs from its first decode", modes[m]);
        cr_expect_eq(memcmp(y1, y2, sizeof y1), 0);
        free3(&tr, &va, &te);
    }
    /* data.cache: none decodes every time: the changed file is read again, the missing one is an error naming it */
    put_png("k/a/1.png", 10);
    put_png("k/a/2.png", 20);
    const char *const none[] = {"data.train_root=k", "data.cache=none", NULL};
    cr_assert_eq(setup(none, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    cr_expect_null(tr.images->cache);
    cr_expect_eq(tr.images->cache_bytes, 0);
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(memcmp(x1, x2, sizeof x1), 0, "the cache changes when files are read, never the samples");
    put_png("k/a/1.png", 99);
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(x2[0], ((float)99 / 255.0f - 0.2860f) / 0.3530f);
    cr_assert_eq(unlink(support_path("k/a/2.png")), 0);
    cr_expect_eq(gather_all(&tr, x2, y2, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "k/a/2.png: cannot open"), "%s", err.msg);
    free3(&tr, &va, &te);
    /* a file that fails to decode is not cached: the error comes back every time */
    spit(support_path("k/a/2.png"), "text, not a PNG", 15);
    const char *const mem[] = {"data.train_root=k", "data.cache=memory", NULL};
    cr_assert_eq(setup(mem, &tr, &va, &te, &err), TR_OK, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
        cr_expect_eq(gather_all(&tr, x2, y2, &err), TR_E_RUNTIME);
        cr_expect(strstr(err.msg, "2.png: not a PNG or JPEG"), "%s", err.msg);
    }
    free3(&tr, &va, &te);
}

/* data.cache: disk, set up on folder k with `dir_kv` (data.cache_dir=...); the note set-up gave, and its warn flag. */
static const char *disk_setup_note(const char *dir_kv, tr_dataset *tr, tr_dataset *va, tr_dataset *te, int *warn)
{
    tr_error err = {0};
    const char *const extra[] = {"data.train_root=k", "data.cache=disk", dir_kv, NULL};
    cr_assert_eq(setup(extra, tr, va, te, &err), TR_OK, "%s", err.msg);
    cr_assert_not_null(tr->images->cache);
    *warn = -1;
    const char *note = tr_image_disk_note(tr->images, warn);
    cr_assert_not_null(note);
    return note;
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Rewrite `path` through edit(bytes, &len). */
static void edit_file(const char *path, void (*edit)(uint8_t *b, size_t *len))
{
    size_t len;
    uint8_t *b = slurp(path, &len);
    edit(b, &len);
    spit(path, b, len);
    free(b);
}
static void flip_payload_byte(uint8_t *b, size_t *len) { b[*len - 5] ^= 0x40; }
static void truncate_by_one(uint8_t *b, size_t *len) { (void)b, *len -= 1; }
static void wrong_magic(uint8_t *b, size_t *len) { (void)len, b[0] = 'X'; }
static void flip_header_n(uint8_t *b, size_t *len) { (void)len, b[24] ^= 1; }
static void cut_in_header(uint8_t *b, size_t *len) { (void)b, *len = 40; }

Test(image, data_cache_disk_keeps_decoded_samples_across_runs_and_never_trusts_the_file)
{
    mkdirs("k/a");
    mkdirs("k/b");
    put_png("k/a/1.png", 10);
    put_png("k/a/2.png", 20);
    put_png("k/b/3.png", 30);
    char dir_kv[700];
    snprintf(dir_kv, sizeof dir_kv, "data.cache_dir=%s", support_path("dc/decoded"));
    tr_dataset tr, va, te;
    tr_error err = {0};
    float x1[3 * 12], x2[3 * 12];
    int64_t y1[3], y2[3];
    int warn;
    char out[4096], path[2048];

    /* 1. no file yet: decoded from the files; the file is written when the last sample is kept, 64 + 3 x 12 bytes */
    const char *note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
    cr_expect_eq(warn, 0, "%s", note);
    cr_expect(strstr(note, "no disk cache yet: written to "), "%s", note);
    snprintf(path, sizeof path, "%s", tr_image_disk_path(tr.images));
    cr_expect(strstr(path, support_path("dc/decoded/")) == path, "%s", path);
    cr_expect_eq(strlen(path), strlen(support_path("dc/decoded/")) + 32 + 3, "%s: KEY(32 hex).u8", path);
    cr_expect(strstr(note, path), "the note names the file: %s", note);
    cr_expect_eq(file_size(path), -1);
    struct stat st;
    cr_assert_eq(stat(support_path("dc/decoded"), &st), 0, "the folder is made at set-up");
    cr_expect_eq(st.st_mode & 0777, 0700);
    cr_expect_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 0, "nothing written before every decode");
    cr_assert_eq(gather_all(&tr, x1, y1, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(x1[12], ((float)20 / 255.0f - 0.2860f) / 0.3530f);
    cr_expect_eq(file_size(path), 64 + 3 * 12);
    cr_assert_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 1);
    cr_expect_eq(warn, 0, "%s", out);
    cr_expect(strstr(out, "3 decoded images written to ") && strstr(out, path), "%s", out);
    cr_expect_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 0, "said once");
    int64_t r, w;
    tr_image_disk_counts(tr.images, &r, &w);
    cr_expect_eq(r, 0);
    cr_expect_eq(w, 3);
    size_t len;
    uint8_t *file = slurp(path, &len);
    cr_expect_eq(memcmp(file, "TRDC", 4), 0);
    cr_expect_eq(file[4], TR_IMAGE_DISK_VERSION);
    cr_expect_eq(file[24], 3, "n");
    cr_expect_eq(file[32], 3, "h");
    cr_expect_eq(file[36], 4, "w");
    cr_expect_eq(file[40], 1, "c");
    cr_expect_eq(file[64 + 12], 20, "sample 1's first pixel");
    free(file);
    free3(&tr, &va, &te);

    /* 2. the next set-up reads the file: no image file is opened again (they may all be gone), the same samples */
    note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
    cr_expect_eq(warn, 0, "%s", note);
    cr_expect(strstr(note, "3 decoded images read from the disk cache ") && strstr(note, path), "%s", note);
    cr_expect_str_eq(tr_image_disk_path(tr.images), path, "the same key");
    tr_image_disk_counts(tr.images, &r, &w);
    cr_expect_eq(r, 3);
    cr_expect_eq(w, 0);
    cr_assert_eq(unlink(support_path("k/a/1.png")), 0);
    cr_assert_eq(unlink(support_path("k/a/2.png")), 0);
    cr_assert_eq(unlink(support_path("k/b/3.png")), 0);
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "a sample read a file: %s", err.msg);
    cr_expect_eq(memcmp(x1, x2, sizeof x1), 0, "a sample from the disk cache differs from its decode");
    cr_expect_eq(memcmp(y1, y2, sizeof y1), 0);
    cr_expect_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 0, "read, not written again");
    free3(&tr, &va, &te);

    /* 3. the files made again with the same pixels (one with an mtime that cannot be the first one's): another key,
     * no reuse */
    put_png("k/a/1.png", 10);
    put_png("k/a/2.png", 20);
    put_png("k/b/3.png", 30);
    const struct timespec t2[2] = {{.tv_sec = 2000000000}, {.tv_sec = 2000000000}};
    cr_assert_eq(utimensat(AT_FDCWD, support_path("k/a/1.png"), t2, 0), 0);
    note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
    cr_expect(strstr(note, "no disk cache yet"), "%s", note);
    cr_expect_str_neq(tr_image_disk_path(tr.images), path);
    snprintf(path, sizeof path, "%s", tr_image_disk_path(tr.images));
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(memcmp(x1, x2, sizeof x1), 0);
    free3(&tr, &va, &te);
    /* one file's mtime changed (same size, same inode), then one file's size: a new key each time */
    const char *before = strdup(path);
    struct timespec times[2] = {{.tv_sec = 1000000000, .tv_nsec = 5}, {.tv_sec = 1000000000, .tv_nsec = 5}};
    cr_assert_eq(utimensat(AT_FDCWD, support_path("k/b/3.png"), times, 0), 0);
    note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
    cr_expect(strstr(note, "no disk cache yet"), "mtime: %s", note);
    cr_expect_str_neq(tr_image_disk_path(tr.images), before);
    free3(&tr, &va, &te);
    spit(support_path("k/a/2.png"), "x", 1); /* another size (and not an image: not read here, 1.png gives the size) */
    note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
    cr_expect(strstr(note, "no disk cache yet"), "size: %s", note);
    cr_expect_str_neq(tr_image_disk_path(tr.images), before);
    free3(&tr, &va, &te);
    put_png("k/a/2.png", 20);
    free((void *)before);

    /* 4. a damaged file is named with why, ignored (the samples are decoded from the images, the same), replaced */
    note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg); /* writes the good file */
    snprintf(path, sizeof path, "%s", tr_image_disk_path(tr.images));
    free3(&tr, &va, &te);
    const struct {
        void (*edit)(uint8_t *, size_t *);
        const char *why;
    } bad[] = {{flip_payload_byte, "the payload's checksum"},
               {truncate_by_one, "99 bytes, but the header says 100"},
               {wrong_magic, "wrong magic 58 52 44 43 at byte offset 0"},
               {flip_header_n, "the header's checksum"},
               {cut_in_header, "truncated: 40 bytes, shorter than the 64-byte header"}};
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        cr_assert_eq(file_size(path), 100);
        edit_file(path, bad[b].edit);
        note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
        cr_expect_eq(warn, 1, "%s", note);
        cr_expect(strstr(note, path) == note, "names the file first: %s", note);
        cr_expect(strstr(note, bad[b].why), "'%s' not in: %s", bad[b].why, note);
        cr_expect(strstr(note, "ignored"), "%s", note);
        tr_image_disk_counts(tr.images, &r, &w);
        cr_expect_eq(r, 0);
        cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg);
        cr_expect_eq(memcmp(x1, x2, sizeof x1), 0, "%s: the samples differ", bad[b].why);
        cr_expect_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 1, "%s: not rewritten", bad[b].why);
        cr_expect_eq(warn, 0, "%s", out);
        free3(&tr, &va, &te);
        note = disk_setup_note(dir_kv, &tr, &va, &te, &warn);
        cr_expect(strstr(note, "3 decoded images read from the disk cache "), "%s: %s", bad[b].why, note);
        free3(&tr, &va, &te);
    }

    /* 5. a cache folder that cannot be made: a warning naming it, the set cached in memory as before */
    spit(support_path("plain"), "a file", 6);
    char ro_kv[700];
    snprintf(ro_kv, sizeof ro_kv, "data.cache_dir=%s", support_path("plain/decoded"));
    note = disk_setup_note(ro_kv, &tr, &va, &te, &warn);
    cr_expect_eq(warn, 1, "%s", note);
    cr_expect(strstr(note, support_path("plain/decoded")) && strstr(note, "Not a directory") &&
                  strstr(note, "kept in memory for this run only"),
              "%s", note);
    cr_expect_str_eq(tr_image_disk_path(tr.images), "");
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(memcmp(x1, x2, sizeof x1), 0);
    cr_expect_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 0, "no file, no outcome");
    free3(&tr, &va, &te);
    /* ... and one that goes away before the write: the outcome is a warning naming the file, the samples are fine */
    snprintf(ro_kv, sizeof ro_kv, "data.cache_dir=%s", support_path("late/decoded"));
    put_png("k/b/3.png", 31); /* a new key: no file to read */
    note = disk_setup_note(ro_kv, &tr, &va, &te, &warn);
    cr_expect_eq(warn, 0, "%s", note);
    snprintf(path, sizeof path, "%s", tr_image_disk_path(tr.images));
    cr_assert_eq(rmdir(support_path("late/decoded")), 0);
    spit(support_path("late/decoded"), "in the way", 10);
    cr_assert_eq(gather_all(&tr, x2, y2, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(x2[24], ((float)31 / 255.0f - 0.2860f) / 0.3530f);
    cr_assert_eq(tr_image_disk_outcome(tr.images, out, sizeof out, &warn), 1);
    cr_expect_eq(warn, 1, "%s", out);
    cr_expect(strstr(out, "cannot write ") && strstr(out, path) && strstr(out, "the run goes on"), "%s", out);
    tr_image_disk_counts(tr.images, &r, &w);
    cr_expect_eq(w, 0);
    free3(&tr, &va, &te);

    /* 6. no data.cache_dir: $XDG_CACHE_HOME/trainrun/decoded, else $HOME/.cache/trainrun/decoded */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *xdg0 = xdg ? strdup(xdg) : NULL, *home0 = home ? strdup(home) : NULL;
    setenv("XDG_CACHE_HOME", support_path("xdg"), 1);
    note = disk_setup_note("data.cache_dir=", &tr, &va, &te, &warn);
    cr_expect(strstr(tr_image_disk_path(tr.images), support_path("xdg/trainrun/decoded/")) ==
                  tr_image_disk_path(tr.images),
              "%s", tr_image_disk_path(tr.images));
    free3(&tr, &va, &te);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", support_path("home"), 1);
    note = disk_setup_note("data.cache_dir=", &tr, &va, &te, &warn);
    cr_expect(strstr(tr_image_disk_path(tr.images), support_path("home/.cache/trainrun/decoded/")) ==
                  tr_image_disk_path(tr.images),
              "%s", tr_image_disk_path(tr.images));
    free3(&tr, &va, &te);
    if (xdg0) setenv("XDG_CACHE_HOME", xdg0, 1);
    if (home0) setenv("HOME", home0, 1);
    else unsetenv("HOME");
    free(xdg0);
    free(home0);
}
