/*
 * test_shim.c -- the C ABI over libtorch: model building and state_dict names, PyTorch-equal losses, eval that
 * leaves gradients and train mode alone, errors that leave handles usable.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* test-only entry points */

/* Flatten, Linear(16,8), ReLU, BatchNorm1d(8), Dropout(0.5), Linear(8,3) on [1,4,4] inputs. */
static const trs_layer bn_layers[] = {
    {.kind = TRS_LAYER_FLATTEN},
    {.kind = TRS_LAYER_LINEAR, .in = 16, .out = 8, .bias = 1},
    {.kind = TRS_LAYER_RELU},
    {.kind = TRS_LAYER_BATCHNORM1D, .out = 8, .eps = 1e-5, .momentum = 0.1},
    {.kind = TRS_LAYER_DROPOUT, .p = 0.5},
    {.kind = TRS_LAYER_LINEAR, .in = 8, .out = 3, .bias = 1},
};
/* Flatten, Linear(16,8), ReLU, Linear(8,3). */
static const trs_layer plain_layers[] = {
    {.kind = TRS_LAYER_FLATTEN},
    {.kind = TRS_LAYER_LINEAR, .in = 16, .out = 8, .bias = 1},
    {.kind = TRS_LAYER_RELU},
    {.kind = TRS_LAYER_LINEAR, .in = 8, .out = 3, .bias = 1},
};
static const int64_t in_shape[3] = {1, 4, 4};

static float xs[4 * 16];
static int64_t ys[4] = {0, 1, 2, 1};

static void init(void)
{
    cr_assert_eq(trs_set_threads(1, 0, 1), TRS_OK, "%s", trs_last_error());
    for (int i = 0; i < 4 * 16; i++) xs[i] = (float)i / 64.0f;
}

static trs_batch batch4(void)
{
    trs_batch b = {.x = xs, .y = ys, .ndim = 4, .shape = {4, 1, 4, 4}};
    return b;
}

static trs_model *make(const trs_layer *layers, size_t n, uint64_t seed)
{
    cr_assert_eq(trs_manual_seed(seed), TRS_OK);
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, n, in_shape, 3, &m), TRS_OK, "%s", trs_last_error());
    cr_assert_not_null(m);
    return m;
}

TestSuite(shim, .init = init);

Test(shim, state_dict_names_match_pytorch_sequential)
{
    /* torch 1.13: list(nn.Sequential(Flatten, Linear, ReLU, BatchNorm1d, Dropout, Linear).state_dict()) */
    static const char *expected[] = {"1.weight",     "1.bias",       "3.weight",
                                     "3.bias",       "3.running_mean", "3.running_var",
                                     "3.num_batches_tracked", "5.weight", "5.bias"};
    trs_model *m = make(bn_layers, 6, 0);
    int64_t count = 0, params = 0;
    cr_assert_eq(trs_model_state_count(m, &count), TRS_OK);
    cr_assert_eq(count, 9);
    for (int64_t i = 0; i < count; i++) {
        char name[64];
        int64_t shape[TRS_MAX_DIMS];
        int ndim = -1;
        trs_dtype dt;
        cr_assert_eq(trs_model_state_entry(m, i, name, sizeof name, shape, &ndim, &dt), TRS_OK);
        cr_expect_str_eq(name, expected[i]);
        if (strcmp(name, "1.weight") == 0) {
            cr_expect_eq(ndim, 2);
            cr_expect_eq(shape[0], 8);
            cr_expect_eq(shape[1], 16);
        }
        if (strcmp(name, "3.num_batches_tracked") == 0) cr_expect_eq(dt, TRS_DTYPE_INT64);
    }
    cr_assert_eq(trs_model_state_entry(m, 9, NULL, 0, NULL, NULL, NULL), TRS_E_INVALID);
    cr_assert_eq(trs_model_param_count(m, &params), TRS_OK);
    cr_expect_eq(params, 16 * 8 + 8 + 8 + 8 + 8 * 3 + 3);
    int64_t out = 0;
    trs_model_output_dim(m, &out);
    cr_expect_eq(out, 3);
    trs_model_free(m);
}

