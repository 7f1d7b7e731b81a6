/*
 * test_recipes.c -- the training recipes end to end: multi-label and regression configs on python3-sklearn's real
 * tables, the confusion matrix and top-k of a classification run, EMA evaluation with zero memory growth over
 * 3,000 steps, a resume that stays bit-identical with the EMA on, gradient accumulation equal to one big batch,
 * and weight-decay exclusion as two param_groups.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "run.h"
#include "support.h"
#include "trainrun_shim.h"

#define SKLEARN "/usr/lib/python3/dist-packages/sklearn/datasets/data"

TestSuite(recipes, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

static void require_sklearn(void)
{
    if (access(SKLEARN "/breast_cancer.csv", R_OK) != 0)
        support_skip("python3-sklearn's data sets are not installed (scripts/setup.sh installs them)");
}

/* configs/<config> with `extra` overrides, run.dir = the temp dir, run.name = name, no progress line. */
static void load(tr_config *cfg, const char *config, const char *name, const char *const *extra)
{
    tr_error err = {0};
    char path[1024], kv[512];
    tr_config_defaults(cfg);
    snprintf(path, sizeof path, "%s/configs/%s", TR_SOURCE_DIR, config);
    cr_assert_eq(tr_config_load_file(cfg, path, &err), TR_OK, "%s", err.msg);
    for (int i = 0; extra && extra[i]; i++) cr_assert_eq(tr_config_override(cfg, extra[i], &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.dir=%s", support_tmpdir);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.name=%s", name);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_config_override(cfg, "log.progress=never", &err), TR_OK);
}

static tr_summary run(const char *config, const char *name, const char *const *extra)
{
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    load(&cfg, config, name, extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s: %s", config, err.msg);
    return s;
}

Test(recipes, multi_label_breast_cancer_reports_f1_for_live_and_ema_weights)
{
    require_sklearn();
    const tr_summary s = run("breast_cancer_bce.yaml", "bc", NULL);
    cr_assert(s.test_live.has && s.test_ema.has && s.val_live.has && s.val_ema.has);
    cr_expect_eq(s.test_live.samples, 114);
    cr_expect_gt(s.test_live.micro_f1, 0.9, "test micro-F1 %g", s.test_live.micro_f1);
    cr_expect_gt(s.test_ema.micro_f1, 0.9, "test micro-F1 (EMA) %g", s.test_ema.micro_f1);
    cr_expect_eq(s.test_live.micro_f1, s.test_live.macro_f1, "K = 1: micro and macro F1 coincide");
    cr_expect_neq(s.test_live.loss, s.test_ema.loss, "the EMA weights are evaluated, not the live ones twice");
    cr_expect_eq(support_count_records(s.run_dir, "\"weights\":\"ema\""), 40 + 1,
                 "one EMA record per epoch (40) and the test");
    cr_expect_eq(support_count_records(s.run_dir, "\"micro_f1\""), 2 * 40 + 2);
    char path[1200], text[4096];
    snprintf(path, sizeof path, "%s/summary.json", s.run_dir);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "\"test_ema_metrics\":{\"samples\":114") != NULL, "%s", text);
}

Test(recipes, multi_label_k4_digits_attributes)
{
    require_sklearn();
    const char *const extra[] = {"train.epochs=8", NULL};
    const tr_summary s = run("digits_attributes_bce.yaml", "digits", extra);
    cr_assert(s.test_live.has && s.test_ema.has);
    cr_expect_eq(s.test_live.samples, 360);
    cr_expect_gt(s.test_live.micro_f1, 0.85, "test micro-F1 %g", s.test_live.micro_f1);
    cr_expect_gt(s.test_live.macro_f1, 0.85, "test macro-F1 %g", s.test_live.macro_f1);
    cr_expect_neq(s.test_live.micro_f1, s.test_live.macro_f1, "K = 4: micro and macro F1 differ");
    /* per-class counts: four entries each, and TP + FN = the positives of each attribute among the 360 test rows */
    cr_expect_eq(support_count_records(s.run_dir, "\"split\":\"test\""), 2);
    char path[1200], text[1 << 16];
    snprintf(path, sizeof path, "%s/metrics.jsonl", s.run_dir);
    support_read_file(path, text, sizeof text);
    const char *rec = strstr(text, "\"split\":\"test\"");
    cr_assert_not_null(rec);
    long long t[4], f[4];
    const char *p = strstr(rec, "\"tp\":[");
    cr_assert_not_null(p);
    cr_assert_eq(sscanf(p, "\"tp\":[%lld,%lld,%lld,%lld]", &t[0], &t[1], &t[2], &t[3]), 4);
    p = strstr(rec, "\"fn\":[");
    cr_assert_not_null(p);
    cr_assert_eq(sscanf(p, "\"fn\":[%lld,%lld,%lld,%lld]", &f[0], &f[1], &f[2], &f[3]), 4);
    long long positives = 0;
    for (int i = 0; i < 4; i++) positives += t[i] + f[i];
    cr_expect_gt(positives, 360, "digits have 0 to 3 attributes; 360 rows hold more than 360 positives (%lld)",
                 positives);
}

