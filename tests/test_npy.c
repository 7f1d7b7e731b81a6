/*
 * test_npy.c -- NumPy arrays as data (data.format: npy): the .npy header parser accepts what numpy writes and
 * refuses the rest with the file and byte offset (big-endian, fortran_order, object arrays, malformed dicts,
 * truncated or trailing data, shapes whose size overflows, oversized headers); .npz archives stored and deflated
 * (fixtures written by numpy: tests/data/npy/make_fixtures.py), a corrupted member is caught; and the acceptance
 * case: the MLP trained on Fashion-MNIST exported to .npy gives the IDX path's trace bit for bit.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "npy.h"
#include "run.h"
#include "support.h"

TestSuite(npy, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

#define FIXTURES TR_SOURCE_DIR "/tests/data/npy/"

/* An .npy 1.0 image in buf: magic, header length, `dict` padded with spaces to a multiple of 64 and ended by '\n',
 * then `nbytes` of data. Returns its length. */
static size_t make_npy(uint8_t *buf, const char *dict, const void *data, size_t nbytes)
{
    const size_t dl = strlen(dict), total = ((10 + dl + 1 + 63) / 64) * 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)((total - 10) & 0xff);
    buf[9] = (uint8_t)((total - 10) >> 8);
    memcpy(buf + 10, dict, dl);
    memset(buf + 10 + dl, ' ', total - 10 - dl - 1);
    buf[total - 1] = '\n';
    if (nbytes) memcpy(buf + total, data, nbytes);
    return total + nbytes;
}

/* Parse and expect failure with `msg` as the whole message. */
static void expect_refused(const uint8_t *buf, size_t len, const char *msg)
{
    tr_npy_array a;
    tr_error err = {0};
    cr_expect_eq(tr_npy_parse(buf, len, "t.npy", &a, &err), TR_E_CONFIG);
    cr_expect_str_eq(err.msg, msg);
    cr_expect_null(a.data);
}

