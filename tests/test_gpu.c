/*
 * test_gpu.c -- training on a CUDA device (issue 21, part B). Every test skips, saying why, unless this trainrun was
 * built against a CUDA-enabled libtorch (TRAINRUN_CUDA) and a CUDA device is visible; scripts/gpu_check.sh builds
 * and runs them on a GPU machine. Checks: the MLP and the convnet reach the CPU's test accuracy on `device: cuda`
 * (within noise: the same initial weights and data order, other kernels); evaluation keeps nothing on the device
 * and touches no gradient; debug.leak_bytes_per_step is caught by the watchdog from the CUDA allocator's
 * `allocated`, growth within 10%, with `reserved` reported; a clean 3,000-step run's allocated is flat to the byte
 * after the baseline; SIGKILL + resume with deterministic: true ends with the uninterrupted run's parameters, bit
 * for bit; the CUDA generators are in rng.safetensors; watchdog.snapshot writes the caching allocator's snapshot,
 * whose history shows the leak's allocations and the step that made them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "safetensors.h"
#include "support.h"
#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* test-only entry points */

TestSuite(gpu, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

/* Skip the calling test unless a CUDA device is usable here. */
static void require_cuda(void)
{
    int n = 0;
    if (!trs_cuda_built())
        support_skip("no GPU test: this trainrun was built against a CPU-only libtorch (%s); build against a "
                     "CUDA-enabled one (scripts/gpu_check.sh)", trs_torch_version());
    if (trs_cuda_device_count(&n) != TRS_OK || n == 0) support_skip("no GPU test: no CUDA device is visible");
}

/* `trainrun CONFIG` with `args` (overrides), run `name` in the temp dir; output into out[n]; the exit code. */
static int cli(const char *config, const char *name, const char *args, char *out, size_t n)
{
    char all[4096];
    snprintf(all, sizeof all, "%s log.progress=never run.dir=%s run.name=%s %s", config, support_tmpdir, name, args);
    return support_cli(all, out, n);
}

/* A number field of summary.json of run `name`. */
static double summary_field(const char *name, const char *field)
{
    char path[700], text[1 << 14], key[96];
    snprintf(path, sizeof path, "%s/%s/summary.json", support_tmpdir, name);
    support_read_file(path, text, sizeof text);
    snprintf(key, sizeof key, "\"%s\":", field);
    const char *p = strstr(text, key);
    cr_assert_not_null(p, "%s has no %s: %s", path, field, text);
    return strtod(p + strlen(key), NULL);
}

static void same_accuracy_as_the_cpu(const char *config, const char *args, double tolerance)
{
    support_require_fmnist();
    require_cuda();
    static char out[1 << 15];
    char a[2048];
    snprintf(a, sizeof a, "%s device=cpu threads=4", args);
    cr_assert_eq(cli(config, "cpu", a, out, sizeof out), 0, "%s", out);
    snprintf(a, sizeof a, "%s device=cuda", args);
    cr_assert_eq(cli(config, "cuda", a, out, sizeof out), 0, "%s", out);
    const double cpu = summary_field("cpu", "test_accuracy"), gpu = summary_field("cuda", "test_accuracy");
    fprintf(stderr, "%s: test accuracy cpu %.4f, cuda %.4f\n", config, cpu, gpu);
    cr_expect_gt(cpu, 0.7, "the CPU run learnt");
    cr_expect_leq(fabs(gpu - cpu), tolerance, "%s: test accuracy on cuda %.4f vs the CPU's %.4f", config, gpu, cpu);
}

Test(gpu, mlp_reaches_the_cpus_test_accuracy_on_cuda)
{
    same_accuracy_as_the_cpu("configs/fashion_mnist_mlp.yaml",
                             "data.train_subset=20000 data.val_size=2000 train.epochs=2 eval.every_epoch=false", 0.015);
}

Test(gpu, convnet_reaches_the_cpus_test_accuracy_on_cuda)
{
    same_accuracy_as_the_cpu("configs/fashion_mnist_cnn.yaml",
                             "data.train_subset=6000 data.val_size=1000 data.test_subset=2000 train.epochs=1 "
                             "eval.every_epoch=false",
                             0.025);
}

Test(gpu, evaluation_keeps_nothing_on_the_device_and_touches_no_gradient)
{
    require_cuda();
    const trs_layer layers[] = {{.kind = TRS_LAYER_LINEAR, .in = 16, .out = 64, .bias = 1},
                                {.kind = TRS_LAYER_BATCHNORM1D, .out = 64, .eps = 1e-5, .momentum = 0.1},
                                {.kind = TRS_LAYER_RELU},
                                {.kind = TRS_LAYER_LINEAR, .in = 64, .out = 5, .bias = 1}};
    const int64_t shape[] = {16};
    trs_manual_seed(1);
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, 4, shape, 1, &m), TRS_OK, "%s", trs_last_error());
    cr_assert_eq(trs_model_to_device(m, TRS_DEVICE_CUDA, 0), TRS_OK, "%s", trs_model_errmsg(m));
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK, "%s", trs_model_errmsg(m));
    static float x[256 * 16];
    static int64_t y[256];
    for (int i = 0; i < 256 * 16; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < 256; i++) y[i] = i % 5;
    trs_batch b = {.x = x, .y = y, .ndim = 2, .shape = {256, 16}};
    trs_step_result r;
    cr_assert_eq(trs_train_step(m, opt, &b, NULL, &r), TRS_OK, "%s", trs_model_errmsg(m));
    uint32_t g0, g1, p0, p1;
    trs_model_digest(m, TRS_DIGEST_GRADS, &g0, NULL, NULL);
    trs_model_digest(m, TRS_DIGEST_PARAMS, &p0, NULL, NULL);
    trs_memory_stats before, after;
    trs_memory_stats_get(&before);
    for (int i = 0; i < 20; i++) cr_assert_eq(trs_eval_step(m, &b, NULL, &r), TRS_OK, "%s", trs_model_errmsg(m));
    trs_memory_stats_get(&after);
    cr_expect_eq(after.cuda_allocated_bytes[0], before.cuda_allocated_bytes[0],
                 "20 evaluations left %lld bytes on the device",
                 (long long)(after.cuda_allocated_bytes[0] - before.cuda_allocated_bytes[0]));
    trs_model_digest(m, TRS_DIGEST_GRADS, &g1, NULL, NULL);
    trs_model_digest(m, TRS_DIGEST_PARAMS, &p1, NULL, NULL);
    cr_expect_eq(g1, g0, "evaluation changed a gradient");
    cr_expect_eq(p1, p0, "evaluation changed a parameter or a running statistic");
    trs_optimizer_free(opt);
    trs_model_free(m);
}