Test(shim, sgd_momentum_losses_equal_pytorch_bit_for_bit)
{
    /* The same three steps in PyTorch 1.13 (torch.manual_seed(0); Sequential(Flatten, Linear(16,8), ReLU,
     * Linear(8,3)); SGD(lr=0.1, momentum=0.9); x = arange(64).reshape(4,1,4,4)/64; y = [0,1,2,1]) print these. */
    static const double expected[3] = {0x1.1d54240000000p+0, 0x1.17a3e00000000p+0, 0x1.1185b00000000p+0};
    trs_model *m = make(plain_layers, 4, 0);
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_SGD, .lr = 0.1, .momentum = 0.9};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK, "%s", trs_model_errmsg(m));
    trs_batch b = batch4();
    for (int i = 0; i < 3; i++) {
        trs_step_result r;
        cr_assert_eq(trs_train_step(m, opt, &b, NULL, &r), TRS_OK, "%s", trs_model_errmsg(m));
        cr_expect_eq(r.loss, expected[i], "step %d: loss %a, PyTorch %a", i, r.loss, expected[i]);
        cr_expect_eq(r.samples, 4);
    }
    trs_optimizer_free(opt);
    trs_model_free(m);
}

/* The bulk export a checkpoint's snapshot uses (trs_*_state_describe / _read_all) gives exactly what the per-entry
 * calls give: the same names, shapes, dtypes and bytes, entry by entry, for the model and AdamW's state after two
 * steps (step counts, exp_avg, exp_avg_sq); a wrong count or size is refused by name. */
static void expect_bulk_equals_entries(const char *what, int64_t n, const trs_state_desc *d, void *const *dst,
                                       trs_status (*entry)(void *, int64_t, char *, size_t, int64_t *, int *,
                                                           trs_dtype *),
                                       trs_status (*read)(void *, int64_t, void *, size_t), void *h)
{
    for (int64_t i = 0; i < n; i++) {
        char name[256];
        int64_t shape[TRS_MAX_DIMS];
        int ndim = -1;
        trs_dtype dt;
        cr_assert_eq(entry(h, i, name, sizeof name, shape, &ndim, &dt), TRS_OK);
        cr_expect_str_eq(d[i].name, name, "%s %lld", what, (long long)i);
        cr_expect_eq(d[i].ndim, ndim, "%s %s", what, name);
        cr_expect_eq(d[i].dtype, dt, "%s %s", what, name);
        size_t numel = 1;
        for (int k = 0; k < ndim; k++) {
            cr_expect_eq(d[i].shape[k], shape[k], "%s %s dim %d", what, name, k);
            numel *= (size_t)shape[k];
        }
        cr_expect_eq(d[i].nbytes, numel * (dt == TRS_DTYPE_FLOAT32 ? 4 : 8), "%s %s", what, name);
        unsigned char *one = malloc(d[i].nbytes + 1);
        cr_assert_eq(read(h, i, one, d[i].nbytes), TRS_OK);
        cr_expect_eq(memcmp(one, dst[i], d[i].nbytes), 0, "%s %s: the bytes differ", what, name);
        free(one);
    }
}

static trs_status m_entry(void *h, int64_t i, char *nm, size_t sz, int64_t *sh, int *nd, trs_dtype *dt)
{
    return trs_model_state_entry(h, i, nm, sz, sh, nd, dt);
}
static trs_status m_read(void *h, int64_t i, void *dst, size_t n) { return trs_model_state_read(h, i, dst, n); }
static trs_status o_entry(void *h, int64_t i, char *nm, size_t sz, int64_t *sh, int *nd, trs_dtype *dt)
{
    return trs_optimizer_state_entry(h, i, nm, sz, sh, nd, dt);
}
static trs_status o_read(void *h, int64_t i, void *dst, size_t n) { return trs_optimizer_state_read(h, i, dst, n); }

