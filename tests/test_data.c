/*
 * test_data.c -- Criterion tests for data.h: the IDX reader (plain, gzip, errors, limit, real Fashion-MNIST),
 * normalisation, the epoch permutation, the validation split and gather.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "data.h"
#include "support.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* ---- temp dir fixture ---------------------------------------------------------------------------------------- */


/* ---- writing IDX files ------------------------------------------------------------------------------------- */

static void put_be32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/** Write raw bytes, plain or gzip-compressed. */
static void write_bytes(const char *path, const unsigned char *b, size_t len, bool gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert_not_null(f);
        if (len)
            cr_assert_eq(gzwrite(f, b, (unsigned)len), (int)len);
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(b, 1, len, f), len);
        cr_assert_eq(fclose(f), 0);
    }
}

/**
 * Write an IDX file: magic, header dims, then `len` data bytes (which may be fewer than the dims call for, to make
 * truncated files). `hdr_len` < the full header truncates inside the header.
 */
static void write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims, const unsigned char *data,
                      size_t len, bool gz, size_t hdr_len)
{
    unsigned char *b = malloc(4 + 4 * (size_t)ndims + len);
    put_be32(b, magic);
    for (int i = 0; i < ndims; i++)
        put_be32(b + 4 + 4 * i, dims[i]);
    size_t full = 4 + 4 * (size_t)ndims;
    if (hdr_len < full) {
        write_bytes(path, b, hdr_len, gz);
    } else {
        memcpy(b + full, data, len);
        write_bytes(path, b, full + len, gz);
    }
    free(b);
}

#define FULL ((size_t)-1)

/* 3 images of 2x3 with known pixels, labels 3, 0, 7. */
static const unsigned char PIX[3 * 6] = {
    0, 51, 255, 102, 1, 254,
    255, 255, 0, 0, 51, 51,
    10, 20, 30, 40, 50, 60,
};
static const unsigned char LAB[3] = {3, 0, 7};

static void write_good(const char *img, const char *lab, bool gz)
{
    uint32_t di[3] = {3, 2, 3}, dl[1] = {3};
    write_idx(img, 0x803, di, 3, PIX, sizeof PIX, gz, FULL);
    write_idx(lab, 0x801, dl, 1, LAB, sizeof LAB, gz, FULL);
}

static void check_good(const tr_dataset *ds, int64_t n)
{
    cr_assert_eq(ds->n, n);
    cr_assert_eq(ds->c, 1);
    cr_assert_eq(ds->h, 2);
    cr_assert_eq(ds->w, 3);
    for (int64_t i = 0; i < n * 6; i++)
        cr_assert_eq(ds->x[i], (float)PIX[i] / 255.0f, "pixel %lld", (long long)i);
    cr_assert_eq(ds->x[0], 0.0f);
    cr_assert_eq(ds->x[1], 0.2f);  /* 51 / 255 */
    cr_assert_eq(ds->x[2], 1.0f);  /* 255 / 255 */
    cr_assert_eq(ds->x[3], 0.4f);  /* 102 / 255 */
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(ds->y[i], LAB[i]);
}

TestSuite(idx, .init = support_tmp_init, .fini = support_tmp_fini);