Test(recipes, regression_diabetes_and_multi_target_linnerud)
{
    require_sklearn();
    const tr_summary d = run("diabetes_regression.yaml", "diabetes", NULL);
    cr_assert(d.test_live.has);
    cr_expect_eq(d.test_live.samples, 88);
    /* standardized target: predicting the mean scores MSE about 1; the net explains a good part of the variance */
    cr_expect_lt(d.test_live.mse, 0.8, "test MSE %g", d.test_live.mse);
    cr_expect_gt(d.test_live.mse, 0.0);
    cr_expect_lt(d.test_live.mae, 0.8, "test MAE %g", d.test_live.mae);
    cr_expect(fabs(d.test_live.loss - d.test_live.mse) <= 1e-6 * d.test_live.mse,
              "the mse loss (float32 per batch) equals the MSE metric (double sums): %.9g vs %.9g", d.test_live.loss,
              d.test_live.mse);
    const tr_summary l = run("linnerud_regression.yaml", "linnerud", NULL);
    cr_assert(l.test_live.has);
    cr_expect_eq(l.test_live.samples, 5);
    cr_expect_eq(support_count_records(l.run_dir, "\"elements\":15"), 1, "5 samples x 3 targets");
    cr_expect(isfinite(l.test_live.mse) && l.test_live.mse > 0);
}

