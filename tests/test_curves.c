/*
 * test_curves.c -- what a run shows of itself: metrics.csv (Lightning's CSVLogger shape) holds the numbers of
 * metrics.jsonl with the records a resume superseded dropped, by the documented rule; curves.png is a PNG that a
 * real decoder (cairo's libpng reader) reads at the documented size; `trainrun plot` overlays two runs.
 */
#include <cairo/cairo.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "history.h"
#include "plot.h"
#include "run.h"
#include "support.h"

TestSuite(curves, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

/* The rule, on scripted lines: a resume at step 20 drops the later records and the partial window. */
Test(curves, resume_rule_drops_superseded_records)
{
    const char *lines[] = {
        "{\"type\":\"train\",\"step\":10,\"epoch\":0,\"loss\":2.5,\"accuracy\":0.1,\"lr\":0.001,\"samples_per_s\":5,\"time_s\":1}",
        "{\"type\":\"train\",\"step\":20,\"epoch\":0,\"loss\":2.0,\"accuracy\":0.2,\"lr\":0.001,\"samples_per_s\":5,\"time_s\":2}",
        "{\"type\":\"eval\",\"split\":\"val\",\"step\":20,\"epoch\":0,\"weights\":\"live\",\"loss\":1.9,\"accuracy\":0.3}",
        "{\"type\":\"checkpoint\",\"step\":20,\"reason\":\"steps\"}",
        "{\"type\":\"train\",\"step\":30,\"epoch\":0,\"loss\":1.5,\"accuracy\":0.4,\"lr\":0.001,\"samples_per_s\":5,\"time_s\":3}",
        "{\"type\":\"train\",\"step\":33,\"epoch\":0,\"loss\":1.4,\"accuracy\":0.4,\"lr\":0.001,\"samples_per_s\":5,\"time_s\":3,\"partial\":true}",
        "not json at all",
        "{\"type\":\"resume\",\"step\":20,\"epoch\":0,\"position\":1280,\"checkpoint\":\"x\"}",
        "{\"type\":\"train\",\"step\":30,\"epoch\":0,\"loss\":1.5,\"accuracy\":0.4,\"lr\":0.001,\"samples_per_s\":6,\"time_s\":4}",
    };
    const char *path = support_path("metrics.jsonl");
    FILE *f = fopen(path, "w");
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) fprintf(f, "%s\n", lines[i]);
    fclose(f);
    tr_history h = {0};
    tr_error err = {0};
    cr_assert_eq(tr_history_load(&h, path, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(h.skipped, 1);
    const long long steps[] = {10, 20, 20, 20, 20, 30};
    const tr_hist_type types[] = {TR_HIST_TRAIN, TR_HIST_TRAIN, TR_HIST_EVAL, TR_HIST_OTHER, TR_HIST_RESUME,
                                  TR_HIST_TRAIN};
    cr_assert_eq(h.n, 6);
    for (size_t i = 0; i < h.n; i++) {
        cr_assert_eq(h.r[i].step, steps[i], "record %zu", i);
        cr_assert_eq(h.r[i].type, types[i], "record %zu", i);
    }
    double v;
    cr_assert(tr_hist_get(&h.r[5], "samples_per_s", &v) && v == 6.0, "the resumed run's record, not the first's");
    cr_assert(tr_hist_get(&h.r[2], "val_accuracy", &v) && v == 0.3);
    FILE *mem = tmpfile();
    cr_assert_eq(tr_history_write_csv(&h, mem), TR_OK);
    rewind(mem);
    char text[2048];
    const size_t n = fread(text, 1, sizeof text - 1, mem);
    text[n] = '\0';
    fclose(mem);
    cr_assert_str_eq(text, "step,epoch,train_loss,train_accuracy,lr,samples_per_s,time_s,val_loss,val_accuracy\n"
                           "10,0,2.5,0.1,0.001,5,1,,\n"
                           "20,0,2,0.2,0.001,5,2,,\n"
                           "20,0,,,,,,1.9,0.3\n"
                           "30,0,1.5,0.4,0.001,6,4,,\n");
    tr_history_free(&h);
}

/* Split a CSV line (no quoting: trainrun writes none) into at most max cells. */
static int cells(char *line, char **out, int max)
{
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; n < max;) {
        out[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = '\0';
        p = c + 1;
    }
    return n;
}

/* metrics.csv of run_dir equals the history of its metrics.jsonl: a row per train / eval record, each cell the
 * record's number (or empty). Returns the rows. */
static int check_csv(const char *run_dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    tr_history h = {0};
    tr_error err = {0};
    cr_assert_eq(tr_history_load(&h, path, &err), TR_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/metrics.csv", run_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char header[8192], line[8192];
    char *cols[64], *vals[64];
    cr_assert_not_null(fgets(header, sizeof header, f));
    const int nc = cells(header, cols, 64);
    cr_assert_str_eq(cols[0], "step");
    cr_assert_str_eq(cols[1], "epoch");
    size_t i = 0;
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        while (i < h.n && h.r[i].type != TR_HIST_TRAIN && h.r[i].type != TR_HIST_EVAL) i++;
        cr_assert_lt(i, h.n, "more CSV rows than records");
        const tr_hist_record *r = &h.r[i++];
        cr_assert_eq(cells(line, vals, 64), nc);
        cr_assert_eq(strtoll(vals[0], NULL, 10), r->step);
        for (int c = 2; c < nc; c++) {
            double want;
            if (!tr_hist_get(r, cols[c], &want) || !isfinite(want)) {
                cr_assert_str_eq(vals[c], "", "row %d %s", rows, cols[c]);
                continue;
            }
            cr_assert_eq(strtod(vals[c], NULL), want, "row %d (step %lld) %s: %s vs %.17g", rows, (long long)r->step,
                         cols[c], vals[c], want);
        }
        rows++;
    }
    fclose(f);
    while (i < h.n && h.r[i].type != TR_HIST_TRAIN && h.r[i].type != TR_HIST_EVAL) i++;
    cr_assert_eq(i, h.n, "fewer CSV rows than records");
    tr_history_free(&h);
    return rows;
}

/* A stop after step 45 (a partial window: log.every_steps 10), then a resume to step 60: metrics.csv holds the
 * uninterrupted history, checked here in C and with Python's csv module (tests/check_metrics_csv.py, run when
 * Debian's python3 is there); curves.png decodes at 1200 x 1240. */
Test(curves, csv_and_png_after_a_stop_and_resume)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=60", "eval.every_steps=20", "log.every_steps=10",
                                 "checkpoint.every_seconds=0", NULL};
    tr_config cfg;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "r", extra);
    tr_run_state *run = NULL;
    int rc = tr_run_open(&cfg, NULL, &run, &err);
    for (int k = 0; rc == TR_OK && k < 45; k++) rc = tr_run_step(run, &err);
    cr_assert_eq(rc, TR_OK, "%s", err.msg);
    tr_run_request_stop(run);
    while (rc == TR_OK) rc = tr_run_step(run, &err);
    if (rc == TR_RUN_DONE) rc = tr_run_finish(run, &err);
    cr_assert_eq(tr_run_close(run, rc, &err, NULL), TR_E_SIGNAL, "%s", err.msg);
    char dir[800];
    snprintf(dir, sizeof dir, "%s/r", support_tmpdir);
    cr_assert_eq(support_count_records(dir, "\"partial\":true"), 1);
    tr_summary s;
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(s.steps, 60);
    /* 6 train rows (10..60), 3 val rows, 1 test row: the partial window at 45 is gone */
    cr_assert_eq(check_csv(dir), 10);
    if (access("/usr/bin/python3", X_OK) == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/check_metrics_csv.py' '%s'", TR_SOURCE_DIR, dir);
        cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    } else {
        cr_log_warn("/usr/bin/python3 absent: metrics.csv checked in C only");
    }
    char png[1200];
    snprintf(png, sizeof png, "%s/curves.png", dir);
    cairo_surface_t *img = cairo_image_surface_create_from_png(png);
    cr_assert_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS, "%s: %s", png,
                 cairo_status_to_string(cairo_surface_status(img)));
    cr_assert_eq(cairo_image_surface_get_width(img), TR_PLOT_WIDTH);
    cr_assert_eq(cairo_image_surface_get_height(img), TR_PLOT_HEIGHT);
    /* not blank, not filled: between 1% and 40% of the pixels are not white */
    cairo_surface_flush(img);
    const unsigned char *data = cairo_image_surface_get_data(img);
    const int stride = cairo_image_surface_get_stride(img);
    long ink = 0;
    for (int y = 0; y < TR_PLOT_HEIGHT; y++)
        for (int x = 0; x < TR_PLOT_WIDTH; x++) ink += (*(const uint32_t *)(data + y * stride + 4 * x) & 0xffffff) != 0xffffff;
    const long all = (long)TR_PLOT_WIDTH * TR_PLOT_HEIGHT;
    cr_assert(ink > all / 100 && ink < all * 2 / 5, "%ld of %ld pixels drawn", ink, all);
    /* the four panels' axes: each frame's left edge (x = 118) is dark down the middle of its plotting area
     * (panels at y = 52 + k * 284, a 46-pixel title strip, then 200 pixels of area; plot.c's layout) */
    for (int k = 0; k < 4; k++) {
        const int y = 52 + k * 284 + 46 + 100;
        const uint32_t px = *(const uint32_t *)(data + y * stride + 4 * 118) & 0xffffff;
        cr_assert_lt(px & 0xff, 0x80, "panel %d: no axis at (118, %d): pixel %06x", k, y, px);
    }
    cairo_surface_destroy(img);
}