Test(npy, parses_what_numpy_writes)
{
    static uint8_t buf[4096];
    const float v[6] = {1, 2, 3, 4, 5, -6.5f};
    size_t len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v, sizeof v);
    cr_assert_eq(len, 128 + 24);
    tr_npy_array a;
    tr_error err = {0};
    cr_assert_eq(tr_npy_parse(buf, len, "t.npy", &a, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(a.dtype, TR_NPY_FLOAT32);
    cr_expect_eq(a.ndim, 2);
    cr_expect(a.shape[0] == 2 && a.shape[1] == 3);
    cr_expect_eq(a.count, 6);
    cr_expect_eq(a.data_offset, 128);
    cr_expect_eq(memcmp(a.data, v, sizeof v), 0);
    tr_npy_free(&a);

    /* a 0-d array, a 1-d shape, double quotes, no trailing comma, keys in another order, uint8 */
    len = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", "\0\0\0\0\0\0\xf0\x3f", 8);
    cr_assert_eq(tr_npy_parse(buf, len, "t.npy", &a, &err), TR_OK, "%s", err.msg);
    cr_expect(a.ndim == 0 && a.count == 1 && *(double *)a.data == 1.0);
    tr_npy_free(&a);
    len = make_npy(buf, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"|u1\"}", "\x01\x02\xff", 3);
    cr_assert_eq(tr_npy_parse(buf, len, "t.npy", &a, &err), TR_OK, "%s", err.msg);
    cr_expect(a.dtype == TR_NPY_UINT8 && a.ndim == 1 && a.shape[0] == 3 && ((uint8_t *)a.data)[2] == 255);
    tr_npy_free(&a);
    /* an empty array is a valid array */
    len = make_npy(buf, "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 4), }", NULL, 0);
    cr_assert_eq(tr_npy_parse(buf, len, "t.npy", &a, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(a.count, 0);
    tr_npy_free(&a);
}

Test(npy, refuses_bad_headers_naming_the_byte)
{
    static uint8_t buf[4096];
    const float v[4] = {0};
    size_t len;
    /* The dict starts at byte 10: "{'descr': " is 10 characters, so the value is at byte 20; a missing key is
     * reported at the header's end (byte 63, its newline); these headers take 128 bytes, so data starts at 128. */
    len = make_npy(buf, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 20: dtype '>f4' is big-endian; save little-endian data "
                             "(arr.astype(arr.dtype.newbyteorder('<')))");
    len = make_npy(buf, "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 20: dtype '|O' is an object array (a pickle); only numeric arrays are read");
    len = make_npy(buf, "{'descr': '<i2', 'fortran_order': False, 'shape': (4,), }", v, 8);
    expect_refused(buf, len, "t.npy: byte 20: dtype '<i2' is not one of float32 '<f4', float64 '<f8', uint8 '|u1', "
                             "int32 '<i4', int64 '<i8'");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 10: fortran_order is True: save a C-order array (np.ascontiguousarray)");
    len = make_npy(buf, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 27: malformed header: key 'descr' appears twice");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1}", v, 16);
    expect_refused(buf, len, "t.npy: byte 66: malformed header: unknown key 'extra'");
    len = make_npy(buf, "{'descr': '<f4', 'shape': (4,), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 63: malformed header: missing key 'fortran_order'");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 62: malformed header: a 1-d shape is written (n,)");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 61: malformed header: expected a size in shape");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } x", v, 16);
    expect_refused(buf, len, "t.npy: byte 68: malformed header: text after the dict");
    /* the byte size of the shape overflows: refused before anything is allocated */
    len = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 10: the shape's element count overflows int64");
    len = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976, 4), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 10: the shape's byte size overflows");
    /* data: truncated, trailing */
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", v, 16);
    expect_refused(buf, len - 6, "t.npy: byte 138: truncated data: the shape needs 16 bytes from byte 128");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", v, 16);
    expect_refused(buf, len, "t.npy: byte 140: 4 bytes after the array's data");
    /* magic, version, header length */
    memcpy(buf, "\x93NUMPX", 6);
    expect_refused(buf, len, "t.npy: byte 0: not a NumPy .npy file (no \\x93NUMPY magic)");
    memcpy(buf, "\x93NUMPY\x04\x00", 8);
    expect_refused(buf, len, "t.npy: byte 6: format version 4.0 is not 1.0, 2.0 or 3.0");
    memcpy(buf, "\x93NUMPY\x02\x00\xa0\x86\x01\x00", 12); /* version 2.0: a 100000-byte header */
    expect_refused(buf, len, "t.npy: byte 8: header length 100000 is more than 65536 bytes");
    memcpy(buf, "\x93NUMPY\x01\x00\xff\x00", 10);
    expect_refused(buf, 80, "t.npy: byte 80: truncated header (255 header bytes declared at byte 8)");
}

