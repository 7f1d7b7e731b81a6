/*
 * test_optim_fused.c -- the fused Adam/AdamW step (trs_optim_options.fused, shim/src/optim_fused.cpp) against
 * torch::optim's own step: two identical models, one optimizer each, the same batches; after every step the losses,
 * the parameters and the optimizer state (step, exp_avg, exp_avg_sq) are equal bit for bit. Parameters of 1 to
 * 200704 elements (sizes that are no multiple of 8, 16 or 32 among them), random parameters, moments and step counts
 * (the seed is printed; TRS_TEST_SEED=N repeats a run), weight decay on and off, two param groups, 1 and 2 intra-op
 * threads, and ATen's AVX2, AVX512 and default kernels.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* test-only entry points */

/* Flatten, Linear(in, hidden), Linear(hidden, out): parameters of in*hidden, hidden, hidden*out and out elements. */
typedef struct {
    int64_t in, hidden, out;
} chain;

static const chain chains[] = {
    {1, 1, 1},      /* 1, 1, 1, 1 */
    {5, 3, 17},     /* 15, 3, 51, 17 */
    {13, 45, 2},    /* 585, 45, 90, 2 */
    {16, 8, 64},    /* 128, 8, 512, 64: whole vectors only */
    {33, 31, 7},    /* 1023, 31, 217, 7 */
    {784, 256, 10}, /* 200704, 256, 2560, 10: bench's mlp_256; over ATen's grain size, so 2 threads split it */
};
#define N_CHAINS (sizeof chains / sizeof chains[0])
#define BATCH 8
#define STEPS 5

static uint64_t rng;

static uint64_t next_u64(void)
{ /* splitmix64 */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in [-scale, scale) */
static float uniform(float scale) { return scale * ((float)(next_u64() >> 40) / (float)(1u << 24) * 2.0f - 1.0f); }

static void seed_once(void)
{
    const char *env = getenv("TRS_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    rng = seed;
    fprintf(stderr, "test_optim_fused: seed %" PRIu64 " (TRS_TEST_SEED=%" PRIu64 " repeats it)\n", seed, seed);
}

static trs_model *make(const chain *c)
{
    const trs_layer layers[] = {
        {.kind = TRS_LAYER_FLATTEN},
        {.kind = TRS_LAYER_LINEAR, .in = c->in, .out = c->hidden, .bias = 1},
        {.kind = TRS_LAYER_LINEAR, .in = c->hidden, .out = c->out, .bias = 1},
    };
    const int64_t in_shape[1] = {c->in};
    cr_assert_eq(trs_manual_seed(0), TRS_OK);
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, 3, in_shape, 1, &m), TRS_OK, "%s", trs_last_error());
    return m;
}

/* Entry i of the model (k = 0) or the optimizer (k = 1): all of them, into one buffer each. */
typedef struct {
    int64_t n;
    trs_state_desc *d;
    void **data;
} snapshot;

static snapshot take(trs_model *m, trs_optimizer *o, int k)
{
    snapshot s = {0};
    cr_assert_eq(k ? trs_optimizer_state_describe(o, NULL, 0, &s.n) : trs_model_state_describe(m, NULL, 0, &s.n),
                 TRS_OK);
    s.d = calloc((size_t)s.n + 1, sizeof *s.d);
    s.data = calloc((size_t)s.n + 1, sizeof *s.data);
    size_t *nb = calloc((size_t)s.n + 1, sizeof *nb);
    int64_t again = 0;
    cr_assert_eq(k ? trs_optimizer_state_describe(o, s.d, s.n, &again) : trs_model_state_describe(m, s.d, s.n, &again),
                 TRS_OK);
    for (int64_t i = 0; i < s.n; i++) {
        nb[i] = s.d[i].nbytes;
        s.data[i] = malloc(nb[i] + 1);
    }
    cr_assert_eq(k ? trs_optimizer_state_read_all(o, s.data, nb, s.n) : trs_model_state_read_all(m, s.data, nb, s.n),
                 TRS_OK);
    free(nb);
    return s;
}

static void drop(snapshot *s)
{
    for (int64_t i = 0; i < s->n; i++) free(s->data[i]);
    free(s->data);
    free(s->d);
}

/* Every entry of the fused side equals the reference's bit for bit; a difference is reported with the entry, the
 * first element that differs and the largest relative difference of the entry. Returns the number that differ. */
