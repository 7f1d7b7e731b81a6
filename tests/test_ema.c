/*
 * test_ema.c -- the EMA in the shim: exact against the closed form after k updates (with and without the
 * (1 + t) / (10 + t) warm-up) to float32 rounding, never requiring grad, integer buffers copied (BatchNorm's
 * num_batches_tracked), evaluation with the EMA weights leaving the live model, its mode and its gradients alone;
 * and gradient accumulation equal to one big batch.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* test-only entry points */

/* Linear(3, 2): state entries 0.weight [2, 3] and 0.bias [2], 8 floats. */
static trs_model *linear_model(void)
{
    cr_assert_eq(trs_set_threads(1, 0, 1), TRS_OK);
    cr_assert_eq(trs_manual_seed(7), TRS_OK);
    const trs_layer l = {.kind = TRS_LAYER_LINEAR, .in = 3, .out = 2, .bias = 1};
    const int64_t in[1] = {3};
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(&l, 1, in, 1, &m), TRS_OK, "%s", trs_last_error());
    return m;
}

static void read_all(trs_ema *e, trs_model *m, float w[8])
{
    if (e) {
        cr_assert_eq(trs_ema_state_read(e, 0, w, 6 * sizeof(float)), TRS_OK);
        cr_assert_eq(trs_ema_state_read(e, 1, w + 6, 2 * sizeof(float)), TRS_OK);
    } else {
        cr_assert_eq(trs_model_state_read(m, 0, w, 6 * sizeof(float)), TRS_OK);
        cr_assert_eq(trs_model_state_read(m, 1, w + 6, 2 * sizeof(float)), TRS_OK);
    }
}

static void write_live(trs_model *m, const float w[8])
{
    cr_assert_eq(trs_model_state_write(m, 0, w, 6 * sizeof(float), TRS_DTYPE_FLOAT32), TRS_OK);
    cr_assert_eq(trs_model_state_write(m, 1, w + 6, 2 * sizeof(float), TRS_DTYPE_FLOAT32), TRS_OK);
}

/* |got - want| within float32 rounding of k chained updates: k + 2 ulps of the largest magnitude involved. */
static void expect_close(const float got[8], const double want[8], int k, double scale)
{
    for (int i = 0; i < 8; i++)
        cr_expect(fabs((double)got[i] - want[i]) <= (k + 2) * FLT_EPSILON * scale, "entry %d: %.9g vs %.9g (k %d)",
                  i, (double)got[i], want[i], k);
}

TestSuite(ema);

Test(ema, constant_target_matches_closed_form_without_warmup)
{
    trs_model *m = linear_model();
    float e0[8], v[8], got[8];
    read_all(NULL, m, e0);
    const trs_ema_options o = {.decay = 0.9};
    trs_ema *e = NULL;
    cr_assert_eq(trs_ema_create(m, &o, &e), TRS_OK, "%s", trs_model_errmsg(m));
    for (int i = 0; i < 8; i++) v[i] = 0.25f * (float)(i - 3);
    write_live(m, v);
    const int k = 25;
    for (int j = 0; j < k; j++) cr_assert_eq(trs_ema_update(e), TRS_OK, "%s", trs_ema_errmsg(e));
    /* e_k = v + d^k (e_0 - v) */
    double want[8];
    for (int i = 0; i < 8; i++) want[i] = v[i] + pow(0.9, k) * ((double)e0[i] - v[i]);
    read_all(e, m, got);
    expect_close(got, want, k, 1.0);
    int64_t updates = 0;
    cr_expect_eq(trs_ema_get_updates(e, &updates), TRS_OK);
    cr_expect_eq(updates, k);
    trs_ema_free(e);
    trs_model_free(m);
}

Test(ema, varying_sequence_matches_closed_form_sum)
{
    trs_model *m = linear_model();
    float e0[8], v[8], got[8];
    read_all(NULL, m, e0);
    const double d = 0.8;
    const trs_ema_options o = {.decay = d};
    trs_ema *e = NULL;
    cr_assert_eq(trs_ema_create(m, &o, &e), TRS_OK);
    const int k = 12;
    /* v_j[i] = (j - 6) * (i + 1) / 8, exact in float; e_k = d^k e_0 + sum_j (1 - d) d^(k-j) v_j */
    double want[8];
    for (int i = 0; i < 8; i++) want[i] = pow(d, k) * e0[i];
    for (int j = 1; j <= k; j++) {
        for (int i = 0; i < 8; i++) {
            v[i] = (float)(j - 6) * (float)(i + 1) / 8.0f;
            want[i] += (1 - d) * pow(d, k - j) * v[i];
        }
        write_live(m, v);
        cr_assert_eq(trs_ema_update(e), TRS_OK);
    }
    read_all(e, m, got);
    expect_close(got, want, k, 6.0);
    trs_ema_free(e);
    trs_model_free(m);
}