Test(idx, loads_plain)
{
    write_good(support_path("img"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_OK, "%s", err.msg);
    check_good(&ds, 3);
    cr_assert_eq(ds.num_classes, 8);
    tr_dataset_free(&ds);
    cr_assert_null(ds.x);
    cr_assert_eq(ds.n, 0);
}

Test(idx, loads_gzip_and_mixed)
{
    write_good(support_path("img.gz"), support_path("lab.gz"), true);
    write_good(support_path("img"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img.gz"), support_path("lab.gz"), 0, &ds, &err), TR_OK, "%s", err.msg);
    check_good(&ds, 3);
    cr_assert_eq(ds.num_classes, 8);
    tr_dataset_free(&ds);
    cr_assert_eq(tr_idx_load(support_path("img.gz"), support_path("lab"), 0, &ds, &err), TR_OK, "%s", err.msg);
    check_good(&ds, 3);
    tr_dataset_free(&ds);
}

Test(idx, limit_keeps_first_samples)
{
    write_good(support_path("img"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 2, &ds, &err), TR_OK, "%s", err.msg);
    check_good(&ds, 2);
    cr_assert_eq(ds.num_classes, 4); /* max of the kept labels 3, 0 */
    tr_dataset_free(&ds);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 100, &ds, &err), TR_OK, "%s", err.msg);
    check_good(&ds, 3);
    tr_dataset_free(&ds);
}

Test(idx, limit_reads_only_what_it_needs)
{
    /* header says 3 samples but only 1 is present: limit 1 succeeds, no limit fails */
    uint32_t di[3] = {3, 2, 3}, dl[1] = {3};
    write_idx(support_path("img"), 0x803, di, 3, PIX, 6, true, FULL);
    write_idx(support_path("lab"), 0x801, dl, 1, LAB, 1, false, FULL);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 1, &ds, &err), TR_OK, "%s", err.msg);
    check_good(&ds, 1);
    tr_dataset_free(&ds);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
}

Test(idx, truncated_image_data)
{
    uint32_t di[3] = {3, 2, 3}, dl[1] = {3};
    write_idx(support_path("short-img"), 0x803, di, 3, PIX, 10, false, FULL); /* 16 + 10 bytes, 16 + 18 expected */
    write_idx(support_path("lab"), 0x801, dl, 1, LAB, 3, false, FULL);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("short-img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_eq(err.code, TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, support_path("short-img")), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "truncated"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "expected 18 bytes of image data"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "through byte offset 34"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "file ends at byte offset 26"), "%s", err.msg);
    cr_assert_null(ds.x);
    cr_assert_eq(ds.n, 0);
}

Test(idx, truncated_gzip_stream)
{
    /* a complete gzip file of 16 + 600 bytes of data, cut in half: zlib reports the stream ending early */
    uint32_t di[3] = {100, 2, 3}, dl[1] = {100};
    unsigned char pix[600], lab[100];
    for (int i = 0; i < 600; i++)
        pix[i] = (unsigned char)((i * 7919u) >> 3);
    memset(lab, 1, sizeof lab);
    write_idx(support_path("img.gz"), 0x803, di, 3, pix, sizeof pix, true, FULL);
    write_idx(support_path("lab"), 0x801, dl, 1, lab, sizeof lab, false, FULL);
    FILE *f = fopen(support_path("img.gz"), "rb");
    unsigned char buf[4096];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_bytes(support_path("cut.gz"), buf, len / 2, false);

    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("cut.gz"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, support_path("cut.gz")), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "truncated"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "through byte offset 616"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "compressed stream ends early"), "%s", err.msg);
}

Test(idx, truncated_header)
{
    uint32_t di[3] = {3, 2, 3};
    write_idx(support_path("img"), 0x803, di, 3, NULL, 0, false, 10);
    write_good(support_path("x"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, support_path("img")), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "truncated header"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "expected 16 header bytes"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "byte offset 10"), "%s", err.msg);
}

Test(idx, truncated_labels)
{
    uint32_t di[3] = {3, 2, 3}, dl[1] = {3};
    write_idx(support_path("img"), 0x803, di, 3, PIX, sizeof PIX, false, FULL);
    write_idx(support_path("lab"), 0x801, dl, 1, LAB, 2, false, FULL);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, support_path("lab")), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "through byte offset 11"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "file ends at byte offset 10"), "%s", err.msg);
}

Test(idx, wrong_magic)
{
    uint32_t di[3] = {3, 2, 3};
    write_idx(support_path("bad-img"), 0x802, di, 3, PIX, sizeof PIX, false, FULL);
    write_good(support_path("x"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("bad-img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, support_path("bad-img")), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "wrong magic"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "0x00000802"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "offset 0"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "expected 0x00000803"), "%s", err.msg);
}

Test(idx, swapped_paths_are_named)
{
    write_good(support_path("img"), support_path("lab"), true);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("lab"), support_path("img"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "wrong magic number 0x00000801 at byte offset 0"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "swapped"), "%s", err.msg);
}

Test(idx, count_mismatch)
{
    uint32_t di[3] = {3, 2, 3}, dl[1] = {2};
    write_idx(support_path("img"), 0x803, di, 3, PIX, sizeof PIX, false, FULL);
    write_idx(support_path("lab"), 0x801, dl, 1, LAB, 2, false, FULL);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    char want[512];
    snprintf(want, sizeof want, "%s: image count 3 does not match label count 2 in %s", support_path("img"),
             support_path("lab"));
    cr_assert_str_eq(err.msg, want);
    /* a limit does not excuse inconsistent headers */
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 1, &ds, &err), TR_E_CONFIG);
}

