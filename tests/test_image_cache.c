/*
 * test_image_cache.c -- data.cache: disk through whole runs of the command line: a first run on a small PNG folder
 * decodes its images and writes each split's cache file; a second run reads them and its trace (every step's loss,
 * the evaluations, the final parameters' checksum) is the first's bit for bit; a damaged cache file is named,
 * ignored and rewritten, and a cache folder that cannot be made only warns, each with the same trace again.
 * (The file's format, key and every check on it: tests/test_image.c, unit.)
 */
#define _DEFAULT_SOURCE /* DT_REG */
#include <criterion/criterion.h>
#include <dirent.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "support.h"

TestSuite(image_cache, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

/* png/CLASS/NN.png under the temp dir: 10 classes of 12 gray 28 x 28 images, pixels a function of (class, image). */
static void put_pngs(void)
{
    char path[700];
    snprintf(path, sizeof path, "%s/png", support_tmpdir);
    cr_assert_eq(mkdir(path, 0755), 0);
    uint8_t px[28 * 28];
    for (int c = 0; c < 10; c++) {
        snprintf(path, sizeof path, "%s/png/c%d", support_tmpdir, c);
        cr_assert_eq(mkdir(path, 0755), 0);
        for (int i = 0; i < 12; i++) {
            for (int j = 0; j < 28 * 28; j++)
                px[j] = (uint8_t)((j * (c + 3) + i * 29 + (j / 28 == c * 2) * 200) & 0xff);
            png_image im = {.version = PNG_IMAGE_VERSION, .width = 28, .height = 28, .format = PNG_FORMAT_GRAY};
            snprintf(path, sizeof path, "%s/png/c%d/%02d.png", support_tmpdir, c, i);
            cr_assert(png_image_write_to_file(&im, path, 0, px, 0, NULL), "%s: %s", path, im.message);
        }
    }
}

static char out[1 << 17];

/* One run named `name` of the MLP config on png/ with data.cache: disk into `cache_dir`: 108 training images (12 more
 * carved for validation) in batches of 10, so that the first epoch (10 steps) leaves 8 images out (train.drop_last),
 * a validation pass after it, and one step of the second epoch: the training file is written at the epoch's end all
 * the same (the 8 are decoded then), before the second epoch's first batch, which is unlikely to hold all 8. */
static void run(const char *name, const char *cache_dir)
{
    char args[2048];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml data.format=image_folder data.root='%s' data.train_root=png "
             "data.image_mode=L data.val_size=12 data.cache=disk data.cache_dir='%s' train.max_steps=11 "
             "train.batch_size=10 eval.batch_size=12 eval.test_at_end=false log.every_steps=1 log.progress=never "
             "log.trace='%s/%s.trace' run.dir='%s' run.name=%s",
             support_tmpdir, cache_dir, support_tmpdir, name, support_tmpdir, name);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
}

/* summary.json's data_cache_disk.<split>.<field> of run `name`. */
static double disk_count(const char *name, const char *split, const char *field)
{
    char path[700], text[1 << 14];
    snprintf(path, sizeof path, "%s/%s/summary.json", support_tmpdir, name);
    support_read_file(path, text, sizeof text);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s", text);
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data_cache_disk"), split), field);
    cr_assert(cJSON_IsNumber(v), "%s: no data_cache_disk.%s.%s: %s", path, split, field, text);
    const double d = v->valuedouble;
    cJSON_Delete(j);
    return d;
}

