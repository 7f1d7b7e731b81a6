/*
 * test_train.c -- end to end on a Fashion-MNIST subset: the loss falls, two runs with one seed give the same loss
 * trace bit for bit, the convnet path trains, and the CLI's config errors exit with the config-error code.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "run.h"
#include "support.h"


TestSuite(train, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

static int read_losses(const char *run_dir, double *out, int max)
{
    return support_read_field(run_dir, "train", "loss", out, NULL, max);
}

/* Run b loads its batches on the loop's thread (data.prefetch=false), run a on the prefetch thread: the traces
 * are equal bit for bit over 120 steps, which cross two epoch boundaries (46 batches of 64 an epoch). */
Test(train, mlp_loss_falls_and_trace_is_bit_identical_across_runs)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=120", NULL};
    const char *const sync_extra[] = {"train.max_steps=120", "data.prefetch=false", NULL};
    tr_config cfg;
    tr_summary s1, s2;
    tr_error err = {0};

    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "a", extra);
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_OK, "%s", err.msg);
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "b", sync_extra);
    cr_assert_eq(tr_run(&cfg, &s2, &err), TR_OK, "%s", err.msg);

    static double l1[200], l2[200];
    const int n1 = read_losses(s1.run_dir, l1, 200), n2 = read_losses(s2.run_dir, l2, 200);
    cr_assert_eq(n1, 120);
    cr_assert_eq(n2, 120);
    for (int i = 0; i < n1; i++) cr_assert_eq(l1[i], l2[i], "step %d: %a vs %a", i + 1, l1[i], l2[i]);

    double first = 0, last = 0;
    for (int i = 0; i < 10; i++) {
        first += l1[i] / 10;
        last += l1[n1 - 10 + i] / 10;
    }
    cr_expect_gt(first, 1.5, "an untrained 10-class model starts near ln 10 = 2.30, got %g", first);
    cr_expect_lt(last, 0.7 * first, "loss fell only from %g to %g", first, last);
    cr_expect_eq(s1.steps, 120);
    cr_expect(s1.has_val && s1.has_test);
    cr_expect_eq(s1.test_samples, 1000);
    cr_expect_gt(s1.test_accuracy, 0.65, "test accuracy after 120 steps: %g", s1.test_accuracy);
    cr_expect_eq(s1.test_accuracy, s2.test_accuracy);
    cr_expect_eq(s1.val_accuracy, s2.val_accuracy);

    /* The run directory holds the effective config, which loads back to the same settings. */
    char path[1200];
    snprintf(path, sizeof path, "%s/config.yaml", s1.run_dir);
    tr_config back;
    tr_config_defaults(&back);
    cr_assert_eq(tr_config_load_file(&back, path, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(back.train.max_steps, 120);
    cr_expect_eq(back.data.train_subset, 3000);
    cr_expect_eq(back.optim.lr, cfg.optim.lr);
    char spec[1024];
    tr_config_resolve_path(&back, back.model.spec, spec);
    cr_expect(access(spec, R_OK) == 0, "the run's config points at a model spec that is not there: %s", spec);
    cr_expect_eq(back.data.root[0], '/', "data.root is absolute: %s", back.data.root);

    /* ... and runs from anywhere */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd / && '%s' '%s' train.max_steps=3 run.name=rerun eval.test_at_end=false "
             "log.progress=never > /dev/null 2>&1", TR_CLI, path);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
}

Test(train, another_seed_gives_another_trace)
{
    support_require_fmnist();
    const char *const a[] = {"train.max_steps=5", "eval.test_at_end=false", NULL};
    const char *const b[] = {"train.max_steps=5", "eval.test_at_end=false", "seed=1", NULL};
    tr_config cfg;
    tr_summary s1, s2;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "s0", a);
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_OK, "%s", err.msg);
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "s1", b);
    cr_assert_eq(tr_run(&cfg, &s2, &err), TR_OK, "%s", err.msg);
    double l1[8], l2[8];
    cr_assert_eq(read_losses(s1.run_dir, l1, 8), 5);
    cr_assert_eq(read_losses(s2.run_dir, l2, 8), 5);
    cr_expect_neq(l1[0], l2[0]);
}

Test(train, convnet_trains_on_nchw_batches)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=40", "data.train_subset=1500", "eval.every_steps=0",
                                 "data.test_subset=500", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_cnn.yaml", "cnn", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    static double l[64];
    const int n = read_losses(s.run_dir, l, 64);
    cr_assert_eq(n, 40);
    cr_expect_lt((l[36] + l[37] + l[38] + l[39]) / 4, 0.8 * (l[0] + l[1] + l[2] + l[3]) / 4);
    cr_expect_gt(s.test_accuracy, 0.5, "convnet test accuracy after 40 steps: %g", s.test_accuracy);
}