Test(idx, bad_dims)
{
    write_good(support_path("x"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};

    uint32_t zero_rows[3] = {3, 0, 3};
    write_idx(support_path("img"), 0x803, zero_rows, 3, PIX, sizeof PIX, false, FULL);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "bad image size 0x3 at byte offset 8"), "%s", err.msg);

    uint32_t huge[3] = {3, 0xffffffffu, 0xffffffffu};
    write_idx(support_path("img"), 0x803, huge, 3, PIX, sizeof PIX, false, FULL);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "bad image size 4294967295x4294967295 at byte offset 8"), "%s", err.msg);

    uint32_t big[3] = {3, 4097, 4096};
    write_idx(support_path("img"), 0x803, big, 3, PIX, sizeof PIX, false, FULL);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "offset 8"), "%s", err.msg);

    uint32_t none[3] = {0, 2, 3}, dl[1] = {0};
    write_idx(support_path("img"), 0x803, none, 3, PIX, 0, false, FULL);
    write_idx(support_path("lab0"), 0x801, dl, 1, LAB, 0, false, FULL);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab0"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "image count is 0 at byte offset 4"), "%s", err.msg);
}

Test(idx, cannot_open)
{
    write_good(support_path("img"), support_path("lab"), false);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("nope"), support_path("lab"), 0, &ds, &err), TR_E_CONFIG);
    char want[512];
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", support_path("nope"));
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("nolab"), 0, &ds, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, support_path("nolab")), "%s", err.msg);
}

