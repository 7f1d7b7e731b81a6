/*
 * test_drift.c -- drift across PyTorch versions (runtime/src/core/drift.c): the per-tensor "param" records of a
 * trace and the drift report `trainrun verify` prints when a run does not reproduce a recording bit for bit; and
 * watchdog.snapshot's behaviour where it cannot work (the CPU, a build without CUDA memory history).
 *
 * The cross-version case is real: each lane's build verifies the *other* lane's committed PyTorch trace of
 * configs/reference/mlp_adamw_constant.yaml (Debian's 1.13 with OpenBLAS vs PyPI's 2.11 with MKL). Where the two
 * first differ depends on the CPU model as well as on the versions (step 2 or 4 on the machines measured), so the
 * test takes its expectations from a trace of the same run written by this build, not from a constant.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "support.h"
#include "trace.h"
#include "trainrun_shim.h"

TestSuite(drift, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

Test(drift, a_param_digest_holds_the_entrys_crc32_l2_norm_and_a_sketch_that_measures_differences)
{
    enum { N = 1000 };
    static float a[N], b[N];
    uint64_t s = 0x1234567ULL; /* fixed: the values need not vary between runs */
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        a[i] = b[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    tr_param_digest da, db;
    tr_param_digest_compute(&da, "0.weight", a, sizeof a, N, 1);
    cr_expect_str_eq(da.name, "0.weight");
    cr_expect_eq(da.numel, N);
    cr_expect_eq(da.crc32, (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)a, sizeof a));
    double sq = 0;
    for (int i = 0; i < N; i++) sq += (double)a[i] * a[i];
    cr_expect_float_eq(da.l2, sqrt(sq), 1e-12 * sqrt(sq));
    /* a difference in one element changes every sketch coordinate by exactly +-delta: the estimate is exact */
    const float delta = 0.25f;
    b[417] += delta;
    tr_param_digest_compute(&db, "0.weight", b, sizeof b, N, 1);
    cr_expect_neq(da.crc32, db.crc32);
    for (int j = 0; j < TR_SKETCH_DIM; j++)
        cr_expect_float_eq(fabs(db.sketch[j] - da.sketch[j]), (double)((b[417] - a[417])), 1e-9, "coordinate %d", j);
    /* the signs are balanced: half the coordinates of a one-hot x are +1, over many indices */
    int plus = 0;
    static float onehot[N];
    for (int i = 0; i < 64; i++) {
        memset(onehot, 0, sizeof onehot);
        onehot[i] = 1.0f;
        tr_param_digest dh;
        tr_param_digest_compute(&dh, "x", onehot, sizeof onehot, N, 1);
        for (int j = 0; j < TR_SKETCH_DIM; j++) plus += dh.sketch[j] > 0;
    }
    cr_expect(plus > 64 * TR_SKETCH_DIM * 4 / 10 && plus < 64 * TR_SKETCH_DIM * 6 / 10, "%d of %d signs +1", plus,
              64 * TR_SKETCH_DIM);
    /* int64 entries (BatchNorm's num_batches_tracked) digest their values */
    const int64_t count[1] = {300};
    tr_param_digest dc;
    tr_param_digest_compute(&dc, "1.num_batches_tracked", count, sizeof count, 1, 0);
    cr_expect_float_eq(dc.l2, 300.0, 0);
    cr_expect_float_eq(fabs(dc.sketch[0]), 300.0, 0);
}

