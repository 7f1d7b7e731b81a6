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
    cr_expect_float_eq(tr_schedule_lr(&c, 0, 100), 0.025, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 1, 100), 0.05, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 3, 100), 0.1, 1e-15);
    cr_expect_eq(tr_schedule_lr(&c, 4, 100), 0.1);
    cr_expect_eq(tr_schedule_lr(&c, 99, 100), 0.1);
}

Test(schedule, step_decay_counts_steps)
{
    tr_config c = base("step", 0);
    c.schedule.step_size = 10;
    c.schedule.gamma = 0.5;
    cr_expect_eq(tr_schedule_lr(&c, 0, 100), 0.1);
    cr_expect_eq(tr_schedule_lr(&c, 9, 100), 0.1);
    cr_expect_float_eq(tr_schedule_lr(&c, 10, 100), 0.05, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 25, 100), 0.025, 1e-15);
}

Test(schedule, cosine_after_warmup_reaches_min_lr)
{
    tr_config c = base("cosine", 10);
    c.schedule.min_lr = 0.01;
    /* step 10: p = 0 -> lr; step 60: p = 0.5 -> (lr + min)/2; step 110: p = 1 -> min_lr. total = 110. */
    cr_expect_float_eq(tr_schedule_lr(&c, 9, 110), 0.1, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 10, 110), 0.1, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 60, 110), 0.055, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 35, 110), 0.01 + 0.09 * 0.5 * (1 + cos(3.14159265358979323846 / 4)), 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 110, 110), 0.01, 1e-15);
    cr_expect_float_eq(tr_schedule_lr(&c, 500, 110), 0.01, 1e-15);
}