Test(idx, label_above_254_sets_num_classes)
{
    uint32_t di[3] = {2, 1, 1}, dl[1] = {2};
    unsigned char pix[2] = {0, 255}, lab[2] = {255, 4};
    write_idx(support_path("img"), 0x803, di, 3, pix, 2, false, FULL);
    write_idx(support_path("lab"), 0x801, dl, 1, lab, 2, false, FULL);
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(support_path("img"), support_path("lab"), 0, &ds, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(ds.num_classes, 256);
    cr_assert_eq(ds.y[0], 255);
    tr_dataset_free(&ds);
}

/* ---- real Fashion-MNIST -------------------------------------------------------------------------------------- */

Test(fashion_mnist, test_set)
{
    const char *img = FMNIST_DIR "/t10k-images-idx3-ubyte.gz", *lab = FMNIST_DIR "/t10k-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0 || access(lab, R_OK) != 0)
        support_skip("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(img, lab, 0, &ds, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(ds.n, 10000);
    cr_assert_eq(ds.c, 1);
    cr_assert_eq(ds.h, 28);
    cr_assert_eq(ds.w, 28);
    cr_assert_eq(ds.num_classes, 10);
    /* verified with python3 gzip: labels start 9 2 1 1 6 (Ankle boot, Pullover, Trouser, Trouser, Shirt);
     * image 0 has first nonzero pixel 3 at index 215, pixel 221 = 37, byte sum 33456 */
    int64_t first[5] = {9, 2, 1, 1, 6};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ds.y[i], first[i]);
    cr_assert_eq(ds.x[214], 0.0f);
    cr_assert_eq(ds.x[215], 3.0f / 255.0f);
    cr_assert_eq(ds.x[221], 37.0f / 255.0f);
    long sum = 0;
    for (int i = 0; i < 784; i++)
        sum += lrintf(ds.x[i] * 255.0f);
    cr_assert_eq(sum, 33456);
    tr_dataset_free(&ds);
}

Test(fashion_mnist, train_set_limit)
{
    const char *img = FMNIST_DIR "/train-images-idx3-ubyte.gz", *lab = FMNIST_DIR "/train-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0 || access(lab, R_OK) != 0)
        support_skip("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(img, lab, 500, &ds, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(ds.n, 500);
    cr_assert_eq(ds.h * ds.w, 784);
    cr_assert_eq(ds.num_classes, 10);
    tr_dataset_free(&ds);
}

/* ---- normalize ----------------------------------------------------------------------------------------------- */

/** n samples of c channels of 1x2 with x = sample*100 + channel*10 + j. */
static tr_dataset make_ds(int64_t n, int64_t c)
{
    tr_dataset ds = {0};
    ds.n = n;
    ds.c = c;
    ds.h = 1;
    ds.w = 2;
    ds.x = malloc((size_t)(n * c * 2) * sizeof *ds.x);
    ds.y = malloc((size_t)n * sizeof *ds.y);
    for (int64_t i = 0; i < n; i++) {
        ds.y[i] = i;
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t j = 0; j < 2; j++)
                ds.x[(i * c + ch) * 2 + j] = (float)(i * 100 + ch * 10 + j);
    }
    ds.num_classes = n;
    return ds;
}

Test(normalize, per_channel)
{
    tr_dataset ds = make_ds(3, 2);
    double mean[2] = {1.0, 10.0}, std[2] = {2.0, 0.5};
    tr_error err = {0};
    cr_assert_eq(tr_dataset_normalize(&ds, mean, std, 2, &err), TR_OK, "%s", err.msg);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t ch = 0; ch < 2; ch++)
            for (int64_t j = 0; j < 2; j++) {
                float raw = (float)(i * 100 + ch * 10 + j);
                float want = (raw - (float)mean[ch]) / (float)std[ch];
                cr_assert_eq(ds.x[(i * 2 + ch) * 2 + j], want);
            }
    cr_assert_eq(ds.x[0], -0.5f);          /* (0 - 1) / 2 */
    cr_assert_eq(ds.x[2], 0.0f);           /* (10 - 10) / 0.5 */
    cr_assert_eq(ds.x[3], 2.0f);           /* (11 - 10) / 0.5 */
    tr_dataset_free(&ds);
}

Test(normalize, broadcast_one_value)
{
    tr_dataset ds = make_ds(2, 3);
    double mean = 0.5, std = 0.25;
    tr_error err = {0};
    cr_assert_eq(tr_dataset_normalize(&ds, &mean, &std, 1, &err), TR_OK, "%s", err.msg);
    for (int64_t k = 0; k < 2 * 3 * 2; k++) {
        int64_t i = k / 6, ch = (k / 2) % 3, j = k % 2;
        cr_assert_eq(ds.x[k], ((float)(i * 100 + ch * 10 + j) - 0.5f) / 0.25f);
    }
    cr_assert_eq(ds.x[1], 2.0f); /* (1 - 0.5) / 0.25 */
    tr_dataset_free(&ds);
}

Test(normalize, errors)
{
    tr_dataset ds = make_ds(2, 3);
    double mean[3] = {0, 0, 0}, std[3] = {1, 1, 1}, bad[3] = {1, 0, 1}, neg = -1.0;
    tr_error err = {0};
    cr_assert_eq(tr_dataset_normalize(&ds, mean, std, 2, &err), TR_E_CONFIG);
    cr_assert_eq(err.code, TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "3 channels"), "%s", err.msg);
    cr_assert_eq(tr_dataset_normalize(&ds, mean, std, 0, &err), TR_E_CONFIG);
    cr_assert_eq(tr_dataset_normalize(&ds, mean, bad, 3, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "channel 1"), "%s", err.msg);
    cr_assert_eq(tr_dataset_normalize(&ds, mean, &neg, 1, &err), TR_E_CONFIG);
    double nan_std = NAN;
    cr_assert_eq(tr_dataset_normalize(&ds, mean, &nan_std, 1, &err), TR_E_CONFIG);
    /* nothing was changed by the failed calls */
    cr_assert_eq(ds.x[5], 21.0f);
    tr_dataset_free(&ds);
}