/* ------------------------------------------------------------------------------------------------ the CLI */

Test(train, cli_bad_override_value_is_a_config_error)
{
    static char out[8192];
    cr_expect_eq(support_cli("configs/fashion_mnist_mlp.yaml optim.lr=abc", out, sizeof out), 2);
    cr_expect(strstr(out, "override 'optim.lr=abc': optim.lr: expected a float, got 'abc'") != NULL, "%s", out);
    cr_expect_eq(support_cli("configs/fashion_mnist_mlp.yaml optim.lrr=1", out, sizeof out), 2);
    cr_expect(strstr(out, "did you mean 'optim.lr'?") != NULL, "%s", out);
}

Test(train, cli_unknown_and_duplicate_keys_name_the_line)
{
    static char out[8192];
    char path[512], args[600];
    snprintf(path, sizeof path, "%s/unknown.yaml", support_tmpdir);
    support_write_file(path, "seed: 1\noptim:\n  name: sgd\n  lr: 0.1\n  momentun: 0.9\n");
    snprintf(args, sizeof args, "'%s'", path);
    cr_expect_eq(support_cli(args, out, sizeof out), 2);
    cr_expect(strstr(out, "unknown.yaml:5:3: optim.momentun: unknown key; did you mean 'optim.momentum'?") != NULL,
              "%s", out);

    snprintf(path, sizeof path, "%s/dup.yaml", support_tmpdir);
    support_write_file(path, "optim:\n  lr: 0.1\n  name: sgd\n  lr: 0.2\n");
    snprintf(args, sizeof args, "'%s'", path);
    cr_expect_eq(support_cli(args, out, sizeof out), 2);
    cr_expect(strstr(out, "dup.yaml:4:3: optim.lr: duplicate key (first set at line 2)") != NULL, "%s", out);
}

Test(train, cli_help_and_version)
{
    static char out[8192];
    cr_expect_eq(support_cli("--help", out, sizeof out), 0);
    cr_expect(strstr(out, "exit codes:") != NULL && strstr(out, "2  the user's input: usage, the config, a data or model file") != NULL);
    cr_expect_eq(support_cli("--version", out, sizeof out), 0);
    cr_expect(strstr(out, "(libtorch 1.") != NULL || strstr(out, "(libtorch 2.") != NULL, "%s", out);
    cr_expect_eq(support_cli("", out, sizeof out), 2);
}

Test(train, cli_short_run_with_overrides)
{
    support_require_fmnist();
    static char out[16384];
    char args[600];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml train.max_steps=50 optim.lr=1e-3 data.train_subset=2000 "
             "data.val_size=200 data.test_subset=500 run.dir='%s' run.name=cli",
             support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "steps           50") != NULL, "%s", out);
    cr_expect(strstr(out, "test            loss") != NULL, "%s", out);
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/cli/summary.json", support_tmpdir);
    cr_expect_eq(stat(path, &st), 0);
}

Test(train, readme_config_reference_is_current)
{
    /* Every row that `trainrun --config-reference` prints must stand in docs/config.md, verbatim. */
    static char out[65536];
    cr_assert_eq(support_cli("--config-reference", out, sizeof out), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/docs/config.md", TR_SOURCE_DIR);
    static char readme[1 << 18];
    support_read_file(path, readme, sizeof readme);
    int rows = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), rows++)
        cr_expect(strstr(readme, line) != NULL, "docs/config.md lacks the config reference row: %s", line);
    cr_expect_gt(rows, 40);
}

/* eval.split: test runs the periodic evaluation on the test set (time-to-accuracy benchmarks): the eval records say
 * "test" and count the test subset's 1000 samples, and the last one equals the final test evaluation. */