Test(shim, bulk_state_export_equals_the_per_entry_calls)
{
    trs_model *m = make(bn_layers, 6, 3);
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_ADAMW, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                           .weight_decay = 1e-2};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK, "%s", trs_model_errmsg(m));
    trs_batch b = batch4();
    trs_step_result r;
    for (int i = 0; i < 2; i++) cr_assert_eq(trs_train_step(m, opt, &b, NULL, &r), TRS_OK, "%s", trs_model_errmsg(m));
    for (int k = 0; k < 2; k++) {
        void *h = k ? (void *)opt : (void *)m;
        int64_t n = -1, again = -1;
        cr_assert_eq(k ? trs_optimizer_state_describe(opt, NULL, 0, &n) : trs_model_state_describe(m, NULL, 0, &n),
                     TRS_OK);
        cr_assert_eq(n, k ? 6 * 3 : 9, "entries: 9 in the state_dict; 6 parameters x (step, exp_avg, exp_avg_sq)");
        trs_state_desc *d = calloc((size_t)n, sizeof *d);
        cr_assert_eq(k ? trs_optimizer_state_describe(opt, d, n, &again) : trs_model_state_describe(m, d, n, &again),
                     TRS_OK);
        cr_assert_eq(again, n);
        void **dst = calloc((size_t)n, sizeof *dst);
        size_t *nb = calloc((size_t)n, sizeof *nb);
        for (int64_t i = 0; i < n; i++) {
            nb[i] = d[i].nbytes;
            dst[i] = malloc(nb[i] + 1);
        }
        cr_assert_eq(k ? trs_optimizer_state_read_all(opt, dst, nb, n) : trs_model_state_read_all(m, dst, nb, n),
                     TRS_OK);
        expect_bulk_equals_entries(k ? "optimizer" : "model", n, d, dst, k ? o_entry : m_entry,
                                   k ? o_read : m_read, h);
        if (k) {
            cr_expect_str_eq(d[0].name, "state.0.step");
            int64_t step = -1;
            memcpy(&step, dst[0], sizeof step);
            cr_expect_eq(step, 2, "AdamW's step count after two steps");
        }
        /* a count or a size that differs is refused, naming the entry */
        cr_expect_eq(k ? trs_optimizer_state_read_all(opt, dst, nb, n - 1) : trs_model_state_read_all(m, dst, nb, n - 1),
                     TRS_E_INVALID);
        nb[1] += 4;
        cr_expect_eq(k ? trs_optimizer_state_read_all(opt, dst, nb, n) : trs_model_state_read_all(m, dst, nb, n),
                     TRS_E_INVALID);
        const char *msg = k ? trs_optimizer_errmsg(opt) : trs_model_errmsg(m);
        cr_expect(strstr(msg, d[1].name) != NULL, "the error names the entry: %s", msg);
        for (int64_t i = 0; i < n; i++) free(dst[i]);
        free(dst);
        free(nb);
        free(d);
    }
    /* a short out[] gets the first cap entries and the full count */
    trs_state_desc two[2];
    int64_t n = 0;
    cr_assert_eq(trs_model_state_describe(m, two, 2, &n), TRS_OK);
    cr_expect_eq(n, 9);
    cr_expect_str_eq(two[1].name, "1.bias");
    cr_expect_eq(trs_model_state_describe(m, NULL, 2, &n), TRS_E_INVALID);
    trs_optimizer_free(opt);
    trs_model_free(m);
}

Test(shim, same_seed_same_init_other_seed_other_init)
{
    uint32_t a, b, c;
    trs_model *m1 = make(bn_layers, 6, 7), *m2 = make(bn_layers, 6, 7), *m3 = make(bn_layers, 6, 8);
    trs_model_digest(m1, TRS_DIGEST_PARAMS, &a, NULL, NULL);
    trs_model_digest(m2, TRS_DIGEST_PARAMS, &b, NULL, NULL);
    trs_model_digest(m3, TRS_DIGEST_PARAMS, &c, NULL, NULL);
    cr_expect_eq(a, b);
    cr_expect_neq(a, c);
    trs_model_free(m1);
    trs_model_free(m2);
    trs_model_free(m3);
}

Test(shim, eval_leaves_gradients_params_and_train_mode_untouched)
{
    trs_model *m = make(bn_layers, 6, 1);
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_ADAMW, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                           .weight_decay = 0.01};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK, "%s", trs_model_errmsg(m));
    trs_batch b = batch4();
    trs_step_result r;
    cr_assert_eq(trs_train_step(m, opt, &b, NULL, &r), TRS_OK, "%s", trs_model_errmsg(m));

    uint32_t g0, p0, g1, p1;
    double gs0, gs1;
    int64_t defined = 0;
    cr_assert_eq(trs_model_digest(m, TRS_DIGEST_GRADS, &g0, &gs0, &defined), TRS_OK);
    cr_assert_eq(defined, 6, "every parameter has a gradient after a step");
    cr_assert_gt(gs0, 0.0);
    trs_model_digest(m, TRS_DIGEST_PARAMS, &p0, NULL, NULL);

    int training = -1;
    trs_model_is_training(m, &training);
    cr_assert_eq(training, 1);
    for (int i = 0; i < 3; i++) {
        trs_step_result e;
        cr_assert_eq(trs_eval_step(m, &b, NULL, &e), TRS_OK, "%s", trs_model_errmsg(m));
        cr_expect_eq(e.samples, 4);
        cr_expect(e.correct >= 0 && e.correct <= 4);
    }
    trs_model_is_training(m, &training);
    cr_expect_eq(training, 1, "eval restored train mode");
    trs_model_digest(m, TRS_DIGEST_GRADS, &g1, &gs1, NULL);
    trs_model_digest(m, TRS_DIGEST_PARAMS, &p1, NULL, NULL);
    cr_expect_eq(g0, g1, "eval changed a gradient");
    cr_expect_eq(gs0, gs1);
    cr_expect_eq(p0, p1, "eval changed a parameter or a BatchNorm running statistic");

    /* Eval is deterministic (dropout off, running stats used): two evals give the same loss bit for bit. */
    trs_step_result e1, e2;
    trs_eval_step(m, &b, NULL, &e1);
    trs_eval_step(m, &b, NULL, &e2);
    cr_expect_eq(e1.loss, e2.loss);
    trs_optimizer_free(opt);
    trs_model_free(m);
}