Test(npy, reads_npz_stored_and_deflated)
{
    tr_npy_array a;
    tr_error err = {0};
    const float want[6] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
    const char *const files[] = {FIXTURES "stored.npz:x", FIXTURES "deflated.npz:x.npy"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(tr_npy_load(files[i], &a, &err), TR_OK, "%s", err.msg);
        cr_expect(a.dtype == TR_NPY_FLOAT32 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3, "%s", files[i]);
        cr_expect_eq(memcmp(a.data, want, sizeof want), 0, "%s", files[i]);
        tr_npy_free(&a);
    }
    cr_assert_eq(tr_npy_load(FIXTURES "deflated.npz:y", &a, &err), TR_OK, "%s", err.msg);
    cr_expect(a.dtype == TR_NPY_INT64 && a.count == 2 && ((int64_t *)a.data)[1] == 9);
    tr_npy_free(&a);

    cr_expect_eq(tr_npy_load(FIXTURES "deflated.npz", &a, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "deflated.npz: 2 arrays in the archive (x.npy, y.npy): name one as "), "%s", err.msg);
    cr_expect_eq(tr_npy_load(FIXTURES "stored.npz:z", &a, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "stored.npz: no member 'z.npy' in the archive"), "%s", err.msg);
    cr_expect_eq(tr_npy_load(FIXTURES "be.npy", &a, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "be.npy: byte 20: dtype '>f4' is big-endian"), "%s", err.msg);
    cr_expect_eq(tr_npy_load(FIXTURES "fortran.npy", &a, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "fortran.npy: byte 10: fortran_order is True"), "%s", err.msg);
    cr_expect_eq(tr_npy_load(support_path("missing.npy"), &a, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "missing.npy: cannot open: No such file or directory"), "%s", err.msg);

    /* A flipped byte inside each compressed member: refused (bad deflate data or CRC), never read silently. */
    FILE *f = fopen(FIXTURES "deflated.npz", "rb");
    cr_assert_not_null(f);
    static uint8_t z[4096];
    const size_t n = fread(z, 1, sizeof z, f);
    fclose(f);
    cr_assert_gt(n, 100);
    /* member x's deflate stream: after its local header (30 bytes, the name, numpy's zip64 extra field) up to the
     * next member's local header */
    const size_t start = 30 + (size_t)(z[26] | z[27] << 8) + (size_t)(z[28] | z[29] << 8);
    size_t end = start;
    while (end + 4 < n && memcmp(z + end, "PK\x03\x04", 4) != 0) end++;
    cr_assert_gt(end - start, 40, "stream from %zu to %zu", start, end);
    int refused = 0;
    for (size_t at = start; at < end; at++) {
        z[at] ^= 0x5a;
        if (tr_npz_parse(z, n, "d.npz", "x", &a, &err) != TR_OK) refused++;
        else tr_npy_free(&a);
        z[at] ^= 0x5a;
    }
    cr_expect_eq(refused, (int)(end - start), "%d of %zu corrupted archives were refused", refused, end - start);
    cr_expect_eq(tr_npz_parse(z, n, "d.npz", "x", &a, &err), TR_OK, "%s", err.msg);
    tr_npy_free(&a);
    /* a truncated archive has no end record */
    cr_expect_eq(tr_npz_parse(z, n - 1, "d.npz", "x", &a, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "no zip end-of-central-directory record"), "%s", err.msg);
}

Test(npy, save_then_load_round_trips)
{
    const int64_t shape[] = {2, 2, 3};
    int32_t v[12];
    for (int i = 0; i < 12; i++) v[i] = i * 1000 - 5000;
    tr_error err = {0};
    cr_assert_eq(tr_npy_save(support_path("r.npy"), TR_NPY_INT32, shape, 3, v, &err), TR_OK, "%s", err.msg);
    tr_npy_array a;
    cr_assert_eq(tr_npy_load(support_path("r.npy"), &a, &err), TR_OK, "%s", err.msg);
    cr_expect(a.dtype == TR_NPY_INT32 && a.ndim == 3 && a.shape[2] == 3 && a.data_offset % 64 == 0);
    cr_expect_eq(memcmp(a.data, v, sizeof v), 0);
    tr_npy_free(&a);
}

/* Export the Fashion-MNIST subset as the idx path sees it -- pixels / 255, then data.mean / data.std, float32 --
 * to .npy (what scripts/export_npy.py does with numpy), train the MLP from both, and compare the traces. */