/* The path in out after `after`, up to the next space, into p[n]. */
static void path_after(const char *after, char *p, size_t n)
{
    const char *s = strstr(out, after);
    cr_assert_not_null(s, "'%s' not in: %s", after, out);
    s += strlen(after);
    size_t k = 0;
    while (s[k] && s[k] != ' ' && s[k] != '\n' && k + 1 < n) k++;
    memcpy(p, s, k);
    p[k] = '\0';
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* The .u8 files in dir. */
static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The computed lines of the trace support_tmpdir/NAME.trace (support_trace_computed), malloc'd. */
static char *computed_of(const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s.trace", support_tmpdir, name);
    return support_trace_computed(path);
}

Test(image_cache, a_second_run_reads_the_decoded_images_and_trains_bit_for_bit_the_same)
{
    put_pngs();
    const char *dir = support_path("cache/decoded");
    char cache_dir[600], train_file[1024], val_file[1024], again[1024];
    snprintf(cache_dir, sizeof cache_dir, "%s", dir);

    /* the first run: no file yet; each split's file is written once all its images were decoded */
    run("first", cache_dir);
    cr_expect(strstr(out, "data: training: no disk cache yet: written to "), "%s", out);
    cr_expect(strstr(out, "data: validation: no disk cache yet: written to "), "%s", out);
    path_after("data: training: 108 decoded images written to ", train_file, sizeof train_file);
    path_after("data: validation: 12 decoded images written to ", val_file, sizeof val_file);
    cr_expect_eq(file_size(train_file), 64 + 108 * 28 * 28, "%s", train_file);
    cr_expect_eq(file_size(val_file), 64 + 12 * 28 * 28, "%s", val_file);
    cr_expect_eq(count_files(cache_dir), 2, "no temporary file is left");
    cr_expect_eq(disk_count("first", "train", "read"), 0);
    cr_expect_eq(disk_count("first", "train", "written"), 108);
    cr_expect_eq(disk_count("first", "val", "written"), 12);
    char *first = computed_of("first");
    cr_expect(strstr(first, "step 1 ") && strstr(first, "step 11 "), "%s", first);
    cr_expect(strstr(first, "final params_crc32"), "%s", first);
    cr_expect(strstr(first, "eval val"), "%s", first);

    /* the second: every image from the files, none decoded, none written; the same numbers */
    run("second", cache_dir);
    path_after("data: training: 108 decoded images read from the disk cache ", again, sizeof again);
    cr_expect_str_eq(again, train_file);
    path_after("data: validation: 12 decoded images read from the disk cache ", again, sizeof again);
    cr_expect_str_eq(again, val_file);
    cr_expect_null(strstr(out, "written to"), "%s", out);
    cr_expect_eq(disk_count("second", "train", "read"), 108);
    cr_expect_eq(disk_count("second", "train", "written"), 0);
    cr_expect_eq(disk_count("second", "val", "read"), 12);
    char *second = computed_of("second");
    cr_expect_str_eq(first, second, "the run on the disk cache trained differently");
    free(second);

    /* a damaged file (one payload byte flipped): named and why, ignored, rewritten; the same numbers */
    support_flip_byte(train_file, 64 + 5000, SEEK_SET, 0x10);
    run("damaged", cache_dir);
    char want[1400];
    snprintf(want, sizeof want, "warning: data.cache: disk: training: %s: the payload's checksum", train_file);
    cr_expect(strstr(out, want), "'%s' not in: %s", want, out);
    path_after("data: training: 108 decoded images written to ", again, sizeof again);
    cr_expect_str_eq(again, train_file);
    cr_expect(strstr(out, "data: validation: 12 decoded images read from the disk cache "), "%s", out);
    char *damaged = computed_of("damaged");
    cr_expect_str_eq(first, damaged, "the run past a damaged cache file trained differently");
    free(damaged);
    run("repaired", cache_dir);
    cr_expect(strstr(out, "data: training: 108 decoded images read from the disk cache "), "%s", out);

    /* a cache folder that cannot be made (under a plain file): a warning, and the run as without the file */
    support_write_file(support_path("plain"), "not a folder");
    snprintf(cache_dir, sizeof cache_dir, "%s/decoded", support_path("plain"));
    run("unwritable", cache_dir);
    snprintf(want, sizeof want, "warning: data.cache: disk: training: cannot make the cache folder %s: Not a directory",
             cache_dir);
    cr_expect(strstr(out, want), "'%s' not in: %s", want, out);
    char *unwritable = computed_of("unwritable");
    cr_expect_str_eq(first, unwritable, "the run without its cache folder trained differently");
    free(unwritable);
    free(first);
}