Test(recipes, classification_confusion_matrix_and_top_k)
{
    support_require_fmnist();
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    const char *const extra[] = {"train.max_steps=40", "eval.top_k=3", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "cm", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_assert(s.test_live.has);
    cr_expect_geq(s.test_live.top_k_accuracy, s.test_live.accuracy);
    cr_expect_gt(s.test_live.top_k_accuracy, 0.8, "top-3 %g", s.test_live.top_k_accuracy);
    char path[1200];
    snprintf(path, sizeof path, "%s/confusion_test.csv", s.run_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_expect_str_eq(line, "true\\pred,0,1,2,3,4,5,6,7,8,9\n");
    long long total = 0, diag = 0;
    for (int r = 0; r < 10; r++) {
        cr_assert_not_null(fgets(line, sizeof line, f));
        char *p = line;
        long row = strtol(p, &p, 10);
        cr_expect_eq(row, r);
        for (int c = 0; c < 10; c++) {
            const long long v = strtoll(p + 1, &p, 10);
            total += v;
            if (c == r) diag += v;
        }
    }
    fclose(f);
    cr_expect_eq(total, 1000);
    cr_expect_eq((double)diag / 1000.0, s.test_live.accuracy, "the diagonal holds the correct predictions");
}

/* "allocated" of every record of `type` at or after step `from` (train records carry a step). */
static int allocated_after(const char *dir, const char *type, double from, double *out, int max)
{
    static double a[4096], st[4096];
    const int n = support_read_field(dir, type, "allocated", a, st, 4096);
    int k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (st[i] >= from) out[k++] = a[i];
    return k;
}

Test(recipes, ema_every_step_and_both_evals_allocate_nothing_over_3000_steps)
{
    require_sklearn();
    const char *const extra[] = {"train.max_steps=3000", "eval.every_epoch=false", "eval.every_steps=100",
                                 "ema.every_steps=1", "eval.weights=both", "log.every_steps=50",
                                 "watchdog.every_steps=50", "watchdog.warmup_steps=200", NULL};
    const tr_summary s = run("breast_cancer_bce.yaml", "flat", extra);
    cr_assert_eq(s.steps, 3000);
    cr_assert_gt(s.baseline_bytes, 0, "a baseline was taken");
    cr_assert_leq(s.baseline_step, 300);
    static double tr[4096], ev[4096];
    const int nt = allocated_after(s.run_dir, "train", (double)s.baseline_step, tr, 4096);
    const int ne = allocated_after(s.run_dir, "eval", (double)s.baseline_step, ev, 4096);
    cr_assert_geq(nt, 55, "train records after the baseline: %d", nt);
    cr_assert_geq(ne, 2 * 28, "eval records (live and EMA) after the baseline: %d", ne);
    for (int i = 0; i < nt; i++)
        cr_expect_eq(tr[i], (double)s.baseline_bytes, "train record %d: %.0f bytes, baseline %lld", i, tr[i],
                     (long long)s.baseline_bytes);
    for (int i = 0; i < ne; i++)
        cr_expect_eq(ev[i], (double)s.baseline_bytes, "eval record %d: %.0f bytes, baseline %lld", i, ev[i],
                     (long long)s.baseline_bytes);
    cr_expect_eq(s.final_bytes, s.baseline_bytes);
    cr_expect_eq(s.growth_per_step, 0.0);
}

/* The digest of `file` in the manifest of run_dir's checkpoint of `step`. */
static void manifest_sha(const char *run_dir, long long step, const char *file, char out[65])
{
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/checkpoints/step-%010lld", run_dir, step);
    support_manifest_digest(dir, file, out);
    cr_assert_neq(out[0], '\0', "%s/MANIFEST.json lists no %s", dir, file);
}

Test(recipes, resume_with_ema_is_bit_identical)
{
    require_sklearn();
    const char *const full[] = {"train.max_steps=200", "log.every_steps=1", "eval.every_epoch=false",
                                "eval.every_steps=50", NULL};
    const tr_summary a = run("breast_cancer_bce.yaml", "a", full);
    const char *const part[] = {"train.max_steps=110", "log.every_steps=1", "eval.every_epoch=false",
                                "eval.every_steps=50", NULL};
    run("breast_cancer_bce.yaml", "b", part);
    const tr_summary b = run("breast_cancer_bce.yaml", "b", full); /* resume auto from step 110 */
    cr_assert_eq(support_count_records(b.run_dir, "\"type\":\"resume\""), 1);
    static double la[512], lb[512], sa[512], sb[512];
    const int na = support_read_field(a.run_dir, "train", "loss", la, sa, 512);
    const int nb = support_read_field(b.run_dir, "train", "loss", lb, sb, 512);
    cr_assert_eq(na, 200);
    cr_assert_eq(nb, 200);
    for (int i = 0; i < na; i++) cr_assert_eq(la[i], lb[i], "step %g: %a vs %a", sa[i], la[i], lb[i]);
    char ha[65], hb[65];
    manifest_sha(a.run_dir, 200, "ema.safetensors", ha);
    manifest_sha(b.run_dir, 200, "ema.safetensors", hb);
    cr_expect_str_eq(ha, hb, "the EMA weights after 200 steps are bit-identical");
    manifest_sha(a.run_dir, 200, "model.safetensors", ha);
    manifest_sha(b.run_dir, 200, "model.safetensors", hb);
    cr_expect_str_eq(ha, hb);
    cr_expect_eq(a.test_ema.loss, b.test_ema.loss, "%a vs %a", a.test_ema.loss, b.test_ema.loss);
    cr_expect_eq(a.test_live.loss, b.test_live.loss);
    char path[1400], text[16384];
    snprintf(path, sizeof path, "%s/checkpoints/step-0000000200/trainer.json", a.run_dir);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "\"ema_updates\":\t\"200\"") != NULL, "trainer.json carries the EMA update count");
}