static int compare(const char *what, const snapshot *f, const snapshot *r)
{
    cr_assert_eq(f->n, r->n, "%s: %lld entries fused, %lld reference", what, (long long)f->n, (long long)r->n);
    int differ = 0;
    for (int64_t i = 0; i < f->n; i++) {
        cr_assert_str_eq(f->d[i].name, r->d[i].name);
        cr_assert_eq(f->d[i].nbytes, r->d[i].nbytes);
        if (memcmp(f->data[i], r->data[i], f->d[i].nbytes) == 0) continue;
        differ++;
        if (f->d[i].dtype != TRS_DTYPE_FLOAT32) {
            cr_expect_fail("%s %s: differs", what, f->d[i].name);
            continue;
        }
        const float *a = f->data[i], *b = r->data[i];
        size_t first = (size_t)-1, n = f->d[i].nbytes / sizeof(float);
        double max_rel = 0;
        for (size_t j = 0; j < n; j++) {
            if (memcmp(&a[j], &b[j], sizeof(float)) == 0) continue;
            if (first == (size_t)-1) first = j;
            const double rel = fabs((double)a[j] - (double)b[j]) / fmax(fabs((double)b[j]), 1e-30);
            if (rel > max_rel) max_rel = rel;
        }
        cr_expect_fail("%s %s (%zu elements): element %zu is %a fused, %a reference; max relative difference %.3g",
                       what, f->d[i].name, n, first, (double)a[first], (double)b[first], max_rel);
    }
    return differ;
}

typedef struct {
    trs_optim_kind kind;
    double weight_decay;
    int no_decay_1d;
    int amsgrad;
    int threads;
    int expect_fused; /* 1: the fused pass must have run every step; 0: it must not; -1: either */
} scenario;

static void write_random_params(trs_model *a, trs_model *b)
{
    int64_t n = 0;
    cr_assert_eq(trs_model_state_describe(a, NULL, 0, &n), TRS_OK);
    trs_state_desc *d = calloc((size_t)n, sizeof *d);
    cr_assert_eq(trs_model_state_describe(a, d, n, &n), TRS_OK);
    for (int64_t i = 0; i < n; i++) {
        float *v = malloc(d[i].nbytes);
        for (size_t j = 0; j < d[i].nbytes / sizeof(float); j++) v[j] = uniform(1.0f);
        cr_assert_eq(trs_model_state_write(a, i, v, d[i].nbytes, TRS_DTYPE_FLOAT32), TRS_OK, "%s", trs_model_errmsg(a));
        cr_assert_eq(trs_model_state_write(b, i, v, d[i].nbytes, TRS_DTYPE_FLOAT32), TRS_OK, "%s", trs_model_errmsg(b));
        free(v);
    }
    free(d);
}

/* Random moments (exp_avg of either sign, exp_avg_sq >= 0, over several magnitudes) and a random step count in
 * [1, 5000] (bias corrections far from 1 and near it), the same into both optimizers. */
static void load_random_state(trs_model *m, trs_optimizer *a, trs_optimizer *b)
{
    int64_t n = 0;
    cr_assert_eq(trs_model_state_describe(m, NULL, 0, &n), TRS_OK);
    trs_state_desc *d = calloc((size_t)n, sizeof *d);
    cr_assert_eq(trs_model_state_describe(m, d, n, &n), TRS_OK);
    for (int64_t i = 0; i < n; i++) {
        char name[64];
        const size_t count = d[i].nbytes / sizeof(float);
        float *v = malloc(d[i].nbytes);
        const float scale = powf(10.0f, (float)(next_u64() % 5) - 4.0f);
        for (int f = 0; f < 2; f++) {
            for (size_t j = 0; j < count; j++) v[j] = f ? scale * scale * fabsf(uniform(1.0f)) : uniform(scale);
            snprintf(name, sizeof name, "state.%lld.%s", (long long)i, f ? "exp_avg_sq" : "exp_avg");
            for (int k = 0; k < 2; k++)
                cr_assert_eq(trs_optimizer_state_load(k ? b : a, name, v, d[i].nbytes, TRS_DTYPE_FLOAT32, d[i].shape,
                                                      d[i].ndim),
                             TRS_OK, "%s: %s", name, trs_optimizer_errmsg(k ? b : a));
        }
        const int64_t step = 1 + (int64_t)(next_u64() % 5000);
        snprintf(name, sizeof name, "state.%lld.step", (long long)i);
        for (int k = 0; k < 2; k++)
            cr_assert_eq(trs_optimizer_state_load(k ? b : a, name, &step, sizeof step, TRS_DTYPE_INT64, NULL, 0), TRS_OK,
                         "%s: %s", name, trs_optimizer_errmsg(k ? b : a));
        free(v);
    }
    free(d);
}