Test(ema, warmup_matches_closed_form)
{
    /* decay_t = min(decay, (1 + t) / (10 + t)); with a constant target, prod_{t<k} (1 + t) / (10 + t) = 1 / C(k + 9, 9),
     * so e_k = v + (e_0 - v) / C(k + 9, 9) while the warm-up is below decay (k = 20: 20/29 < 0.9999). */
    trs_model *m = linear_model();
    float e0[8], v[8], got[8];
    read_all(NULL, m, e0);
    const trs_ema_options o = {.decay = 0.9999, .warmup = 1};
    trs_ema *e = NULL;
    cr_assert_eq(trs_ema_create(m, &o, &e), TRS_OK);
    double d0 = 0;
    cr_assert_eq(trs_ema_next_decay(e, &d0), TRS_OK);
    cr_expect_float_eq(d0, 0.1, 1e-15);
    for (int i = 0; i < 8; i++) v[i] = 1.0f - 0.125f * (float)i;
    write_live(m, v);
    const int k = 20;
    for (int j = 0; j < k; j++) cr_assert_eq(trs_ema_update(e), TRS_OK);
    double binom = 1; /* C(29, 9) */
    for (int i = 1; i <= 9; i++) binom = binom * (k + i) / i;
    double want[8];
    for (int i = 0; i < 8; i++) want[i] = v[i] + ((double)e0[i] - v[i]) / binom;
    read_all(e, m, got);
    expect_close(got, want, k, 1.0);
    /* past the warm-up the decay is capped: t = 100000 -> min(0.9999, 100001/100010) = 0.9999 */
    cr_assert_eq(trs_ema_set_updates(e, 100000), TRS_OK);
    cr_assert_eq(trs_ema_next_decay(e, &d0), TRS_OK);
    cr_expect_eq(d0, 0.9999);
    trs_ema_free(e);
    trs_model_free(m);
}

/* Flatten, Linear(16,8), BatchNorm1d(8), ReLU, Linear(8,3) on [1,4,4]. */
static const trs_layer bn_layers[] = {
    {.kind = TRS_LAYER_FLATTEN},
    {.kind = TRS_LAYER_LINEAR, .in = 16, .out = 8, .bias = 1},
    {.kind = TRS_LAYER_BATCHNORM1D, .out = 8, .eps = 1e-5, .momentum = 0.1},
    {.kind = TRS_LAYER_RELU},
    {.kind = TRS_LAYER_LINEAR, .in = 8, .out = 3, .bias = 1},
};
static const int64_t img[3] = {1, 4, 4};
static float xs[8 * 16];
static int64_t ys[8] = {0, 1, 2, 1, 0, 2, 2, 1};

static trs_model *bn_model(trs_optimizer **opt)
{
    cr_assert_eq(trs_set_threads(1, 0, 1), TRS_OK);
    cr_assert_eq(trs_manual_seed(3), TRS_OK);
    for (int i = 0; i < 8 * 16; i++) xs[i] = sinf((float)i * 0.37f);
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(bn_layers, 5, img, 3, &m), TRS_OK, "%s", trs_last_error());
    const trs_optim_options oo = {.kind = TRS_OPT_SGD, .lr = 0.1, .momentum = 0.9};
    cr_assert_eq(trs_optimizer_create(m, &oo, opt), TRS_OK, "%s", trs_model_errmsg(m));
    return m;
}

static const trs_batch batch8 = {.x = xs, .y = ys, .ndim = 4, .shape = {8, 1, 4, 4}};

/* state_dict index of 2.num_batches_tracked and 2.running_mean */
enum { RUNNING_MEAN = 4, NUM_BATCHES = 6 };