Test(npy, mlp_on_fashion_mnist_npy_gives_the_idx_trace_bit_for_bit)
{
    support_require_fmnist();
    tr_config cfg;
    tr_error err = {0};
    const char *const idx_extra[] = {"train.max_steps=60", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "idx", idx_extra);
    char kv[1400];
    snprintf(kv, sizeof kv, "log.trace=%s", support_path("idx.trace"));
    cr_assert_eq(tr_config_override(&cfg, kv, &err), TR_OK, "%s", err.msg);

    /* the same subsets and normalisation as the run's idx set-up */
    tr_dataset tr = {0}, te = {0};
    char img[2100], lbl[2100];
    snprintf(img, sizeof img, "%s/%s", cfg.data.root, cfg.data.train_images);
    snprintf(lbl, sizeof lbl, "%s/%s", cfg.data.root, cfg.data.train_labels);
    cr_assert_eq(tr_idx_load(img, lbl, cfg.data.train_subset, &tr, &err), TR_OK, "%s", err.msg);
    snprintf(img, sizeof img, "%s/%s", cfg.data.root, cfg.data.test_images);
    snprintf(lbl, sizeof lbl, "%s/%s", cfg.data.root, cfg.data.test_labels);
    cr_assert_eq(tr_idx_load(img, lbl, cfg.data.test_subset, &te, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_dataset_normalize(&tr, cfg.data.mean, cfg.data.std, cfg.data.n_mean, &err), TR_OK);
    cr_assert_eq(tr_dataset_normalize(&te, cfg.data.mean, cfg.data.std, cfg.data.n_mean, &err), TR_OK);
    const int64_t xs[] = {tr.n, 1, 28, 28}, ts[] = {te.n, 28, 28}, ys[] = {tr.n}, yt[] = {te.n};
    uint8_t *lab = malloc((size_t)tr.n); /* labels as numpy's uint8, test labels as int64: both accepted */
    for (int64_t i = 0; i < tr.n; i++) lab[i] = (uint8_t)tr.y[i];
    cr_assert_eq(tr_npy_save(support_path("train_x.npy"), TR_NPY_FLOAT32, xs, 4, tr.x, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("train_y.npy"), TR_NPY_UINT8, ys, 1, lab, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("test_x.npy"), TR_NPY_FLOAT32, ts, 3, te.x, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("test_y.npy"), TR_NPY_INT64, yt, 1, te.y, &err), TR_OK, "%s", err.msg);
    free(lab);
    tr_dataset_free(&tr);
    tr_dataset_free(&te);

    tr_summary s1, s2;
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_OK, "%s", err.msg);

    const char *const npy_extra[] = {"train.max_steps=60", "data.format=npy", "data.train_subset=0",
                                     "data.test_subset=0", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "npy", npy_extra);
    const char *keys[][2] = {{"data.root", support_tmpdir},
                             {"data.train_inputs", "train_x.npy"}, {"data.train_targets", "train_y.npy"},
                             {"data.test_inputs", "test_x.npy"},   {"data.test_targets", "test_y.npy"},
                             {"log.trace", support_path("npy.trace")}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        snprintf(kv, sizeof kv, "%s=%s", keys[i][0], keys[i][1]);
        cr_assert_eq(tr_config_override(&cfg, kv, &err), TR_OK, "%s", err.msg);
    }
    cr_assert_eq(tr_config_validate(&cfg, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_run(&cfg, &s2, &err), TR_OK, "%s", err.msg);

    char *a = support_trace_computed(support_path("idx.trace")), *b = support_trace_computed(support_path("npy.trace"));
    cr_expect_gt(strlen(a), 3000);
    cr_expect(strstr(a, "final params_crc32"), "%s", a);
    cr_expect(strstr(a, "step 60 loss"), "%s", a);
    cr_expect(strstr(a, "eval test 60 correct"), "%s", a);
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    cr_expect_eq(s1.test_accuracy, s2.test_accuracy);
    cr_expect_eq(s2.test_samples, 1000);

    /* inputs that do not fit: N against the targets (naming both files), then the shape against the model */
    const int64_t bad[] = {4, 27, 28}, four[] = {4};
    static float zeros[4 * 27 * 28];
    const int64_t labels[4] = {0, 1, 2, 3};
    cr_assert_eq(tr_npy_save(support_path("train_x.npy"), TR_NPY_FLOAT32, bad, 3, zeros, &err), TR_OK);
    cr_assert_eq(tr_config_override(&cfg, "train.batch_size=2", &err), TR_OK);
    cr_assert_eq(tr_config_override(&cfg, "data.val_size=0", &err), TR_OK);
    cr_expect_eq(tr_run(&cfg, &s2, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "train_y.npy: 3000 targets but ") && strstr(err.msg, "train_x.npy has 4 samples"), "%s",
              err.msg);
    cr_assert_eq(tr_npy_save(support_path("train_y.npy"), TR_NPY_INT64, four, 1, labels, &err), TR_OK);
    cr_assert_eq(tr_config_override(&cfg, "eval.test_at_end=false", &err), TR_OK);
    cr_expect_eq(tr_run(&cfg, &s2, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "mlp.yaml: input: [1, 28, 28] does not match the data's [1, 27, 28]"), "%s",
              err.msg);
}