/* ---- permutation --------------------------------------------------------------------------------------------- */

static bool is_perm(const int64_t *p, int64_t n)
{
    bool *seen = calloc((size_t)n, 1);
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]])
            ok = false;
        else
            seen[p[i]] = true;
    }
    free(seen);
    return ok;
}

Test(permutation, pinned_values)
{
    /* Pins the algorithm: these values (also produced by an independent Python model of the documented
     * algorithm) must never change, or every run's data order changes silently. */
    static const struct { uint64_t seed, epoch; int64_t n; int64_t want[12]; } cases[] = {
        {0, 0, 10, {6, 8, 2, 3, 7, 1, 0, 5, 9, 4}},
        {0, 1, 10, {8, 5, 6, 2, 3, 0, 7, 9, 1, 4}},
        {1, 0, 10, {5, 3, 4, 8, 0, 2, 1, 6, 9, 7}},
        {42, UINT64_MAX, 12, {2, 10, 8, 7, 11, 5, 3, 9, 4, 6, 0, 1}},
        {7, 3, 1000, {180, 374, 490, 40, 654, 738, 673, 10, 308, 2, 628, 707}},
    };
    int64_t p[1000];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tr_permutation(cases[c].seed, cases[c].epoch, cases[c].n, p);
        int64_t m = cases[c].n < 12 ? cases[c].n : 12;
        for (int64_t i = 0; i < m; i++)
            cr_assert_eq(p[i], cases[c].want[i], "case %zu index %lld: %lld", c, (long long)i, (long long)p[i]);
    }
}

Test(permutation, is_a_permutation_and_deterministic)
{
    enum { N = 5000 };
    static int64_t a[N], b[N];
    for (uint64_t epoch = 0; epoch < 5; epoch++) {
        tr_permutation(1234, epoch, N, a);
        cr_assert(is_perm(a, N));
        tr_permutation(1234, epoch, N, b);
        cr_assert_arr_eq(a, b, sizeof a);
    }
    int64_t one = -1;
    tr_permutation(9, 9, 1, &one);
    cr_assert_eq(one, 0);
    tr_permutation(9, 9, 0, NULL); /* n = 0 touches nothing */
}

Test(permutation, epochs_and_seeds_differ)
{
    enum { N = 1000 };
    static int64_t a[N], b[N];
    /* consecutive epochs / seeds: different orders, and few fixed points in common (well mixed) */
    for (uint64_t k = 0; k < 20; k++) {
        tr_permutation(5, k, N, a);
        tr_permutation(5, k + 1, N, b);
        int same = 0;
        for (int i = 0; i < N; i++)
            same += a[i] == b[i];
        cr_assert_lt(same, 12, "epoch %llu vs %llu: %d positions equal", (unsigned long long)k,
                     (unsigned long long)k + 1, same);
        tr_permutation(k, 0, N, a);
        tr_permutation(k + 1, 0, N, b);
        same = 0;
        for (int i = 0; i < N; i++)
            same += a[i] == b[i];
        cr_assert_lt(same, 12, "seed %llu vs %llu: %d positions equal", (unsigned long long)k,
                     (unsigned long long)k + 1, same);
    }
    /* seed and epoch are not interchangeable */
    tr_permutation(3, 8, N, a);
    tr_permutation(8, 3, N, b);
    cr_assert(memcmp(a, b, sizeof a) != 0);
}

Test(permutation, uniform_over_epochs)
{
    /* n = 4: across 24000 epochs every (position, value) pair should appear ~6000 times and every one of the 24
     * orders ~1000 times; bounds are ~5 sigma. */
    long pos[4][4] = {{0}};
    long order[256] = {0};
    int64_t p[4];
    for (uint64_t e = 0; e < 24000; e++) {
        tr_permutation(77, e, 4, p);
        for (int i = 0; i < 4; i++)
            pos[i][p[i]]++;
        order[p[0] * 64 + p[1] * 16 + p[2] * 4 + p[3]]++;
    }
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < 4; v++)
            cr_assert(labs(pos[i][v] - 6000) < 350, "position %d value %d: %ld", i, v, pos[i][v]);
    int distinct = 0;
    for (int k = 0; k < 256; k++)
        if (order[k]) {
            distinct++;
            cr_assert(labs(order[k] - 1000) < 160, "order %d: %ld", k, order[k]);
        }
    cr_assert_eq(distinct, 24);
}

