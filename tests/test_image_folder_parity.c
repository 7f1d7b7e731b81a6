/*
 * test_image_folder_parity.c -- real data through data.format image_folder: a Fashion-MNIST train subset and test
 * set written out at test time as PNG folders (ROOT/LABEL/NNNNN.png), and as IDX files holding the same images in
 * the same order (ImageFolder's order is class by class, so both are written sorted by label, stably). The MLP and
 * the convnet (with the crop and flip augmentation) trained on each give the same trace bit for bit: same order,
 * same pixels, same normalisation, same augmentation draws. Then the runs' extras: classes.json, the checkpoint's
 * classes, a resume refused when the classes changed, and a file that does not decode stopping the run by name.
 */
#include <criterion/criterion.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "run.h"
#include "support.h"

TestSuite(image_folder_parity, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

static void be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24), b[1] = (uint8_t)(v >> 16), b[2] = (uint8_t)(v >> 8), b[3] = (uint8_t)v;
}

/* Fashion-MNIST's first n samples of a split, sorted by label (stable), as PNG folders under png/<split>/ and as
 * plain IDX files <split>-images / <split>-labels in the temp dir. */
static void export_split(const char *images, const char *labels, int64_t n, const char *split)
{
    tr_dataset ds = {0};
    tr_error err = {0};
    char img[600], lbl[600];
    snprintf(img, sizeof img, "/usr/share/datasets/fashion-mnist/%s", images);
    snprintf(lbl, sizeof lbl, "/usr/share/datasets/fashion-mnist/%s", labels);
    cr_assert_eq(tr_idx_load(img, lbl, n, &ds, &err), TR_OK, "%s", err.msg);
    const size_t d = 28 * 28;
    uint8_t *px = malloc((size_t)ds.n * d), *lab = malloc((size_t)ds.n);
    int64_t k = 0;
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/png", support_tmpdir);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/png/%s", support_tmpdir, split);
    mkdir(dir, 0755);
    for (int64_t c = 0; c < ds.num_classes; c++) {
        snprintf(path, sizeof path, "%s/%lld", dir, (long long)c);
        mkdir(path, 0755);
        for (int64_t i = 0; i < ds.n; i++) {
            if (ds.y[i] != c) continue;
            uint8_t *p = px + (size_t)k * d;
            for (size_t j = 0; j < d; j++) p[j] = (uint8_t)(ds.x[(size_t)i * d + j] * 255.0f + 0.5f); /* x = v / 255 */
            lab[k] = (uint8_t)c;
            png_image im = {.version = PNG_IMAGE_VERSION, .width = 28, .height = 28, .format = PNG_FORMAT_GRAY};
            snprintf(path, sizeof path, "%s/%lld/%05lld.png", dir, (long long)c, (long long)k);
            cr_assert(png_image_write_to_file(&im, path, 0, p, 0, NULL), "%s: %s", path, im.message);
            k++;
        }
    }
    cr_assert_eq(k, ds.n);
    uint8_t head[16];
    be32(head, 0x803), be32(head + 4, (uint32_t)k), be32(head + 8, 28), be32(head + 12, 28);
    snprintf(path, sizeof path, "%s/%s-images", support_tmpdir, split);
    FILE *f = fopen(path, "wb");
    cr_assert(fwrite(head, 1, 16, f) == 16 && fwrite(px, 1, (size_t)k * d, f) == (size_t)k * d);
    fclose(f);
    be32(head, 0x801);
    snprintf(path, sizeof path, "%s/%s-labels", support_tmpdir, split);
    f = fopen(path, "wb");
    cr_assert(fwrite(head, 1, 8, f) == 8 && fwrite(lab, 1, (size_t)k, f) == (size_t)k);
    fclose(f);
    free(px);
    free(lab);
    tr_dataset_free(&ds);
}

static void apply(tr_config *cfg, const char *const *kv)
{
    tr_error err = {0};
    for (int i = 0; kv[i]; i++) cr_assert_eq(tr_config_override(cfg, kv[i], &err), TR_OK, "%s: %s", kv[i], err.msg);
}

/* configs/<config> on the exported files: as IDX (format "idx") or as PNG folders ("image_folder"). */
static void config_for(tr_config *cfg, const char *config, const char *format, const char *name,
                       const char *const *extra)
{
    const char *const common[] = {"data.train_subset=0", "data.test_subset=0", NULL};
    support_subset_config(cfg, config, name, common);
    char root[400], trace[600], kv[700];
    snprintf(root, sizeof root, "data.root=%s", support_tmpdir);
    snprintf(trace, sizeof trace, "log.trace=%s/%s.trace", support_tmpdir, name);
    const char *const base[] = {root, trace, NULL};
    apply(cfg, base);
    if (strcmp(format, "idx") == 0) {
        const char *const idx[] = {"data.train_images=train-images", "data.train_labels=train-labels",
                                   "data.test_images=test-images", "data.test_labels=test-labels", NULL};
        apply(cfg, idx);
    } else {
        const char *const png[] = {"data.format=image_folder", "data.train_root=png/train", "data.test_root=png/test",
                                   "data.image_mode=L", NULL};
        apply(cfg, png);
    }
    apply(cfg, extra);
    (void)kv;
    tr_error err = {0};
    cr_assert_eq(tr_config_validate(cfg, &err), TR_OK, "%s", err.msg);
}