Test(drift, param_records_round_trip_through_a_trace_file)
{
    const char *path = support_path("p.trace");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    tr_trace_write_header(f, "2.11.0", 1, 1, 0);
    tr_trace_write_step(f, 1, 2.5, 1e-3);
    tr_trace_write_final(f, 0xdeadbeef, 12.5);
    const float v[3] = {1.0f, -2.0f, 0.5f};
    tr_param_digest d;
    tr_param_digest_compute(&d, "3.bias", v, sizeof v, 3, 1);
    tr_trace_write_param(f, &d);
    fclose(f);
    tr_trace t = {0};
    tr_error err = {0};
    cr_assert_eq(tr_trace_read(path, &t, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(t.n_params, 1);
    cr_expect_str_eq(t.params[0].name, "3.bias");
    cr_expect_eq(t.params[0].numel, 3);
    cr_expect_eq(t.params[0].crc32, d.crc32);
    cr_expect_eq(memcmp(&t.params[0].l2, &d.l2, sizeof d.l2), 0);
    cr_expect_eq(memcmp(t.params[0].sketch, d.sketch, sizeof d.sketch), 0);
    tr_trace_free(&t);
    /* a malformed record is an error naming the file and line */
    f = fopen(path, "a");
    fputs("param 3.bias numel 3 crc32 zz l2 0x1p+0 sketch 0x1p+0\n", f);
    fclose(f);
    int lines = 0;
    f = fopen(path, "r");
    for (int c; (c = fgetc(f)) != EOF;) lines += c == '\n';
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "p.trace:%d: bad param record", lines);
    cr_expect_eq(tr_trace_read(path, &t, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, want) != NULL, "%s, not %s", err.msg, want);
    tr_trace_free(&t);
}

/* The committed PyTorch trace of the lane this build is not. */
static void other_lanes_trace(const char *name, char *buf, size_t n)
{
    if (strncmp(trs_torch_version(), "1.", 2) == 0)
        snprintf(buf, n, "%s/tests/reference/libtorch-2.11/%s.trace", TR_SOURCE_DIR, name);
    else
        snprintf(buf, n, "%s/tests/reference/%s.trace", TR_SOURCE_DIR, name);
}

Test(drift, verify_of_the_other_pytorch_versions_trace_prints_the_drift_report_and_rtol_decides)
{
    support_require_fmnist();
    char trace[1024], args[2048];
    static char out[1 << 17];
    other_lanes_trace("mlp_adamw_constant", trace, sizeof trace);
    tr_trace want = {0};
    tr_error err = {0};
    cr_assert_eq(tr_trace_read(trace, &want, &err), TR_OK, "%s", err.msg);
    cr_assert_neq(strcmp(want.libtorch, trs_torch_version()), 0, "%s is this lane's own", trace);
    cr_assert_gt(want.n_params, 0, "%s has no param records", trace);

    /* what the report must say, from this build's own trace of the same run: the first step whose loss or lr
     * differs bit for bit, and how many of the final parameters' entries are bit-identical */
    tr_trace own = {0};
    const char *own_path = support_path("own.trace");
    snprintf(args, sizeof args, "configs/reference/mlp_adamw_constant.yaml train.max_steps=300 run.dir='%s' "
             "run.name=own --trace '%s'", support_tmpdir, own_path);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_eq(tr_trace_read(own_path, &own, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(own.n_steps, 300);
    cr_assert_eq(own.n_params, want.n_params, "%s", own_path);
    int64_t first = 0, same_entries = 0;
    for (int64_t k = 1; k <= 300 && !first; k++)
        if (memcmp(&own.steps[k - 1].loss, &want.steps[k - 1].loss, sizeof(double)) ||
            memcmp(&own.steps[k - 1].lr, &want.steps[k - 1].lr, sizeof(double)))
            first = k;
    for (int64_t i = 0; i < want.n_params; i++)
        for (int64_t j = 0; j < own.n_params; j++)
            same_entries += strcmp(own.params[j].name, want.params[i].name) == 0 && own.params[j].crc32 == want.params[i].crc32;
    cr_log_info("libtorch %s vs %s's %s: first differing step %lld, %lld of %lld entries bit-identical",
                trs_torch_version(), trace, want.libtorch, (long long)first, (long long)same_entries,
                (long long)want.n_params);
    /* two versions with different BLAS libraries: they drift, but not from the first step (same data, same
     * initial weights, same first forward pass) */
    cr_assert_gt(first, 1, "the versions agree on step 1's loss");
    cr_assert_leq(first, 300, "1.13 and 2.11 did not differ at all over 300 steps");
    char want_first[64], want_entries[64];
    snprintf(want_first, sizeof want_first, "first differing step: %lld ", (long long)first);
    snprintf(want_entries, sizeof want_entries, "%lld of %lld entries bit-identical", (long long)same_entries,
             (long long)want.n_params);

    /* bit for bit: fails (exit 5), and says how far apart the two versions are */
    snprintf(args, sizeof args, "verify configs/reference/mlp_adamw_constant.yaml '%s' train.max_steps=300", trace);
    cr_expect_eq(support_cli(args, out, sizeof out), 5, "%s", out);
    cr_expect(strstr(out, "drift report: this run (trainrun, libtorch ") != NULL, "%s", out);
    cr_expect(strstr(out, "vs the recording (pytorch, libtorch ") != NULL, "%s", out);
    cr_expect(strstr(out, want_first) != NULL, "the run's own trace first differs at step %lld: %s", (long long)first,
              out);
    cr_expect(strstr(out, "max so far") != NULL, "%s", out);
    cr_expect(strstr(out, "val   after step 300") != NULL, "the evals side by side: %s", out);
    for (int64_t i = 0; i < want.n_params; i++)
        cr_expect(strstr(out, want.params[i].name) != NULL, "the report names %s: %s", want.params[i].name, out);
    cr_expect(strstr(out, want_entries) != NULL, "%s: %s", want_entries, out);
    cr_expect_lt(same_entries, want.n_params, "every entry bit-identical after a drift from step %lld", (long long)first);
    cr_expect(strstr(out, "verify: FAILED") != NULL, "%s", out);
    /* the report's figures are what the two traces hold: the loss difference at step 300 */
    const char *row = strstr(out, "\n           300  ");
    cr_assert_not_null(row, "no step 300 row: %s", out);
    double a = 0, b = 0, rel = 0, worst = 0;
    cr_assert_eq(sscanf(row, " %*d %lf %lf %lf %lf", &a, &b, &rel, &worst), 4, "%s", row);
    cr_expect_float_eq(b, want.steps[299].loss, 1e-5 * want.steps[299].loss, "recorded loss at 300");
    cr_expect_float_eq(a, own.steps[299].loss, 1e-5 * own.steps[299].loss, "this run's loss at 300");
    /* (from the traces' full-precision losses: the printed ones have 6 digits, and the two versions can agree to
     * 1e-7 at step 300 on one CPU and differ by 1e-2 on another) */
    const double want_rel = fabs(own.steps[299].loss - want.steps[299].loss) / want.steps[299].loss;
    cr_expect_float_eq(rel, want_rel, 1e-2 * want_rel + 1e-12, "rel diff at 300: printed %g, traces %g", rel, want_rel);
    cr_expect_geq(worst, rel);
    cr_expect_eq(rel > 0, own.steps[299].loss != want.steps[299].loss);

    /* a tolerance wide enough for the drift: passes, the report still printed */
    snprintf(args, sizeof args, "verify configs/reference/mlp_adamw_constant.yaml '%s' train.max_steps=300 --rtol 0.1",
             trace);
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "drift report:") != NULL, "%s", out);
    cr_expect(strstr(out, "verify: OK: 300 steps (within --rtol)") != NULL, "%s", out);
    tr_trace_free(&own);
    tr_trace_free(&want);
}

Test(drift, watchdog_snapshot_is_refused_on_the_cpu_naming_the_key)
{
    support_require_fmnist();
    char args[2048];
    static char out[1 << 15];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml watchdog.snapshot=true run.dir='%s' run.name=snap",
             support_tmpdir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "watchdog.snapshot: true records the CUDA caching allocator's history and needs device: "
                          "cuda (this config's device is cpu)") != NULL,
              "%s", out);
    cr_expect_eq(support_last_step(support_path("snap"), "train"), -1, "trained before refusing: %s", out);
}