/* ---- split and gather ---------------------------------------------------------------------------------------- */

Test(split, sizes_membership_and_order)
{
    tr_dataset tr = make_ds(10, 1), va;
    tr.num_classes = 42;
    tr_error err = {0};
    cr_assert_eq(tr_dataset_split(&tr, 3, 99, &va, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(va.n, 3);
    cr_assert_eq(tr.n, 7);
    cr_assert_eq(va.c, 1);
    cr_assert_eq(va.h, 1);
    cr_assert_eq(va.w, 2);
    cr_assert_eq(va.num_classes, 42);
    cr_assert_eq(tr.num_classes, 42);
    cr_assert_eq(tr.c, 1);
    cr_assert_eq(tr.w, 2);

    /* val = the first 3 positions of tr_permutation(seed, UINT64_MAX, n), in that order */
    int64_t perm[10];
    tr_permutation(99, UINT64_MAX, 10, perm);
    int count[10] = {0};
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(va.y[k], perm[k]);
        cr_assert_eq(va.x[2 * k], (float)(perm[k] * 100));
        cr_assert_eq(va.x[2 * k + 1], (float)(perm[k] * 100 + 1));
        count[va.y[k]]++;
    }
    /* train keeps the rest in original order, features travelling with labels */
    for (int k = 0; k < 7; k++) {
        if (k > 0)
            cr_assert_gt(tr.y[k], tr.y[k - 1]);
        cr_assert_eq(tr.x[2 * k], (float)(tr.y[k] * 100));
        cr_assert_eq(tr.x[2 * k + 1], (float)(tr.y[k] * 100 + 1));
        count[tr.y[k]]++;
    }
    for (int i = 0; i < 10; i++)
        cr_assert_eq(count[i], 1, "sample %d appears %d times", i, count[i]);
    tr_dataset_free(&tr);
    tr_dataset_free(&va);
}

Test(split, deterministic_and_seeded)
{
    tr_dataset a = make_ds(50, 1), b = make_ds(50, 1), c = make_ds(50, 1), va, vb, vc;
    tr_error err = {0};
    cr_assert_eq(tr_dataset_split(&a, 10, 7, &va, &err), TR_OK);
    cr_assert_eq(tr_dataset_split(&b, 10, 7, &vb, &err), TR_OK);
    cr_assert_eq(tr_dataset_split(&c, 10, 8, &vc, &err), TR_OK);
    cr_assert_arr_eq(va.y, vb.y, 10 * sizeof *va.y);
    cr_assert_arr_eq(a.y, b.y, 40 * sizeof *a.y);
    cr_assert_arr_eq(va.x, vb.x, 20 * sizeof *va.x);
    cr_assert(memcmp(va.y, vc.y, 10 * sizeof *va.y) != 0);
    tr_dataset_free(&a);
    tr_dataset_free(&b);
    tr_dataset_free(&c);
    tr_dataset_free(&va);
    tr_dataset_free(&vb);
    tr_dataset_free(&vc);
}

Test(split, zero_and_errors)
{
    tr_dataset tr = make_ds(5, 2), va;
    tr_error err = {0};
    cr_assert_eq(tr_dataset_split(&tr, 0, 1, &va, &err), TR_OK);
    cr_assert_eq(va.n, 0);
    cr_assert_null(va.x);
    cr_assert_eq(va.c, 2);
    cr_assert_eq(tr.n, 5);
    cr_assert_eq(tr.x[2], 10.0f);
    tr_dataset_free(&va);
    cr_assert_eq(tr_dataset_split(&tr, 5, 1, &va, &err), TR_E_CONFIG);
    cr_assert_not_null(strstr(err.msg, "val_size 5"), "%s", err.msg);
    cr_assert_eq(tr_dataset_split(&tr, -1, 1, &va, &err), TR_E_CONFIG);
    cr_assert_eq(tr.n, 5);
    cr_assert_eq(tr_dataset_split(&tr, 4, 1, &va, &err), TR_OK);
    cr_assert_eq(tr.n, 1);
    cr_assert_eq(va.n, 4);
    tr_dataset_free(&tr);
    tr_dataset_free(&va);
}

Test(gather, copies_samples)
{
    tr_dataset ds = make_ds(6, 2);
    int64_t idx[3] = {4, 0, 4};
    float x[3 * 4];
    int64_t y[3];
    tr_dataset_gather(&ds, idx, 3, x, y);
    cr_assert_eq(y[0], 4);
    cr_assert_eq(y[1], 0);
    cr_assert_eq(y[2], 4);
    float want[12] = {400, 401, 410, 411, 0, 1, 10, 11, 400, 401, 410, 411};
    cr_assert_arr_eq(x, want, sizeof want);
    tr_dataset_free(&ds);
}

/* ------------------------------------------------------------------------------------------------ augmentation */

/* n samples [c, h, w] with x = 1000 i + 100 ch + 10 y + x: every pixel says where it came from. */
static tr_dataset make_images(int64_t n, int64_t c, int64_t h, int64_t w)
{
    tr_dataset ds = {0};
    ds.n = n;
    ds.c = c;
    ds.h = h;
    ds.w = w;
    ds.x = malloc((size_t)(n * c * h * w) * sizeof *ds.x);
    ds.y = malloc((size_t)n * sizeof *ds.y);
    for (int64_t i = 0; i < n; i++) {
        ds.y[i] = i % 10;
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t y = 0; y < h; y++)
                for (int64_t x = 0; x < w; x++)
                    ds.x[((i * c + ch) * h + y) * w + x] = (float)(1000 * i + 100 * ch + 10 * y + x);
    }
    ds.num_classes = 10;
    return ds;
}