Test(gpu, a_leak_is_caught_from_the_cuda_allocators_allocated_bytes)
{
    support_require_fmnist();
    require_cuda();
    static char out[1 << 15];
    const double leak = 1 << 20; /* a multiple of 512: the caching allocator's block size is exactly this */
    const int rc = cli("configs/fashion_mnist_mlp.yaml", "leak",
                       "device=cuda data.train_subset=6000 data.val_size=500 eval.every_epoch=false "
                       "eval.test_at_end=false train.max_steps=400 debug.leak_bytes_per_step=1048576 "
                       "watchdog.warmup_steps=20 watchdog.every_steps=10 watchdog.warn_ratio=1.5 "
                       "watchdog.action=warn checkpoint.at_end=false",
                       out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    static double growth[256], reserved[256], allocated[256];
    const char *dir = support_path("leak");
    const int n = support_read_field(dir, "watchdog", "growth_per_step", growth, NULL, 256);
    cr_assert_geq(n, 2, "no watchdog warning: %s", out);
    support_read_field(dir, "watchdog", "reserved", reserved, NULL, 256);
    support_read_field(dir, "watchdog", "allocated", allocated, NULL, 256);
    fprintf(stderr, "leak: growth %.0f B/step (leak %.0f), allocated %.0f, reserved %.0f\n", growth[n - 1], leak,
            allocated[n - 1], reserved[n - 1]);
    cr_expect_leq(fabs(growth[n - 1] - leak), 0.1 * leak, "growth %.0f B/step vs the leak's %.0f", growth[n - 1], leak);
    cr_expect_geq(reserved[n - 1], allocated[n - 1], "reserved (held) is at least allocated (live)");
    cr_expect(strstr(out, "reserved") != NULL, "the warning reports reserved: %s", out);
}

/* watchdog.snapshot: the caching allocator's history from the first step, and RUN_DIR/memory_snapshot.pickle
 * when the watchdog warns -- read back with Python's own pickle (no torch needed) in PyTorch's snapshot format
 * (segments, device_traces); the allocations that grew are the injected leak's 1 MiB blocks, and their stacks
 * name the step that made them. */
Test(gpu, a_leak_writes_the_allocators_memory_snapshot_naming_the_leak)
{
    support_require_fmnist();
    require_cuda();
    if (!trs_cuda_memory_snapshot_built()) support_skip("this CUDA build has no memory history (libtorch < 2.1)");
    static char out[1 << 15];
    const int rc = cli("configs/fashion_mnist_mlp.yaml", "snap",
                       "device=cuda data.train_subset=6000 data.val_size=500 eval.every_epoch=false "
                       "eval.test_at_end=false train.max_steps=200 debug.leak_bytes_per_step=1048576 "
                       "watchdog.warmup_steps=20 watchdog.every_steps=10 watchdog.warn_ratio=1.5 "
                       "watchdog.action=warn watchdog.snapshot=true checkpoint.at_end=false",
                       out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "memory_snapshot.pickle") != NULL, "the log names the snapshot: %s", out);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import pickle,sys\n"
             "s=pickle.load(open(sys.argv[1],'rb'))\n"
             "assert 'segments' in s and 'device_traces' in s, sorted(s)\n"
             "tr=[e for d in s['device_traces'] for e in d]\n"
             "leak=[e for e in tr if e['action']=='alloc' and e['size']==1048576]\n"
             "named=[e for e in leak if any('trs_train_step' in f.get('name','') for f in e.get('frames',[]))]\n"
             "print('snapshot: %%d segments, %%d trace entries, %%d leak allocations, %%d name trs_train_step'"
             "%%(len(s['segments']),len(tr),len(leak),len(named)))\n"
             "assert len(leak)>=150 and len(named)>=150\" '%s/snap/memory_snapshot.pickle' 2>&1",
             support_tmpdir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[512] = "";
    while (fgets(line + strlen(line), (int)(sizeof line - strlen(line)), p) && strlen(line) < sizeof line - 1) {
    }
    const int status = pclose(p);
    fprintf(stderr, "%s", line);
    cr_expect_eq(status, 0, "the snapshot does not show the leak: %s", line);
}