Test(drift, the_cuda_memory_history_calls_say_why_they_cannot_run_here)
{
    int devices = 0;
    cr_assert_eq(trs_cuda_device_count(&devices), TRS_OK);
    if (devices > 0) support_skip("a CUDA device is visible: tests/test_gpu.c checks the snapshot itself");
    const int built = trs_cuda_memory_snapshot_built();
    int major = 0, minor = 0;
    sscanf(trs_torch_version(), "%d.%d", &major, &minor);
    cr_expect_eq(built, trs_cuda_built() && (major > 2 || (major == 2 && minor >= 1)), "built %d", built);
    cr_expect_eq(trs_cuda_memory_record_history(1, 0), TRS_E_INVALID);
    cr_expect(strstr(trs_last_error(), "max_entries must be >= 1") != NULL, "%s", trs_last_error());
    cr_expect_eq(trs_cuda_memory_record_history(1, 1000), TRS_E_INVALID);
    cr_expect(strstr(trs_last_error(), built ? "needs a CUDA device: this process sees none"
                                             : "memory snapshots need a CUDA build against libtorch 2.1 or later") !=
                  NULL,
              "%s", trs_last_error());
    void *data = (void *)1;
    size_t n = 1;
    cr_expect_eq(trs_cuda_memory_snapshot(&data, &n), TRS_E_INVALID);
    cr_expect_null(data);
    cr_expect_eq(n, 0);
    cr_expect_eq(trs_cuda_memory_snapshot(NULL, &n), TRS_E_INVALID);
}