/* torchvision's two steps done literally: build the padded image, cut the window at (dy, dx), then mirror it. */
static void reference_augment(const tr_dataset *ds, int64_t i, const tr_augment *a, int64_t dy, int64_t dx,
                              int flip, float *out)
{
    const int64_t c = ds->c, h = ds->h, w = ds->w, p = a->crop_padding, ph = h + 2 * p, pw = w + 2 * p;
    float *padded = malloc((size_t)(c * ph * pw) * sizeof *padded), *crop = malloc((size_t)(c * h * w) * sizeof *crop);
    for (int64_t ch = 0; ch < c; ch++) {
        for (int64_t k = 0; k < ph * pw; k++) padded[ch * ph * pw + k] = a->fill[a->n_fill > 1 ? ch : 0];
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                padded[(ch * ph + y + p) * pw + x + p] = ds->x[((i * c + ch) * h + y) * w + x];
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) crop[(ch * h + y) * w + x] = padded[(ch * ph + y + dy) * pw + x + dx];
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                out[(ch * h + y) * w + x] = crop[(ch * h + y) * w + (flip ? w - 1 - x : x)];
    }
    free(padded);
    free(crop);
}

Test(augment, crop_and_flip_equal_torchvisions_pad_crop_flip)
{
    const uint64_t seed = (uint64_t)support_seed("augment");
    tr_dataset ds = make_images(60, 2, 5, 4);
    tr_augment a = {.crop_padding = 2, .hflip = 0.5, .fill = {-7, -9}, .n_fill = 2};
    int64_t idx[60];
    for (int64_t k = 0; k < 60; k++) idx[k] = (k * 37) % 60;
    const size_t d = 2 * 5 * 4;
    float *x = malloc(60 * d * sizeof *x), want[40];
    int64_t y[60];
    tr_dataset_gather_augmented(&ds, idx, 60, &a, seed, 3, x, y);
    int seen_dy[5] = {0}, seen_dx[5] = {0}, seen_flip[2] = {0}, fills = 0;
    for (int64_t k = 0; k < 60; k++) {
        int64_t dy, dx;
        int flip;
        tr_augment_draw(&a, seed, 3, idx[k], &dy, &dx, &flip);
        cr_assert(dy >= 0 && dy <= 4 && dx >= 0 && dx <= 4, "offsets %lld %lld", (long long)dy, (long long)dx);
        seen_dy[dy] = seen_dx[dx] = seen_flip[flip] = 1;
        reference_augment(&ds, idx[k], &a, dy, dx, flip, want);
        cr_assert_arr_eq(x + k * d, want, sizeof want, "sample %lld (dy %lld dx %lld flip %d)", (long long)idx[k],
                         (long long)dy, (long long)dx, flip);
        cr_assert_eq(y[k], idx[k] % 10);
        for (size_t j = 0; j < d; j++) fills += x[k * d + j] < 0;
    }
    for (int v = 0; v < 5; v++) cr_expect(seen_dy[v] && seen_dx[v], "offset %d never drawn in 60 samples", v);
    cr_expect(seen_flip[0] && seen_flip[1], "60 samples at p = 0.5 were all flipped the same way");
    cr_expect_gt(fills, 0, "no padding pixel in 60 crops at padding 2");
    free(x);
    tr_dataset_free(&ds);
}

