/*
 * test_device.c -- the device-generic path on the CPU: `device: cpu` set explicitly trains bit for bit as the
 * default does; `device: cuda` on a CPU-only libtorch is refused at start-up (exit 2, before any file is written);
 * a checkpoint saved on a CUDA device and resumed on the CPU is warned about by name; a CPU checkpoint holds no CUDA
 * generator; the shim's device calls (move, CUDA generators, allocator) answer as a CPU-only build must; deterministic
 * mode sets cuDNN's flags. The GPU's own checks are in test_gpu.c (skipped without a GPU).
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"
#include "support.h"
#include "trainrun/trainrun.h"
#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* test-only entry points */

TestSuite(device, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

/* A CUDA device this process could use (a CUDA build on a machine with a GPU): then the CPU-only refusals do not
 * apply and those tests skip, saying so. */
static int cuda_usable(void)
{
    int n = 0;
    return trs_cuda_built() && trs_cuda_device_count(&n) == TRS_OK && n > 0;
}

/* `trainrun` on the MLP config, a 3000-sample subset, `steps` steps, run `name` in the temp dir, plus `extra`
 * overrides; output into out[n]; returns the exit code. */
static int cli_run(const char *name, int steps, const char *extra, char *out, size_t n)
{
    char args[2048];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml data.train_subset=3000 data.val_size=500 eval.test_at_end=false "
             "eval.every_epoch=false eval.every_steps=20 log.every_steps=1 log.progress=never train.max_steps=%d "
             "run.dir=%s run.name=%s %s",
             steps, support_tmpdir, name, extra ? extra : "");
    return support_cli(args, out, n);
}

Test(device, cuda_on_a_cpu_only_build_is_refused_at_start_up_with_exit_2)
{
    if (trs_cuda_built()) support_skip("this trainrun was built against a CUDA-enabled libtorch: nothing to refuse");
    static char out[1 << 14];
    static const char *const devices[] = {"cuda", "cuda:0", "cuda:3"};
    for (int i = 0; i < 3; i++) {
        char extra[64], name[32], dir[600];
        snprintf(extra, sizeof extra, "device=%s", devices[i]);
        snprintf(name, sizeof name, "refused%d", i);
        cr_assert_eq(cli_run(name, 5, extra, out, sizeof out), 2, "%s: %s", devices[i], out);
        char want[512];
        snprintf(want, sizeof want,
                 "device: %s, but this trainrun was built against a CPU-only libtorch (%s), so CUDA is unavailable: "
                 "set device: cpu, or rebuild trainrun against a CUDA-enabled libtorch",
                 devices[i], trs_torch_version());
        cr_expect(strstr(out, want) != NULL, "expected '%s' in:\n%s", want, out);
        /* refused before anything was set up: no run directory */
        struct stat st;
        snprintf(dir, sizeof dir, "%s/%s", support_tmpdir, name);
        cr_expect_neq(stat(dir, &st), 0, "%s was created", dir);
    }
    /* the embedding API refuses it the same way when a trainer is opened */
    const char *const over[] = {"device=cuda"};
    trainrun_trainer *tr = NULL;
    cr_assert_eq(trainrun_trainer_open(TR_SOURCE_DIR "/configs/fashion_mnist_mlp.yaml", over, 1, &tr),
                 TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(tr), "built against a CPU-only libtorch") != NULL, "%s",
              trainrun_trainer_errmsg(tr));
    trainrun_trainer_close(tr);
}

Test(device, explicit_cpu_trains_bit_for_bit_as_the_default)
{
    support_require_fmnist();
    static char out[1 << 14];
    cr_assert_eq(cli_run("default", 60, NULL, out, sizeof out), 0, "%s", out);
    cr_assert_eq(cli_run("cpu", 60, "device=cpu", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "device cpu;") != NULL, "the start-up line names the device:\n%s", out);
    static double ld[128], lc[128], ad[128], ac[128];
    const char *dd = support_path("default"), *dc = support_path("cpu");
    cr_assert_eq(support_read_field(dd, "train", "loss", ld, NULL, 128), 60);
    cr_assert_eq(support_read_field(dc, "train", "loss", lc, NULL, 128), 60);
    for (int i = 0; i < 60; i++) cr_assert_eq(lc[i], ld[i], "step %d: loss %a vs %a", i + 1, lc[i], ld[i]);
    /* the memory records are the CPU's counted bytes, the same in both runs, with no `reserved` (not measured) */
    cr_assert_eq(support_read_field(dd, "train", "allocated", ad, NULL, 128), 60);
    cr_assert_eq(support_read_field(dc, "train", "allocated", ac, NULL, 128), 60);
    for (int i = 0; i < 60; i++) cr_expect_eq(ac[i], ad[i], "step %d: allocated %g vs %g", i + 1, ac[i], ad[i]);
    cr_expect_gt(ac[59], 0.0);
    cr_expect_eq(support_count_records(dc, "\"reserved\""), 60 + 4, "the CPU caching allocator's, in every record");
    char path[700], summary[8192];
    snprintf(path, sizeof path, "%s/summary.json", dc);
    support_read_file(path, summary, sizeof summary);
    cr_expect(strstr(summary, "\"device\":\"cpu\"") != NULL, "%s", summary);
    cr_expect(strstr(summary, "\"final_reserved_bytes\":") != NULL, "%s", summary);
}

