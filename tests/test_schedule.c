/*
 * test_schedule.c -- learning-rate schedules against their closed forms (values worked by hand).
 */
#include <criterion/criterion.h>
#include <math.h>

#include "config.h"
#include "schedule.h"

static tr_config base(const char *name, int64_t warmup)
{
    tr_config c;
    tr_error err = {0};
    tr_config_defaults(&c);
    c.optim.lr = 0.1;
    c.schedule.warmup_steps = warmup;
    char kv[64];
    snprintf(kv, sizeof kv, "schedule.name=%s", name);
    cr_assert_eq(tr_config_override(&c, kv, &err), TR_OK, "%s", err.msg);
    return c;
}

Test(schedule, constant_with_linear_warmup)
{
    tr_config c = base("constant", 4);
    cr_expect_float_eq(tr_schedule_lr(&c, 0, 100, 1), 0.025, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 1, 100, 1), 0.05, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 3, 100, 1), 0.1, 1e-15);
    cr_expect_eq(tr_schedule_lr(&c, 4, 100, 1), 0.1);
    cr_expect_eq(tr_schedule_lr(&c, 99, 100, 1), 0.1);
}

Test(schedule, step_decay_counts_steps)
{
    tr_config c = base("step", 0);
    c.schedule.step_size = 10;
    c.schedule.gamma = 0.5;
    cr_expect_eq(tr_schedule_lr(&c, 0, 100, 1), 0.1);
    cr_expect_eq(tr_schedule_lr(&c, 9, 100, 1), 0.1);
    cr_expect_float_eq(tr_schedule_lr(&c, 10, 100, 1), 0.05, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 25, 100, 1), 0.025, 1e-15);
}

Test(schedule, cosine_after_warmup_reaches_min_lr)
{
    tr_config c = base("cosine", 10);
    c.schedule.min_lr = 0.01;
    /* step 10: p = 0 -> lr; step 60: p = 0.5 -> (lr + min)/2; step 110: p = 1 -> min_lr. total = 110. */
    cr_expect_float_eq(tr_schedule_lr(&c, 9, 110, 1), 0.1, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 10, 110, 1), 0.1, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 60, 110, 1), 0.055, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 35, 110, 1), 0.01 + 0.09 * 0.5 * (1 + cos(3.14159265358979323846 / 4)), 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 110, 110, 1), 0.01, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 500, 110, 1), 0.01, 1e-15);
}

Test(schedule, per_epoch_step_and_multistep)
{
    /* schedule.interval: epoch with 10 steps an epoch: the counter is the epoch, as Lightning's interval "epoch" */
    tr_config c = base("step", 0);
    c.schedule.interval = TR_INTERVAL_EPOCH;
    c.schedule.step_size = 2;
    c.schedule.gamma = 0.5;
    cr_expect_eq(tr_schedule_lr(&c, 19, 100, 10), 0.1);               /* epoch 1 */
    cr_expect_float_eq(tr_schedule_lr(&c, 20, 100, 10), 0.05, 1e-15); /* epoch 2 */
    cr_expect_float_eq(tr_schedule_lr(&c, 45, 100, 10), 0.025, 1e-15);
    tr_config m = base("multistep", 0);
    tr_error err = {0};
    cr_assert_eq(tr_config_override(&m, "schedule.milestones=[3, 7]", &err), TR_OK, "%s", err.msg);
    m.schedule.gamma = 0.1;
    cr_expect_eq(tr_schedule_lr(&m, 2, 100, 1), 0.1);
    cr_expect_float_eq(tr_schedule_lr(&m, 3, 100, 1), 0.01, 1e-16);
    cr_expect_float_eq(tr_schedule_lr(&m, 7, 100, 1), 0.001, 1e-17);
    m.schedule.interval = TR_INTERVAL_EPOCH;
    cr_expect_float_eq(tr_schedule_lr(&m, 29, 100, 10), 0.1, 1e-16);  /* epoch 2 */
    cr_expect_float_eq(tr_schedule_lr(&m, 30, 100, 10), 0.01, 1e-16); /* epoch 3 */
    /* cosine per epoch: p = epoch / epochs (CosineAnnealingLR stepped per epoch, T_max = epochs) */
    tr_config k = base("cosine", 0);
    k.schedule.interval = TR_INTERVAL_EPOCH;
    cr_expect_float_eq(tr_schedule_lr(&k, 9, 100, 10), 0.1, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&k, 50, 100, 10), 0.05, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&k, 59, 100, 10), 0.05, 1e-15);
    /* multistep without milestones is a config error */
    tr_config bad = base("multistep", 0);
    bad.model.spec[0] = 'x';
    cr_expect_eq(tr_config_validate(&bad, &err), TR_E_CONFIG);
    cr_expect_str_eq(err.msg, "schedule.milestones: the multistep schedule needs at least one");
}