Test(ema, never_requires_grad_and_copies_integer_buffers)
{
    for (int avg = 0; avg < 2; avg++) {
        trs_optimizer *opt = NULL;
        trs_model *m = bn_model(&opt);
        const trs_ema_options o = {.decay = 0.99, .buffers_average = avg};
        trs_ema *e = NULL;
        cr_assert_eq(trs_ema_create(m, &o, &e), TRS_OK);
        char name[64];
        trs_dtype dt;
        cr_assert_eq(trs_ema_state_entry(e, NUM_BATCHES, name, sizeof name, NULL, NULL, &dt), TRS_OK);
        cr_assert_str_eq(name, "2.num_batches_tracked");
        cr_assert_eq(dt, TRS_DTYPE_INT64);
        const trs_step_options so = {0};
        trs_step_result r;
        for (int s = 0; s < 5; s++) {
            cr_assert_eq(trs_train_step(m, opt, &batch8, &so, &r), TRS_OK, "%s", trs_model_errmsg(m));
            cr_assert_eq(trs_ema_update(e), TRS_OK);
        }
        int64_t live_nbt = -1, ema_nbt = -2, rg = -1;
        cr_assert_eq(trs_model_state_read(m, NUM_BATCHES, &live_nbt, sizeof live_nbt), TRS_OK);
        cr_assert_eq(trs_ema_state_read(e, NUM_BATCHES, &ema_nbt, sizeof ema_nbt), TRS_OK);
        cr_expect_eq(live_nbt, 5);
        cr_expect_eq(ema_nbt, live_nbt, "buffers %s: EMA num_batches_tracked %lld, live %lld",
                     avg ? "average" : "copy", (long long)ema_nbt, (long long)live_nbt);
        float live_rm[8], ema_rm[8];
        cr_assert_eq(trs_model_state_read(m, RUNNING_MEAN, live_rm, sizeof live_rm), TRS_OK);
        cr_assert_eq(trs_ema_state_read(e, RUNNING_MEAN, ema_rm, sizeof ema_rm), TRS_OK);
        if (avg) cr_expect_neq(memcmp(live_rm, ema_rm, sizeof live_rm), 0, "buffers: average averages running_mean");
        else cr_expect_eq(memcmp(live_rm, ema_rm, sizeof live_rm), 0, "buffers: copy copies running_mean");
        cr_assert_eq(trs_ema_requires_grad_count(e, &rg), TRS_OK);
        cr_expect_eq(rg, 0, "%lld EMA tensors require grad", (long long)rg);
        trs_ema_free(e);
        trs_optimizer_free(opt);
        trs_model_free(m);
    }
}

Test(ema, eval_with_ema_weights_leaves_the_live_model_alone)
{
    trs_optimizer *opt = NULL;
    trs_model *m = bn_model(&opt);
    trs_ema *e = NULL;
    const trs_ema_options o = {.decay = 0.5};
    cr_assert_eq(trs_ema_create(m, &o, &e), TRS_OK);
    const trs_step_options so = {0};
    trs_step_result r, rl, re;
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(trs_train_step(m, opt, &batch8, &so, &r), TRS_OK);
        cr_assert_eq(trs_ema_update(e), TRS_OK);
    }
    uint32_t p0, g0, p1, g1;
    double ps0, gs0, ps1, gs1;
    int64_t gdef0, gdef1;
    cr_assert_eq(trs_model_digest(m, TRS_DIGEST_PARAMS, &p0, &ps0, NULL), TRS_OK);
    cr_assert_eq(trs_model_digest(m, TRS_DIGEST_GRADS, &g0, &gs0, &gdef0), TRS_OK);
    cr_assert_gt(gdef0, 0, "the train steps left gradients");
    trs_memory_stats m0, m1;
    cr_assert_eq(trs_eval_batch(m, NULL, &batch8, &so, &rl, NULL), TRS_OK);
    cr_assert_eq(trs_eval_batch(m, e, &batch8, &so, &re, NULL), TRS_OK); /* warm */
    trs_memory_stats_get(&m0);
    cr_assert_eq(trs_eval_batch(m, e, &batch8, &so, &re, NULL), TRS_OK, "%s", trs_model_errmsg(m));
    trs_memory_stats_get(&m1);
    cr_expect_eq(m1.allocated_bytes, m0.allocated_bytes);
    int training = -1;
    cr_assert_eq(trs_model_is_training(m, &training), TRS_OK);
    cr_expect_eq(training, 1, "the live model is back in train mode");
    cr_assert_eq(trs_model_digest(m, TRS_DIGEST_PARAMS, &p1, &ps1, NULL), TRS_OK);
    cr_assert_eq(trs_model_digest(m, TRS_DIGEST_GRADS, &g1, &gs1, &gdef1), TRS_OK);
    cr_expect_eq(p1, p0, "live parameters and buffers unchanged");
    cr_expect_eq(g1, g0, "live gradients unchanged");
    cr_expect_eq(gdef1, gdef0);
    cr_expect_neq(re.loss, rl.loss, "the EMA weights differ from the live ones");

    /* the EMA evaluation is exactly an evaluation of a model holding the EMA's weights */
    trs_optimizer *opt2 = NULL;
    trs_model *m2 = bn_model(&opt2);
    int64_t n = 0;
    cr_assert_eq(trs_ema_state_count(e, &n), TRS_OK);
    for (int64_t i = 0; i < n; i++) {
        static unsigned char buf[1 << 12];
        int64_t shape[TRS_MAX_DIMS];
        int nd;
        trs_dtype dt;
        cr_assert_eq(trs_ema_state_entry(e, i, NULL, 0, shape, &nd, &dt), TRS_OK);
        size_t bytes = dt == TRS_DTYPE_INT64 ? 8 : 4;
        for (int d = 0; d < nd; d++) bytes *= (size_t)shape[d];
        cr_assert_eq(trs_ema_state_read(e, i, buf, bytes), TRS_OK);
        cr_assert_eq(trs_model_state_write(m2, i, buf, bytes, dt), TRS_OK);
    }
    trs_step_result r2;
    cr_assert_eq(trs_eval_batch(m2, NULL, &batch8, &so, &r2, NULL), TRS_OK);
    cr_expect_eq(r2.loss, re.loss, "%a vs %a", r2.loss, re.loss);
    /* an EMA of another model is refused */
    cr_expect_eq(trs_eval_batch(m2, e, &batch8, &so, &r2, NULL), TRS_E_INVALID);
    trs_optimizer_free(opt2);
    trs_model_free(m2);
    trs_ema_free(e);
    trs_optimizer_free(opt);
    trs_model_free(m);
}