static void saved_on_cuda(cJSON *o, void *ctx)
{
    (void)ctx;
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "device")), "cpu");
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "cuda_generators")), 0.0);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "device", cJSON_CreateString("cuda:0"));
    cJSON_ReplaceItemInObjectCaseSensitive(o, "cuda_generators", cJSON_CreateNumber(1));
}

Test(device, a_cuda_checkpoint_resumed_on_the_cpu_is_warned_about)
{
    support_require_fmnist();
    if (cuda_usable()) support_skip("a CUDA device is present: test_gpu.c covers resuming there");
    static char out[1 << 15];
    cr_assert_eq(cli_run("moved", 40, "checkpoint.every_steps=20 checkpoint.at_end=false", out, sizeof out), 0, "%s",
                 out);
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/moved/checkpoints/step-0000000040", support_tmpdir);

    /* a CPU run's checkpoint: device "cpu", and only the CPU generator in rng.safetensors */
    char rng[800];
    snprintf(rng, sizeof rng, "%s/rng.safetensors", ckpt);
    tr_st_file f = {0};
    tr_error err = {0};
    cr_assert_eq(tr_st_read(rng, &f, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(f.n, 1);
    cr_expect_not_null(tr_st_find(&f, "cpu_generator"));
    cr_expect_null(tr_st_find(&f, "cuda_generator.0"));
    tr_st_close(&f);

    /* as if saved on cuda:0: the resume on the CPU goes on, and says why it is no longer bit for bit */
    support_edit_checkpoint_json(ckpt, "trainer.json", saved_on_cuda, NULL);
    cr_assert_eq(cli_run("moved", 60, "checkpoint.every_steps=20 checkpoint.at_end=false", out, sizeof out), 0, "%s",
                 out);
    cr_expect(strstr(out, "warning: the checkpoint was saved on cuda:0 (1 CUDA device(s)), this run is on cpu (0): "
                          "it continues, but not bit for bit") != NULL, "%s", out);
    cr_expect(strstr(out, "resumed") != NULL || support_count_records(support_path("moved"), "\"resume\"") == 1,
              "%s", out);
    cr_expect_eq(support_last_step(support_path("moved"), "train"), 60);

    /* a resume on the device it was saved on says nothing about devices */
    cr_assert_eq(cli_run("moved", 80, "checkpoint.every_steps=20 checkpoint.at_end=false", out, sizeof out), 0, "%s",
                 out);
    cr_expect(strstr(out, "saved on") == NULL, "%s", out);
}

Test(device, the_shim_moves_a_model_to_the_cpu_in_place_and_refuses_cuda_without_it)
{
    const trs_layer layers[] = {{.kind = TRS_LAYER_LINEAR, .in = 4, .out = 8, .bias = 1},
                                {.kind = TRS_LAYER_RELU},
                                {.kind = TRS_LAYER_LINEAR, .in = 8, .out = 3, .bias = 1}};
    const int64_t shape[] = {4};
    cr_assert_eq(trs_manual_seed(7), TRS_OK);
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, 3, shape, 1, &m), TRS_OK, "%s", trs_last_error());
    uint32_t crc0 = 0, crc1 = 0;
    double sum0 = 0, sum1 = 0;
    trs_model_digest(m, TRS_DIGEST_PARAMS, &crc0, &sum0, NULL);
    trs_memory_stats before, after;
    trs_memory_stats_get(&before);
    cr_assert_eq(trs_model_to_device(m, TRS_DEVICE_CPU, -1), TRS_OK, "%s", trs_model_errmsg(m));
    trs_memory_stats_get(&after);
    cr_expect_eq(after.allocated_bytes, before.allocated_bytes, "a move to the CPU copies nothing");
    trs_model_digest(m, TRS_DIGEST_PARAMS, &crc1, &sum1, NULL);
    cr_expect_eq(crc1, crc0);
    trs_device_type type = TRS_DEVICE_CUDA;
    int index = 0;
    cr_assert_eq(trs_model_device(m, &type, &index), TRS_OK);
    cr_expect_eq(type, TRS_DEVICE_CPU);
    cr_expect_eq(index, -1);
    cr_expect_eq(trs_model_to_device(m, (trs_device_type)5, 0), TRS_E_INVALID);
    cr_expect_str_eq(trs_model_errmsg(m), "unknown device type 5");

    if (!cuda_usable()) {
        int count = -1;
        cr_assert_eq(trs_cuda_device_count(&count), TRS_OK);
        cr_expect_eq(count, 0);
        const char *want = trs_cuda_built() ? "no CUDA device 0: this process sees 0 CUDA device(s)"
                                            : "no CUDA device 0: this process sees 0 (this trainrun was built against "
                                              "a CPU-only libtorch)";
        cr_expect_eq(trs_model_to_device(m, TRS_DEVICE_CUDA, 0), TRS_E_INVALID);
        cr_expect_str_eq(trs_model_errmsg(m), want);
        size_t nbytes = 0;
        unsigned char state[16] = {0};
        cr_expect_eq(trs_cuda_rng_state_size(0, &nbytes), TRS_E_INVALID);
        cr_expect_str_eq(trs_last_error(), want);
        cr_expect_eq(trs_cuda_rng_get_state(0, state, sizeof state), TRS_E_INVALID);
        cr_expect_eq(trs_cuda_rng_set_state(0, state, sizeof state), TRS_E_INVALID);
        int64_t free_b = -1, total_b = -1;
        cr_expect_eq(trs_cuda_memory_info(0, &free_b, &total_b), TRS_E_INVALID);
        cr_expect_eq(total_b, 0);
        trs_memory_stats_get(&after);
        cr_expect_eq(after.cuda_devices, 0);
    }
    cr_expect_eq(trs_cuda_empty_cache(), TRS_OK, "releasing an empty or absent cache is harmless");

    /* the model, still on the CPU, trains: the failed move changed nothing */
    trs_optimizer *opt = NULL;
    trs_optim_options o = {.kind = TRS_OPT_SGD, .lr = 0.1};
    cr_assert_eq(trs_optimizer_create(m, &o, &opt), TRS_OK, "%s", trs_model_errmsg(m));
    const float x[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    const int64_t y[2] = {0, 2};
    trs_batch b = {.x = x, .y = y, .ndim = 2, .shape = {2, 4}};
    trs_step_result r;
    trs_step_options so = {.grad_clip_norm = 0.5};
    cr_assert_eq(trs_train_step(m, opt, &b, &so, &r), TRS_OK, "%s", trs_model_errmsg(m));
    cr_expect_eq(r.samples, 2);
    cr_expect_gt(r.grad_norm, 0.0, "the clipped norm comes back with the loss");
    cr_expect(r.loss > 0 && r.loss < 10);
    trs_optimizer_free(opt);
    trs_model_free(m);
}

Test(device, deterministic_mode_sets_cudnn_deterministic_and_turns_benchmark_off)
{
    int det = -1, bench = -1;
    cr_assert_eq(trs_set_deterministic(1), TRS_OK, "%s", trs_last_error());
    cr_assert_eq(trs_get_cudnn_flags(&det, &bench), TRS_OK);
    cr_expect_eq(det, 1);
    cr_expect_eq(bench, 0);
    cr_assert_eq(trs_set_deterministic(0), TRS_OK);
    trs_get_cudnn_flags(&det, NULL);
    cr_expect_eq(det, 0);
}

Test(device, the_trainer_api_reports_the_cpus_memory_without_reserved)
{
    trainrun_trainer *tr = NULL;
    const char *const over[] = {"device=cpu"};
    cr_assert_eq(trainrun_trainer_open(TR_SOURCE_DIR "/configs/fashion_mnist_mlp.yaml", over, 1, &tr), TRAINRUN_OK,
                 "%s", trainrun_trainer_errmsg(tr));
    trainrun_memory mem;
    cr_assert_eq(trainrun_trainer_memory(tr, &mem), TRAINRUN_OK);
    cr_expect_gt(mem.allocated_bytes, 0, "the model's parameters are counted");
    cr_expect_geq(mem.reserved_bytes, mem.allocated_bytes, "the CPU caching allocator holds at least the live bytes");
    trainrun_trainer_close(tr);
}