Test(shim, loss_falls_when_fitting_a_batch)
{
    trs_model *m = make(plain_layers, 4, 3);
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_ADAM, .lr = 5e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK);
    /* Rows that are not collinear, so 4 labels can be memorised. */
    static float xr[64];
    for (int i = 0; i < 64; i++) xr[i] = sinf(1.7f * (float)i);
    trs_batch b = batch4();
    b.x = xr;
    trs_step_result first, r;
    trs_step_options so = {.loss = TRS_LOSS_CROSS_ENTROPY, .grad_clip_norm = 1.0};
    cr_assert_eq(trs_train_step(m, opt, &b, &so, &first), TRS_OK);
    cr_expect_gt(first.grad_norm, 0.0);
    for (int i = 0; i < 300; i++) cr_assert_eq(trs_train_step(m, opt, &b, &so, &r), TRS_OK);
    cr_expect_lt(r.loss, 0.5 * first.loss, "loss %g -> %g", first.loss, r.loss);
    cr_expect_eq(r.correct, 4);
    trs_optimizer_free(opt);
    trs_model_free(m);
}

Test(shim, learning_rate_set_and_read)
{
    trs_model *m = make(plain_layers, 4, 0);
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_SGD, .lr = 0.5};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK);
    double lr = 0;
    trs_optimizer_get_lr(opt, &lr);
    cr_expect_eq(lr, 0.5);
    cr_assert_eq(trs_optimizer_set_lr(opt, 0.125), TRS_OK);
    trs_optimizer_get_lr(opt, &lr);
    cr_expect_eq(lr, 0.125);
    cr_expect_eq(trs_optimizer_set_lr(opt, -1.0), TRS_E_INVALID);
    cr_expect_str_eq(trs_optimizer_errmsg(opt), "lr must be a finite value >= 0");
    trs_optimizer_free(opt);
    trs_model_free(m);
}

Test(shim, errors_are_statuses_and_leave_handles_usable)
{
    trs_step_result r;
    trs_batch b = batch4();
    cr_expect_eq(trs_train_step(NULL, NULL, &b, NULL, &r), TRS_E_INVALID);
    cr_expect_eq(trs_eval_step(NULL, &b, NULL, &r), TRS_E_INVALID);
    cr_expect_str_eq(trs_model_errmsg(NULL), "model handle is NULL");

    /* Layers that don't fit name the layer. */
    trs_layer bad[] = {{.kind = TRS_LAYER_FLATTEN}, {.kind = TRS_LAYER_LINEAR, .in = 15, .out = 3, .bias = 1}};
    trs_model *none = (trs_model *)1;
    cr_expect_eq(trs_model_create(bad, 2, in_shape, 3, &none), TRS_E_INVALID);
    cr_expect_null(none);
    /* the per-sample shape, not the probe batch's [2, 16] (issue 18) */
    cr_expect(strstr(trs_last_error(), "layer 1 (linear) does not fit its per-sample input of shape [16]") != NULL,
              "%s", trs_last_error());

    /* Nesterov with dampening is refused, as in torch.optim.SGD. */
    trs_model *m = make(plain_layers, 4, 0);
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_SGD, .lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = 1};
    cr_expect_eq(trs_optimizer_create(m, &o, &opt), TRS_E_INVALID);
    cr_expect_null(opt);
    o.dampening = 0;
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK);

    /* Wrong feature shape, label out of range: an error, then the same handle trains. */
    trs_batch wrong = b;
    wrong.shape[3] = 5;
    cr_expect_eq(trs_train_step(m, opt, &wrong, NULL, &r), TRS_E_INVALID);
    cr_expect(strstr(trs_model_errmsg(m), "batch dim 3 is 5; the model takes 4") != NULL, "%s", trs_model_errmsg(m));
    int64_t bad_y[4] = {0, 1, 3, 1};
    trs_batch badlab = b;
    badlab.y = bad_y;
    cr_expect_eq(trs_eval_step(m, &badlab, NULL, &r), TRS_E_INVALID);
    cr_expect(strstr(trs_model_errmsg(m), "label 3 at batch index 2 is outside [0, 3)") != NULL, "%s",
              trs_model_errmsg(m));
    cr_expect_eq(trs_train_step(m, opt, &b, NULL, &r), TRS_OK, "%s", trs_model_errmsg(m));
    cr_expect(isfinite(r.loss));
    cr_expect_eq(trs_set_threads(0, 0, 0), TRS_E_INVALID);
    trs_optimizer_free(opt);
    trs_model_free(m);
}