/* `trainrun plot A B -o FILE` draws both runs (a legend line more); a directory without metrics.jsonl is refused
 * with exit code 1 naming the file, no directory at all with 2. */
Test(curves, plot_overlays_two_runs)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=20", "eval.every_steps=10", "eval.test_at_end=false", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "one", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    const char *const extra2[] = {"train.max_steps=20", "eval.every_steps=10", "eval.test_at_end=false",
                                  "optim.lr=3e-3", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "two", extra2);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    char args[2048], out[4096];
    const char *png = support_path("both.png");
    snprintf(args, sizeof args, "plot '%s/one' '%s/two' -o '%s'", support_tmpdir, support_tmpdir, png);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cairo_surface_t *img = cairo_image_surface_create_from_png(png);
    cr_assert_eq(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    cr_assert_eq(cairo_image_surface_get_width(img), TR_PLOT_WIDTH);
    cr_assert_eq(cairo_image_surface_get_height(img), TR_PLOT_HEIGHT + 22);
    cairo_surface_destroy(img);
    snprintf(args, sizeof args, "plot '%s' -o '%s'", support_tmpdir, png);
    cr_assert_eq(support_cli(args, out, sizeof out), 2, "not a run directory is the user's input: %s", out);
    cr_assert(strstr(out, "metrics.jsonl: cannot read"), "%s", out);
    cr_assert_eq(support_cli("plot", out, sizeof out), 2, "%s", out);
}