static void expect_same_traces(const char *config, const char *const *extra, const char *what)
{
    tr_config cfg;
    tr_summary s1, s2;
    tr_error err = {0};
    char a_name[64], b_name[64];
    snprintf(a_name, sizeof a_name, "%s-idx", what);
    snprintf(b_name, sizeof b_name, "%s-png", what);
    config_for(&cfg, config, "idx", a_name, extra);
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_OK, "%s", err.msg);
    config_for(&cfg, config, "image_folder", b_name, extra);
    cr_assert_eq(tr_run(&cfg, &s2, &err), TR_OK, "%s", err.msg);
    char ta[600], tb[600];
    snprintf(ta, sizeof ta, "%s/%s.trace", support_tmpdir, a_name);
    snprintf(tb, sizeof tb, "%s/%s.trace", support_tmpdir, b_name);
    char *a = support_trace_computed(ta), *b = support_trace_computed(tb);
    cr_expect(strstr(a, "final params_crc32"), "%s", a);
    cr_expect(strstr(a, "eval test"), "%s", a);
    cr_expect_gt(strlen(a), 2000);
    cr_expect_str_eq(a, b, "%s: the image-folder trace differs from the IDX trace", what);
    free(a);
    free(b);
    cr_expect_eq(s1.test_accuracy, s2.test_accuracy);
    cr_expect_eq(s2.test_samples, 1000);
}

Test(image_folder_parity, mlp_and_convnet_on_png_folders_give_the_idx_traces_bit_for_bit)
{
    support_require_fmnist();
    export_split("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 3000, "train");
    export_split("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 1000, "test");
    const char *const mlp[] = {"train.max_steps=60", NULL};
    expect_same_traces("fashion_mnist_mlp.yaml", mlp, "mlp");
    /* the convnet with the training augmentation: the crop's padding value (a black pixel, normalised) and the
     * draws per (seed, epoch, sample) are the IDX path's */
    const char *const cnn[] = {"train.max_steps=40",
                               "eval.every_steps=40",
                               "data.augment.crop_padding=2",
                               "data.augment.hflip=0.5",
                               "ema.enabled=false",
                               "eval.weights=live",
                               NULL};
    expect_same_traces("fashion_mnist_cnn.yaml", cnn, "cnn");

    /* the classes, in the run directory and the checkpoint */
    char text[4096];
    support_read_file(support_path("mlp-png/classes.json"), text, sizeof text);
    cr_expect_str_eq(text, "{\"classes\": [\"0\", \"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\", \"9\"]}\n");
    char out[8192];
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "predict %s -o %s", support_path("mlp-png"), support_path("preds.csv"));
    cr_assert_eq(support_cli(cmd, out, sizeof out), 0, "%s", out);
    support_read_file(support_path("preds.csv"), text, sizeof text);
    cr_expect(strncmp(text, "index,file,target,predicted,predicted_class,p_0,", 48) == 0, "%s", text);
    cr_expect(strstr(text, "\n0,0/00000.png,0,"), "%s", text);

    /* a resume whose training folder has other classes than the checkpoint's is refused */
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    char from[600], to[600];
    const char *splits[] = {"train", "test"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/png/%s/9", support_tmpdir, splits[i]);
        snprintf(to, sizeof to, "%s/png/%s/9-ankle-boot", support_tmpdir, splits[i]);
        cr_assert_eq(rename(from, to), 0);
    }
    const char *const longer[] = {"train.max_steps=70", NULL};
    config_for(&cfg, "fashion_mnist_mlp.yaml", "image_folder", "mlp-png", longer);
    cr_expect_eq(tr_run(&cfg, &s, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "class 9-ankle-boot where the checkpoint has 9"), "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/png/%s/9", support_tmpdir, splits[i]);
        snprintf(to, sizeof to, "%s/png/%s/9-ankle-boot", support_tmpdir, splits[i]);
        cr_assert_eq(rename(to, from), 0);
    }

    /* a file that does not decode, met during training: the run stops with an error naming it */
    snprintf(from, sizeof from, "%s/png/train/3/%05d.png", support_tmpdir, 0);
    FILE *f = NULL;
    for (int k = 0; k < 3000 && !f; k++) { /* the first file of class 3 */
        snprintf(from, sizeof from, "%s/png/train/3/%05d.png", support_tmpdir, k);
        f = fopen(from, "r+b");
    }
    cr_assert_not_null(f);
    fseek(f, 40, SEEK_SET);
    fputs("garbage in the pixel data", f);
    fclose(f);
    const char *const bad[] = {"train.max_steps=60", NULL};
    config_for(&cfg, "fashion_mnist_mlp.yaml", "image_folder", "bad", bad);
    cr_expect_eq(tr_run(&cfg, &s, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, from) && strstr(err.msg, "corrupt or truncated PNG"), "%s", err.msg);
    /* ... or is skipped and counted with data.skip_bad_files */
    const char *const skip[] = {"train.max_steps=10", "data.skip_bad_files=true", NULL};
    config_for(&cfg, "fashion_mnist_mlp.yaml", "image_folder", "skip", skip);
    cr_expect_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
}