Test(train, eval_split_test_evaluates_the_test_set_periodically)
{
    support_require_fmnist();
    tr_config cfg;
    const char *const extra[] = {"train.max_steps=60", "eval.every_steps=30", "eval.split=test", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "split_test", extra);
    tr_summary sum;
    tr_error err = {0};
    cr_assert_eq(tr_run(&cfg, &sum, &err), TR_OK, "%s", err.msg);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", sum.run_dir);
    cr_expect_eq(support_count_records(dir, "\"split\":\"val\""), 0);
    cr_expect_eq(support_count_records(dir, "\"split\":\"test\",\"step\":30,"), 1);
    cr_expect_eq(support_count_records(dir, "\"split\":\"test\",\"step\":60,"), 2, "periodic at 60 + the final one");
    cr_expect_eq(support_count_records(dir, "\"samples\":1000,"), 3);
    cr_expect(sum.has_val && sum.has_test);
    cr_expect_eq(sum.val_accuracy, sum.test_accuracy, "same weights, same set: %.17g vs %.17g", sum.val_accuracy,
                 sum.test_accuracy);

    /* summary.json records the settings in effect: the defaults give 1 intra-op thread, BLAS 1, pinned malloc
     * thresholds (glibc) and batch prefetch. Under the sanitizer build (tests/sanitize.sh) ASan's allocator replaces
     * glibc's and refuses mallopt: the run warns, goes on with the allocator's defaults and records false. */
#ifdef TRAINRUN_SANITIZE
    const char *const malloc_tuned = "\"malloc_tuning\":false,\"prefetch\":true";
#else
    const char *const malloc_tuned = "\"malloc_tuning\":true,\"prefetch\":true";
#endif
    char path[1200], text[4096];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "\"threads\":{\"intra_op\":1,\"inter_op\":1,\"blas\":1}") != NULL, "%s", text);
    cr_expect(strstr(text, malloc_tuned) != NULL, "expected %s in %s", malloc_tuned, text);
}

/* data.augment: the same augmented batches on the prefetch thread and on the loop's thread (bit-identical traces
 * over 100 steps, two epoch boundaries), not the unaugmented ones, and refused for data without images. */
Test(train, augmented_runs_are_bit_identical_and_augment_only_images)
{
    support_require_fmnist();
    const char *const aug[] = {"train.max_steps=100", "data.augment.crop_padding=2", "data.augment.hflip=0.5", NULL};
    const char *const aug_sync[] = {"train.max_steps=100", "data.augment.crop_padding=2", "data.augment.hflip=0.5",
                                    "data.prefetch=false", NULL};
    const char *const plain[] = {"train.max_steps=100", NULL};
    tr_config cfg;
    tr_summary s1, s2, s3;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "aug-a", aug);
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_OK, "%s", err.msg);
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "aug-b", aug_sync);
    cr_assert_eq(tr_run(&cfg, &s2, &err), TR_OK, "%s", err.msg);
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "aug-plain", plain);
    cr_assert_eq(tr_run(&cfg, &s3, &err), TR_OK, "%s", err.msg);
    static double l1[128], l2[128], l3[128];
    cr_assert_eq(read_losses(s1.run_dir, l1, 128), 100);
    cr_assert_eq(read_losses(s2.run_dir, l2, 128), 100);
    cr_assert_eq(read_losses(s3.run_dir, l3, 128), 100);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(l1[i], l2[i], "step %d: %a (prefetch) vs %a (loop thread)", i + 1, l1[i], l2[i]);
        differ += l1[i] != l3[i];
    }
    /* step 1 runs the same weights on other pixels: its loss differs already */
    cr_expect(l1[0] != l3[0] && differ == 100, "%d of 100 losses differ from the unaugmented run's", differ);
    cr_expect_gt(s1.test_accuracy, 0.6, "augmented MLP, 100 steps: test accuracy %g", s1.test_accuracy);

    char path[1024];
    snprintf(path, sizeof path, "%s/configs/breast_cancer_bce.yaml", TR_SOURCE_DIR);
    tr_config_defaults(&cfg);
    cr_assert_eq(tr_config_load_file(&cfg, path, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_config_override(&cfg, "data.augment.hflip=0.5", &err), TR_OK, "%s", err.msg);
    char kv[600];
    snprintf(kv, sizeof kv, "run.dir=%s", support_tmpdir);
    cr_assert_eq(tr_config_override(&cfg, kv, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_E_CONFIG, "%s", err.msg);
    cr_expect(strstr(err.msg, "data.augment.hflip: augmentation needs image samples [C, H, W]; this data set's "
                              "samples are flat feature vectors") != NULL, "%s", err.msg);

    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "aug-big", (const char *const[]){
                              "data.augment.crop_padding=28", NULL});
    cr_assert_eq(tr_run(&cfg, &s1, &err), TR_E_CONFIG, "%s", err.msg);
    cr_expect_str_eq(err.msg, "data.augment.crop_padding: 28 pixels is not smaller than the 28 x 28 images");
}