/* A 4 MiB block is mmap'd under glibc's default threshold (128 KiB) and comes from the heap once the thresholds
 * are pinned: mallinfo2's hblks (mmap'd blocks in use) tells which. Criterion runs each test in its own process. */
Test(shim, malloc_thresholds_keep_large_blocks_in_the_heap)
{
#ifdef TRAINRUN_SANITIZE
    /* ASan's allocator replaces glibc's: it refuses mallopt and mallinfo2 does not describe it */
    cr_skip_test("glibc malloc's thresholds cannot be tested under AddressSanitizer's allocator");
#endif
    struct mallinfo2 before = mallinfo2();
    void *a = malloc(4 << 20);
    cr_assert_not_null(a);
    cr_expect_eq(mallinfo2().hblks, before.hblks + 1, "glibc's default threshold mmaps a 4 MiB block");
    free(a);

    cr_assert_eq(trs_set_malloc_thresholds(32 << 20, 256 << 20), TRS_OK, "%s", trs_last_error());
    before = mallinfo2();
    void *b = malloc(4 << 20);
    cr_assert_not_null(b);
    cr_expect_eq(mallinfo2().hblks, before.hblks, "pinned threshold: the block comes from the heap");
    free(b);

    cr_expect_eq(trs_set_malloc_thresholds((32 << 20) + 1, 0), TRS_E_INVALID);
    cr_expect(strstr(trs_last_error(), "mmap_threshold") != NULL, "%s", trs_last_error());
    cr_expect_eq(trs_set_malloc_thresholds(0, -1), TRS_E_INVALID);
}

/* max_pool2d's forward (shim/src/pool.cpp) is ATen's bit for bit -- values with ties, NaN (payloads too) and
 * infinities, indices, shape, strides -- in float32 and bfloat16; the fast path takes the 2x2 / stride 2 case and
 * other kernels without padding, and odd sizes (a last row or column no window covers). */
Test(shim, max_pool_equals_aten_bit_for_bit)
{
    const struct {
        int64_t shape[4];
        int ndim, kernel, stride, fast;
    } cases[] = {
        {{8, 32, 28, 28}, 4, 2, 2, 1}, /* the convnet's first pool */
        {{8, 64, 14, 14}, 4, 2, 2, 1},
        {{3, 5, 7, 9}, 4, 2, 2, 1},    /* odd H and W: the last row and column are dropped */
        {{2, 3, 11, 10}, 4, 3, 2, 1},  /* overlapping windows: the generic scan */
        {{2, 3, 9, 9}, 4, 3, 3, 1},
        {{4, 13, 17}, 3, 2, 2, 1},     /* CHW */
        {{1, 1, 2, 2}, 4, 2, 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            for (uint64_t seed = 1; seed <= 3; seed++) {
                int fast = -1, equal = -1;
                cr_assert_eq(trs_max_pool2d_check(bf16, cases[i].shape, cases[i].ndim, cases[i].kernel,
                                                  cases[i].stride, seed, &fast, &equal),
                             TRS_OK, "case %zu: %s", i, trs_last_error());
                cr_expect_eq(fast, cases[i].fast, "case %zu bf16 %d seed %llu: fast path %d", i, bf16,
                             (unsigned long long)seed, fast);
                cr_expect_eq(equal, 1, "case %zu bf16 %d seed %llu: differs from ATen's max_pool2d", i, bf16,
                             (unsigned long long)seed);
            }
        }
    }
}