/* Flatten, Linear(16, 12), ReLU, Linear(12, 3): no dropout, no BatchNorm. */
static const trs_layer mlp_layers[] = {
    {.kind = TRS_LAYER_FLATTEN},
    {.kind = TRS_LAYER_LINEAR, .in = 16, .out = 12, .bias = 1},
    {.kind = TRS_LAYER_RELU},
    {.kind = TRS_LAYER_LINEAR, .in = 12, .out = 3, .bias = 1},
};

Test(ema, accumulate_2_of_32_equals_one_batch_of_64)
{
    static float x[64 * 16];
    static int64_t y[64];
    for (int i = 0; i < 64 * 16; i++) x[i] = cosf((float)i * 0.11f) + 0.1f * sinf((float)i);
    for (int i = 0; i < 64; i++) y[i] = (i * 7) % 3;
    const trs_batch b = {.x = x, .y = y, .ndim = 4, .shape = {64, 1, 4, 4}};
    trs_model *m[2];
    trs_optimizer *o[2];
    const trs_optim_options oo = {.kind = TRS_OPT_ADAMW, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                  .weight_decay = 0.01};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(trs_set_threads(1, 0, 1), TRS_OK);
        cr_assert_eq(trs_manual_seed(11), TRS_OK);
        cr_assert_eq(trs_model_create(mlp_layers, 4, img, 3, &m[k]), TRS_OK);
        cr_assert_eq(trs_optimizer_create(m[k], &oo, &o[k]), TRS_OK);
    }
    double loss[2] = {0, 0};
    for (int s = 0; s < 20; s++)
        for (int k = 0; k < 2; k++) {
            const trs_step_options so = {.accumulate_steps = k ? 2 : 1};
            trs_step_result r;
            cr_assert_eq(trs_train_step(m[k], o[k], &b, &so, &r), TRS_OK, "%s", trs_model_errmsg(m[k]));
            cr_assert_eq(r.samples, 64);
            loss[k] = r.loss;
        }
    cr_expect(fabs(loss[0] - loss[1]) <= 1e-5 * fabs(loss[0]), "last loss %.9g vs %.9g", loss[0], loss[1]);
    int64_t n = 0;
    trs_model_state_count(m[0], &n);
    for (int64_t i = 0; i < n; i++) {
        float a[16 * 12], c[16 * 12];
        int64_t shape[TRS_MAX_DIMS];
        int nd;
        trs_model_state_entry(m[0], i, NULL, 0, shape, &nd, NULL);
        size_t cnt = 1;
        for (int d = 0; d < nd; d++) cnt *= (size_t)shape[d];
        trs_model_state_read(m[0], i, a, cnt * 4);
        trs_model_state_read(m[1], i, c, cnt * 4);
        for (size_t j = 0; j < cnt; j++)
            cr_expect(fabsf(a[j] - c[j]) <= 1e-5f * (1 + fabsf(a[j])), "entry %lld[%zu]: %.9g vs %.9g", (long long)i,
                      j, (double)a[j], (double)c[j]);
    }
    for (int k = 0; k < 2; k++) {
        trs_optimizer_free(o[k]);
        trs_model_free(m[k]);
    }
}