Test(augment, draws_are_a_function_of_seed_epoch_and_sample)
{
    tr_augment a = {.crop_padding = 2, .hflip = 0.5, .n_fill = 1};
    enum { N = 20000 };
    int flips = 0, hist[5] = {0}, epoch_differs = 0, seed_differs = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t dy, dx, dy2, dx2;
        int f, f2;
        tr_augment_draw(&a, 7, 2, i, &dy, &dx, &f);
        tr_augment_draw(&a, 7, 2, i, &dy2, &dx2, &f2);
        cr_assert(dy == dy2 && dx == dx2 && f == f2, "sample %lld: two draws differ", (long long)i);
        flips += f;
        hist[dy]++;
        tr_augment_draw(&a, 7, 3, i, &dy2, &dx2, &f2);
        epoch_differs += dy != dy2 || dx != dx2 || f != f2;
        tr_augment_draw(&a, 8, 2, i, &dy2, &dx2, &f2);
        seed_differs += dy != dy2 || dx != dx2 || f != f2;
    }
    /* 25 (dy, dx) x 2 flips = 50 outcomes: another epoch or seed repeats all three with probability 1/50 */
    cr_expect(epoch_differs > N * 0.96 && seed_differs > N * 0.96, "epoch %d, seed %d of %d differ", epoch_differs,
              seed_differs, N);
    /* binomial(20000, 0.5): sd 71, so +-400 is 5.6 sd; each offset has p = 0.2, sd 57 */
    cr_expect(abs(flips - N / 2) < 400, "%d flips of %d", flips, N);
    for (int v = 0; v < 5; v++) cr_expect(abs(hist[v] - N / 5) < 330, "dy = %d drawn %d times of %d", v, hist[v], N);

    /* p = 0 never flips, p = 1 always does; padding 0 keeps the window in place */
    tr_augment never = {.hflip = 0, .n_fill = 1}, always = {.hflip = 1, .n_fill = 1};
    for (int64_t i = 0; i < 1000; i++) {
        int64_t dy, dx;
        int f;
        tr_augment_draw(&never, 1, 0, i, &dy, &dx, &f);
        cr_assert(f == 0 && dy == 0 && dx == 0);
        tr_augment_draw(&always, 1, 0, i, &dy, &dx, &f);
        cr_assert(f == 1 && dy == 0 && dx == 0);
    }
    cr_expect(!tr_augment_enabled(&never) && tr_augment_enabled(&always));
}

/* Changing the generator changes every augmented run: these pin it (like permutation.pinned_values). */
Test(augment, pinned_values)
{
    tr_augment a = {.crop_padding = 2, .hflip = 0.5, .n_fill = 1};
    char got[128] = "";
    for (int64_t i = 0; i < 6; i++) {
        int64_t dy, dx;
        int f;
        tr_augment_draw(&a, 0, 0, i, &dy, &dx, &f);
        char one[16];
        snprintf(one, sizeof one, "%lld%lld%d ", (long long)dy, (long long)dx, f);
        strcat(got, one);
    }
    cr_expect_str_eq(got, "440 300 221 301 321 000 ");
}
