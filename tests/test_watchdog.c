/*
 * test_watchdog.c -- leak-free is measured: allocated bytes stay exactly at the baseline over thousands of steps;
 * a deliberate leak is measured at its true rate, warned about and stopped before the limit; no false alarms.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "run.h"
#include "support.h"
#include "trainrun_shim.h"
#include "watchdog.h"

TestSuite(watchdog, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

/* ------------------------------------------------------------------------------------------- the logic alone */

static tr_config wd_config(void)
{
    tr_config c;
    tr_config_defaults(&c);
    c.watchdog.every_steps = 10;
    c.watchdog.window = 5;
    c.watchdog.warn_ratio = 1.2;
    c.watchdog.limit_ratio = 1.5;
    c.watchdog.limit_fraction = 0;
    return c;
}

Test(watchdog, least_squares_slope_is_exact_on_a_line)
{
    int64_t x[6], y[6];
    for (int i = 0; i < 6; i++) {
        x[i] = 1000000 + 50 * i;
        y[i] = 3000000000LL + 4096LL * 50 * i + (i % 2 ? 7 : -7); /* a line with +-7 bytes of jitter */
    }
    /* slope of the jitter alone: sum((x - mx) * j) / sum((x - mx)^2), worked by hand = 14*50*(...); just bound it */
    const double s = tr_least_squares_slope(x, y, 6);
    cr_expect(fabs(s - 4096.0) < 0.2, "slope %f", s);
    for (int i = 0; i < 6; i++) y[i] = 1000 + 3 * (x[i] - x[0]);
    cr_expect_eq(tr_least_squares_slope(x, y, 6), 3.0);
    cr_expect_eq(tr_least_squares_slope(x, y, 1), 0.0);
}

Test(watchdog, baseline_warn_once_and_limit_before_it_is_reached)
{
    tr_config c = wd_config();
    tr_watchdog wd;
    tr_error err = {0};
    cr_assert_eq(tr_watchdog_init(&wd, &c, 0, &err), TR_OK);
    tr_watchdog_report r;
    cr_expect_eq(tr_watchdog_sample(&wd, 10, 900, 0, &r), TR_WD_EV_NONE, "no baseline before warm-up");
    cr_expect_eq(tr_watchdog_sample(&wd, 20, 1000, 1, &r), TR_WD_EV_BASELINE);
    cr_expect_eq(r.baseline, 1000);
    cr_expect_eq(r.limit, 1500);
    /* Grow 10 bytes per step: 1100 at 30, ..., 1210 > 1.2 x 1000 at step 41 -> sampled at 50 (1300). */
    int warned_at = -1, limit_at = -1;
    for (int64_t step = 30; step <= 200 && limit_at < 0; step += 10) {
        const int64_t bytes = 1000 + 10 * (step - 20);
        const tr_watchdog_event ev = tr_watchdog_sample(&wd, step, bytes, 1, &r);
        if (ev == TR_WD_EV_WARN) {
            cr_expect_eq(warned_at, -1, "warned twice");
            warned_at = (int)step;
        }
        if (ev == TR_WD_EV_LIMIT) limit_at = (int)step;
    }
    cr_expect_eq(warned_at, 50);
    cr_expect_float_eq(r.growth_per_step, 10.0, 1e-9);
    /* 1500 is reached at step 70; the sample at 60 (1400) sees 1400 + 10 * 10 >= 1500: it stops one sample early. */
    cr_expect_eq(limit_at, 60);
    cr_expect_lt(r.current, r.limit);
    cr_expect_float_eq(r.steps_left, 10.0, 1e-9);
    tr_watchdog_free(&wd);
}

Test(watchdog, flat_memory_never_warns)
{
    tr_config c = wd_config();
    tr_watchdog wd;
    tr_error err = {0};
    cr_assert_eq(tr_watchdog_init(&wd, &c, 0, &err), TR_OK);
    tr_watchdog_report r;
    cr_expect_eq(tr_watchdog_sample(&wd, 10, 5000, 1, &r), TR_WD_EV_BASELINE);
    for (int64_t step = 20; step < 100000; step += 10)
        cr_assert_eq(tr_watchdog_sample(&wd, step, 5000, 1, &r), TR_WD_EV_NONE);
    cr_expect_eq(r.growth_per_step, 0.0);
    cr_expect_eq(r.steps_left, -1.0);
    tr_watchdog_free(&wd);
}

/* ------------------------------------------------------------------------------------------- real training */

/* Train `steps` steps with watchdog samples every 50 and a train record every 50; then every record's
 * "allocated" from the baseline step on must equal the baseline, exactly. */