Test(gpu, a_clean_3000_step_run_keeps_allocated_flat_to_the_byte)
{
    support_require_fmnist();
    require_cuda();
    static char out[1 << 15];
    const int rc = cli("configs/fashion_mnist_mlp.yaml", "flat",
                       "device=cuda train.max_steps=3000 log.every_steps=50 eval.every_epoch=false eval.every_steps=500 "
                       "eval.test_at_end=false checkpoint.every_steps=1000 watchdog.warmup_steps=200 "
                       "watchdog.every_steps=50",
                       out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    static double alloc[256], steps[256], base[8], base_step[8];
    const char *dir = support_path("flat");
    const int n = support_read_field(dir, "train", "allocated", alloc, steps, 256);
    cr_assert_eq(support_read_field(dir, "watchdog", "baseline", base, base_step, 8) >= 1, 1, "no baseline: %s", out);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        if (steps[i] <= base_step[0]) continue;
        cr_expect_eq(alloc[i], base[0], "step %.0f: allocated %.0f bytes, baseline %.0f", steps[i], alloc[i], base[0]);
        checked++;
    }
    cr_expect_geq(checked, 50, "only %d records after the baseline", checked);
    fprintf(stderr, "flat: %d records after the baseline (step %.0f) at %.0f bytes allocated\n", checked,
            base_step[0], base[0]);
}