/* `trainrun plot --help` is help, not an error; the loss goes on a log axis when it spans more than two decades. */
Test(curves, plot_help_and_the_log_axis_rule)
{
    char out[4096];
    cr_expect_eq(support_cli("plot --help", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "usage: trainrun plot RUN_DIR") && strstr(out, "log axis"), "%s", out);
    cr_expect_eq(tr_plot_log_axis(1e-4, 2.3), 1);
    cr_expect_eq(tr_plot_log_axis(0.02, 2.3), 1);
    cr_expect_eq(tr_plot_log_axis(0.3, 2.3), 0);
    cr_expect_eq(tr_plot_log_axis(0.0, 2.3), 0, "a zero loss cannot go on a log axis");
    cr_expect_eq(tr_plot_log_axis(-1.0, 2.3), 0);
    /* a run whose loss falls from 2.3 to 1e-4 draws (looked at: the loss panel reads 1e-4 .. 1e1) */
    char dir[600], line[700];
    snprintf(dir, sizeof dir, "%s/fall", support_tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(line, sizeof line, "%s/metrics.jsonl", dir);
    FILE *f = fopen(line, "w");
    cr_assert_not_null(f);
    for (int step = 1; step <= 100; step++) { /* killed after step 50 and resumed from its checkpoint there */
        fprintf(f,
                "{\"type\":\"train\",\"step\":%d,\"epoch\":0,\"loss\":%.6g,\"accuracy\":0.5,\"lr\":0.001,"
                "\"allocated\":1048576,\"reserved\":2097152}\n",
                step, 2.3 * pow(1e-4 / 2.3, (step - 1) / 99.0));
        if (step == 50)
            fprintf(f, "{\"type\":\"resume\",\"step\":50,\"epoch\":0,\"position\":0,\"checkpoint\":\"c\"}\n");
    }
    fclose(f);
    /* a run 20x shorter, to compare with */
    char sdir[600];
    snprintf(sdir, sizeof sdir, "%s/short", support_tmpdir);
    cr_assert_eq(mkdir(sdir, 0755), 0);
    snprintf(line, sizeof line, "%s/metrics.jsonl", sdir);
    f = fopen(line, "w");
    cr_assert_not_null(f);
    for (int step = 1; step <= 5; step++)
        fprintf(f,
                "{\"type\":\"train\",\"step\":%d,\"epoch\":0,\"loss\":%.6g,\"accuracy\":0.5,\"lr\":0.001,"
                "\"allocated\":1048576,\"reserved\":2097152}\n",
                step, 2.3 - 0.3 * step);
    fclose(f);
    char args[1400];
    snprintf(args, sizeof args, "plot '%s' -o '%s'", dir, support_path("fall.png"));
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect_null(strstr(out, "hint:"), "one run: no hint: %s", out);
    snprintf(args, sizeof args, "plot '%s' '%s' -o '%s'", dir, sdir, support_path("both_steps.png"));
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "hint: the longest run is 20x the shortest; --x fraction draws each over its own length"),
              "%s", out);
    snprintf(args, sizeof args, "plot '%s' '%s' --x fraction -o '%s'", dir, sdir, support_path("both_fraction.png"));
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect_null(strstr(out, "hint:"), "%s", out);
    snprintf(args, sizeof args, "plot '%s' --x steps", dir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "--x: 'steps' is not step or fraction") != NULL, "%s", out);
    /* TRAINRUN_KEEP_PLOT=DIR keeps the pictures, to look at */
    const char *keep = getenv("TRAINRUN_KEEP_PLOT");
    if (keep) {
        snprintf(args, sizeof args, "cp '%s' '%s' '%s' '%s'", support_path("fall.png"), support_path("both_steps.png"),
                 support_path("both_fraction.png"), keep);
        cr_expect_eq(system(args), 0);
    }
}