static void run_scenario(const scenario *s)
{
    seed_once();
    cr_assert_eq(trs_set_threads(s->threads, 0, 1), TRS_OK, "%s", trs_last_error());
    int differ = 0;
    for (size_t c = 0; c < N_CHAINS; c++) {
        const chain *ch = &chains[c];
        trs_model *mf = make(ch), *mr = make(ch);
        write_random_params(mf, mr);
        trs_optim_options o = {.kind = s->kind, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                               .weight_decay = s->weight_decay, .amsgrad = s->amsgrad,
                               .no_decay_1d = s->no_decay_1d};
        trs_optimizer *of = NULL, *oref = NULL;
        o.fused = 1;
        cr_assert_eq(trs_optimizer_create(mf, &o, &of), TRS_OK, "%s", trs_model_errmsg(mf));
        o.fused = 0;
        cr_assert_eq(trs_optimizer_create(mr, &o, &oref), TRS_OK, "%s", trs_model_errmsg(mr));
        float *x = malloc(sizeof(float) * BATCH * (size_t)ch->in);
        float *t = malloc(sizeof(float) * BATCH * (size_t)ch->out);
        for (int step = 0; step < STEPS; step++) {
            for (int64_t j = 0; j < BATCH * ch->in; j++) x[j] = uniform(1.0f);
            for (int64_t j = 0; j < BATCH * ch->out; j++) t[j] = uniform(3.0f);
            const trs_batch b = {.x = x, .target = t, .ndim = 2, .shape = {BATCH, ch->in}};
            const trs_step_options so = {.loss = TRS_LOSS_MSE};
            trs_step_result rf, rr;
            cr_assert_eq(trs_train_step(mf, of, &b, &so, &rf), TRS_OK, "%s", trs_model_errmsg(mf));
            cr_assert_eq(trs_train_step(mr, oref, &b, &so, &rr), TRS_OK, "%s", trs_model_errmsg(mr));
            int fused = -1, ref_fused = -1;
            cr_assert_eq(trs_optimizer_fused(of, &fused), TRS_OK);
            cr_assert_eq(trs_optimizer_fused(oref, &ref_fused), TRS_OK);
            cr_expect_eq(ref_fused, 0, "fused = 0 runs the reference step (optim_fused.cpp)");
            if (s->expect_fused >= 0)
                cr_expect_eq(fused, s->expect_fused, "chain %zu step %d: trs_optimizer_fused %d", c, step, fused);
            char what[96];
            snprintf(what, sizeof what, "chain %zu (%lld-%lld-%lld) step %d", c, (long long)ch->in,
                     (long long)ch->hidden, (long long)ch->out, step);
            cr_expect_eq(memcmp(&rf.loss, &rr.loss, sizeof rf.loss), 0, "%s: loss %a fused, %a reference", what,
                         rf.loss, rr.loss);
            for (int k = 0; k < 2; k++) {
                snapshot f = take(mf, of, k), r = take(mr, oref, k);
                differ += compare(what, &f, &r);
                drop(&f);
                drop(&r);
            }
            if (step == 0) load_random_state(mf, of, oref); /* the state exists now: random moments and steps */
        }
        free(x);
        free(t);
        trs_optimizer_free(of);
        trs_optimizer_free(oref);
        trs_model_free(mf);
        trs_model_free(mr);
    }
    cr_expect_eq(differ, 0, "%d entries differ", differ);
}

TestSuite(optim_fused);

Test(optim_fused, adamw_with_weight_decay)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 1e-2, .threads = 1, .expect_fused = 1});
}

Test(optim_fused, adamw_without_weight_decay)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 0, .threads = 1, .expect_fused = 1});
}

Test(optim_fused, adam_with_l2_weight_decay)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAM, .weight_decay = 1e-2, .threads = 1, .expect_fused = 1});
}

Test(optim_fused, adam_without_weight_decay)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAM, .weight_decay = 0, .threads = 1, .expect_fused = 1});
}

Test(optim_fused, adamw_two_param_groups)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 0.05, .no_decay_1d = 1, .threads = 1,
                             .expect_fused = 1});
}

Test(optim_fused, two_threads)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 1e-4, .threads = 2, .expect_fused = 1});
    run_scenario(&(scenario){.kind = TRS_OPT_ADAM, .weight_decay = 1e-4, .threads = 2, .expect_fused = 1});
}

/* amsgrad is not fused: torch::optim's own step runs (and so gives the same values). */
Test(optim_fused, amsgrad_runs_torch_optim)
{
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 1e-2, .amsgrad = 1, .threads = 1,
                             .expect_fused = 0});
}

/* ATen's kernels for another CPU capability, chosen before libtorch's first kernel call of the process (each test
 * runs in its own process, and nothing before run_scenario calls a kernel). AVX512: the same arithmetic, 32 elements
 * a loop. default: no FMA anywhere in ATen, so the once-per-process check finds the fused pass different and
 * torch::optim's step runs instead. */
Test(optim_fused, aten_avx512_kernels)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
        cr_skip_test("the CPU has no AVX512 (F, BW, VL, DQ)");
    setenv("ATEN_CPU_CAPABILITY", "avx512", 1);
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 1e-2, .threads = 1, .expect_fused = 1});
    run_scenario(&(scenario){.kind = TRS_OPT_ADAM, .weight_decay = 1e-2, .threads = 2, .expect_fused = 1});
}

Test(optim_fused, aten_default_kernels_fall_back)
{
    setenv("ATEN_CPU_CAPABILITY", "default", 1);
    run_scenario(&(scenario){.kind = TRS_OPT_ADAMW, .weight_decay = 1e-2, .threads = 1, .expect_fused = 0});
}