/* The model.safetensors digest in the manifest of run `name`'s checkpoint of `step`. */
static void model_sha(const char *name, int step, char out[65])
{
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s/checkpoints/step-%010d", support_tmpdir, name, step);
    support_manifest_digest(dir, "model.safetensors", out);
    cr_assert_neq(out[0], '\0', "no model digest in %s/MANIFEST.json", dir);
}

Test(gpu, sigkill_and_resume_on_the_gpu_ends_with_the_uninterrupted_runs_parameters)
{
    support_require_fmnist();
    require_cuda();
    static char out[1 << 15];
    static const char *common = "device=cuda deterministic=true data.train_subset=3000 data.val_size=500 "
                                "eval.every_epoch=false eval.every_steps=100 eval.test_at_end=false log.every_steps=1 "
                                "train.max_steps=600 checkpoint.every_steps=50";
    cr_assert_eq(cli("configs/fashion_mnist_mlp.yaml", "straight", common, out, sizeof out), 0, "%s", out);

    char run_dir[700], log[700], a_dir[700], a_name[700];
    snprintf(run_dir, sizeof run_dir, "%s/killed", support_tmpdir);
    snprintf(log, sizeof log, "%s/killed.log", support_tmpdir);
    snprintf(a_dir, sizeof a_dir, "run.dir=%s", support_tmpdir);
    snprintf(a_name, sizeof a_name, "run.name=killed");
    const char *argv[] = {"configs/fashion_mnist_mlp.yaml", "log.progress=never", a_dir, a_name, "device=cuda",
                          "deterministic=true", "data.train_subset=3000", "data.val_size=500",
                          "eval.every_epoch=false", "eval.every_steps=100", "eval.test_at_end=false",
                          "log.every_steps=1", "train.max_steps=600", "checkpoint.every_steps=50", NULL};
    support_seed("sigkill");
    const long long target = 100 + rand() % 401;
    fprintf(stderr, "sigkill: kill at the end of step %lld\n", target);
    char at_step[32];
    snprintf(at_step, sizeof at_step, "%lld", target);
    setenv("TRAINRUN_KILL_AT_STEP", at_step, 1); /* an exact step (run.c, kill_due), not a poll that can miss the end */
    const int code = support_wait(support_spawn(argv, log));
    unsetenv("TRAINRUN_KILL_AT_STEP");
    cr_assert_eq(code, 128 + SIGKILL, "exit %d, not killed at step %lld", code, target);
    cr_assert_eq(support_last_step(run_dir, "train"), target);
    cr_assert_eq(cli("configs/fashion_mnist_mlp.yaml", "killed", common, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "not bit for bit") == NULL, "a same-device resume warns of nothing: %s", out);
    char s1[65], s2[65];
    model_sha("straight", 600, s1);
    model_sha("killed", 600, s2);
    cr_expect_str_eq(s2, s1, "the resumed run's final parameters differ from the uninterrupted run's");

    /* the checkpoint holds every visible CUDA device's generator, and says where it was saved */
    int count = 0;
    trs_cuda_device_count(&count);
    char rng[800], trainer[800], text[1 << 16];
    snprintf(rng, sizeof rng, "%s/straight/checkpoints/step-0000000600/rng.safetensors", support_tmpdir);
    tr_st_file f = {0};
    tr_error err = {0};
    cr_assert_eq(tr_st_read(rng, &f, &err), TR_OK, "%s", err.msg);
    cr_expect_eq((int)f.n, 1 + count);
    for (int i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "cuda_generator.%d", i);
        const tr_st_tensor *t = tr_st_find(&f, name);
        cr_expect_not_null(t, "%s has no %s", rng, name);
        if (t) cr_expect_gt(t->nbytes, 0);
    }
    tr_st_close(&f);
    snprintf(trainer, sizeof trainer, "%s/straight/checkpoints/step-0000000600/trainer.json", support_tmpdir);
    support_read_file(trainer, text, sizeof text);
    cr_expect(strstr(text, "\"device\":\t\"cuda:0\"") != NULL, "%s", text);
}