static void assert_flat(const char *name, const char *const *extra_in)
{
    support_require_fmnist();
    const char *extra[16] = {"log.every_steps=50", "watchdog.every_steps=50", "eval.every_steps=300",
                             "eval.test_at_end=false"};
    int n = 4;
    for (int i = 0; extra_in[i]; i++) extra[n++] = extra_in[i];
    extra[n] = NULL;
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", name, extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(s.baseline_step, 300, "baseline waits for warm-up (200 steps) and the first eval (step 300)");
    cr_assert_gt(s.baseline_bytes, 0);

    support_assert_flat(&s, (int)(s.steps / 50));
}

Test(watchdog, adamw_with_weight_decay_and_evals_is_flat_over_3000_steps)
{
    const char *const extra[] = {"train.max_steps=3000", "optim.name=adamw", "optim.weight_decay=0.05", NULL};
    assert_flat("adamw", extra);
}

Test(watchdog, sgd_momentum_with_weight_decay_is_flat_over_3000_steps)
{
    const char *const extra[] = {"train.max_steps=3000", "optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9",
                                 "optim.weight_decay=5e-4", NULL};
    assert_flat("sgd", extra);
}

Test(watchdog, leak_is_measured_warned_and_stopped_before_the_limit)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=5000",  "log.every_steps=50",         "watchdog.every_steps=50",
                                 "eval.every_steps=300",  "debug.leak_bytes_per_step=4096", "watchdog.limit_ratio=1.5",
                                 "watchdog.action=checkpoint_exit", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "leak", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_E_WATCHDOG, "%s", err.msg);
    cr_expect(s.watchdog_stopped);
    cr_expect_lt(s.steps, 5000);
    cr_expect(fabs(s.growth_per_step - 4096.0) <= 0.1 * 4096.0, "growth %f bytes/step", s.growth_per_step);

    double g[8], lim[8], alloc[8];
    cr_assert_eq(support_read_field(s.run_dir, "watchdog", "growth_per_step", g, NULL, 8), 3, "baseline, warn, limit");
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"warn\""), 1);
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"limit\""), 1);
    support_read_field(s.run_dir, "watchdog", "limit", lim, NULL, 8);
    support_read_field(s.run_dir, "watchdog", "allocated", alloc, NULL, 8);
    cr_expect_float_eq(lim[2], floor(1.5 * (double)s.baseline_bytes), 1.0);
    cr_expect_lt(alloc[2], lim[2], "stopped before the limit: %.0f < %.0f", alloc[2], lim[2]);
    cr_expect_gt(alloc[1], 1.2 * (double)s.baseline_bytes, "the warning came past warn_ratio");
}

Test(watchdog, ten_thousand_leak_free_steps_raise_no_alarm)
{
    support_require_fmnist();
    char model[600], kv[700];
    snprintf(model, sizeof model, "%s/tiny.yaml", support_tmpdir);
    support_write_file(model, "input: [1, 28, 28]\nlayers:\n  - flatten\n  - linear: {in: 784, out: 16}\n"
                              "  - relu\n  - dropout: {p: 0.1}\n  - linear: {in: 16, out: 10}\n");
    snprintf(kv, sizeof kv, "model.spec=%s", model);
    const char *const extra[] = {"train.max_steps=10000", "train.batch_size=16", "log.every_steps=500",
                                 "watchdog.every_steps=50", "eval.every_steps=1000", "eval.test_at_end=false",
                                 "watchdog.warn_ratio=1.01", kv, NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "long", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(s.steps, 10000);
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"baseline\""), 1);
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"warn\""), 0);
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"limit\""), 0);
    cr_expect_eq(s.final_bytes, s.baseline_bytes);
    cr_expect_eq(s.growth_per_step, 0.0);
}

Test(watchdog, counting_allocator_sees_tensor_memory)
{
    /* A model's parameters are counted: 784*16+16 + 16*10+10 floats = 12730 * 4 bytes at least. */
    trs_memory_stats before, after;
    cr_assert_eq(trs_memory_stats_get(&before), TRS_OK);
    const trs_layer layers[] = {{.kind = TRS_LAYER_LINEAR, .in = 784, .out = 16, .bias = 1},
                                {.kind = TRS_LAYER_LINEAR, .in = 16, .out = 10, .bias = 1}};
    const int64_t shape[1] = {784};
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, 2, shape, 1, &m), TRS_OK, "%s", trs_last_error());
    cr_assert_eq(trs_memory_stats_get(&after), TRS_OK);
    cr_expect_eq(after.allocated_bytes - before.allocated_bytes, 12730 * 4, "delta %lld",
                 (long long)(after.allocated_bytes - before.allocated_bytes));
    cr_expect_eq(after.live_allocations - before.live_allocations, 4);
    cr_expect_geq(after.peak_bytes, after.allocated_bytes);
    cr_expect_gt(after.total_allocations, before.total_allocations);
    trs_model_free(m);
    cr_assert_eq(trs_memory_stats_get(&after), TRS_OK);
    cr_expect_eq(after.allocated_bytes, before.allocated_bytes, "freeing the model returns every byte");
    cr_expect_eq(after.cuda_devices, 0);
}
