/*
 * test_image.c -- PNG / JPEG decoding (image.h), PIL's conversions and bilinear resize and torchvision's centre crop
 * against references made by PIL 9.4 / torchvision 0.14 (tests/data/images/make_reference.py), every kind of bad
 * file, and the ImageFolder listing (image_folder.h): its order, classes, and the bad trees (an empty class folder,
 * a symbolic link loop, undecodable files with and without data.skip_bad_files), and data.cache. Unit: no training
 * run.
 */
#define _DEFAULT_SOURCE /* symlink */
#include <criterion/criterion.h>
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