Test(recipes, accumulate_2_of_16_equals_one_batch_of_32)
{
    require_sklearn();
    const char *const one[] = {"train.epochs=6", "train.batch_size=32", "log.every_steps=1", NULL};
    const char *const two[] = {"train.epochs=6", "train.batch_size=16", "train.accumulate_steps=2",
                               "log.every_steps=1", NULL};
    const tr_summary a = run("diabetes_regression.yaml", "one", one);
    const tr_summary b = run("diabetes_regression.yaml", "two", two);
    cr_assert_eq(a.steps, b.steps, "the same optimizer steps (%lld vs %lld)", (long long)a.steps, (long long)b.steps);
    static double la[512], lb[512];
    const int na = support_read_field(a.run_dir, "train", "loss", la, NULL, 512);
    const int nb = support_read_field(b.run_dir, "train", "loss", lb, NULL, 512);
    cr_assert_eq(na, nb);
    cr_assert_gt(na, 30);
    for (int i = 0; i < na; i++)
        cr_expect(fabs(la[i] - lb[i]) <= 1e-5 * fabs(la[i]), "step %d: %.9g vs %.9g", i + 1, la[i], lb[i]);
    cr_expect(fabs(a.test_live.mse - b.test_live.mse) <= 1e-5 * a.test_live.mse, "test MSE %.9g vs %.9g",
              a.test_live.mse, b.test_live.mse);
}

Test(recipes, no_decay_makes_two_param_groups)
{
    static const trs_layer layers[] = {
        {.kind = TRS_LAYER_LINEAR, .in = 4, .out = 6, .bias = 1},
        {.kind = TRS_LAYER_BATCHNORM1D, .out = 6, .eps = 1e-5, .momentum = 0.1},
        {.kind = TRS_LAYER_RELU},
        {.kind = TRS_LAYER_LINEAR, .in = 6, .out = 2, .bias = 1},
    };
    const int64_t in[1] = {4};
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, 4, in, 1, &m), TRS_OK, "%s", trs_last_error());
    const char *const globs[] = {"3.*"};
    const trs_optim_options cases[] = {
        {.kind = TRS_OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05},
        {.kind = TRS_OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05,
         .no_decay_1d = 1},
        {.kind = TRS_OPT_SGD, .lr = 1e-3, .weight_decay = 0.05, .no_decay = globs, .n_no_decay = 1},
    };
    const char *const want[][2] = {{"0.weight,0.bias,1.weight,1.bias,3.weight,3.bias", NULL},
                                   {"0.weight,3.weight", "0.bias,1.weight,1.bias,3.bias"},
                                   {"0.weight,0.bias,1.weight,1.bias", "3.weight,3.bias"}};
    for (int c = 0; c < 3; c++) {
        trs_optimizer *o = NULL;
        cr_assert_eq(trs_optimizer_create(m, &cases[c], &o), TRS_OK, "%s", trs_model_errmsg(m));
        int64_t groups = 0;
        cr_assert_eq(trs_optimizer_param_group(o, -1, &groups, NULL, NULL, 0), TRS_OK);
        cr_expect_eq(groups, want[c][1] ? 2 : 1, "case %d: %lld groups", c, (long long)groups);
        for (int64_t g = 0; g < groups && g < 2; g++) {
            char names[256];
            double wd = -1;
            cr_assert_eq(trs_optimizer_param_group(o, g, NULL, &wd, names, sizeof names), TRS_OK);
            cr_expect_str_eq(names, want[c][g], "case %d group %lld", c, (long long)g);
            cr_expect_eq(wd, g == 0 ? 0.05 : 0.0);
        }
        trs_optimizer_free(o);
    }
    trs_model_free(m);
}

Test(recipes, ema_start_step_and_every_steps_count_updates)
{
    require_sklearn();
    /* start_step 50: the EMA restarts as a copy of the weights after step 50, then updates at 55, 60, ..., 100 */
    const char *const extra[] = {"train.max_steps=100", "ema.start_step=50", "ema.every_steps=5", NULL};
    const tr_summary s = run("breast_cancer_bce.yaml", "start", extra);
    char path[1400], text[16384];
    snprintf(path, sizeof path, "%s/checkpoints/step-0000000100/trainer.json", s.run_dir);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "\"ema_updates\":\t\"10\"") != NULL, "10 updates after step 50 every 5 steps");
}
