/*
 * test_torchscript.c -- model.torchscript: TorchScript modules trained by the same loop as YAML models.
 *
 *  - each refusal (not an archive, frozen, two inputs, tuple output, wrong output shape, traced) exits 2 naming the
 *    file, with its message; archives that crashed libtorch's reader are refused before it reads them;
 *  - exactly one of model.spec / model.torchscript (file:line:col in a file; an override replaces the other);
 *  - state_dict names equal the Python module's (tests/reference/resnet_small.keys, written by
 *    models/resnet_small.py);
 *  - the YAML MLP and its TorchScript twin (models/mlp.pt.gz) train to the same trace bit for bit, also with EMA,
 *    accumulation, clipping and no_decay globs;
 *  - SIGKILL at a random step + resume gives byte-identical final parameters (the ResNet, AdamW and SGD momentum);
 *    `trainrun check` passes on it; the run dir holds model.pt, and RUN_DIR/config.yaml continues the run;
 *  - a leak written in TorchScript (tests/torchscript/leak.pt) is measured and stopped; without it memory is flat.
 * Fixtures: the .pt files of tests/torchscript/, made by tests/torchscript/make_fixtures.py (committed; CI needs no Python).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "trainrun/trainrun.h"
#include "run.h"
#include "support.h"
#include "trace.h"
#include "trainrun_shim.h"
#include "trainrun_shim_test.h" /* test-only entry points */

TestSuite(torchscript, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

static char out[1 << 16];

#define FIX TR_SOURCE_DIR "/tests/torchscript/"
#define SUBSET "data.train_subset=1000 data.val_size=200 eval.test_at_end=false log.progress=never"

/* ---------------------------------------------------------------------------------------------- refusals */

/** Run the CLI on the MLP config with model.torchscript=FILE; expect exit 2 and every needle in the output. */
static void expect_refusal(const char *file, const char *const *needles)
{
    support_require_fmnist();
    char args[2048];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml model.torchscript=%s " SUBSET " run.dir='%s'", file,
             support_tmpdir);
    const int code = support_cli(args, out, sizeof out);
    cr_assert_eq(code, 2, "exit %d, expected 2 (config error): %s", code, out);
    cr_assert(strstr(out, file), "the message names %s: %s", file, out);
    for (int i = 0; needles[i]; i++) cr_assert(strstr(out, needles[i]), "no '%s' in: %s", needles[i], out);
}

Test(torchscript, refuses_a_file_that_is_not_a_torchscript_archive)
{
    const char *const n[] = {"not a TorchScript archive (torch.jit.save of a scripted module)", NULL};
    expect_refusal(FIX "not_torchscript.pt", n);
    const char *const m[] = {"not a TorchScript archive", NULL};
    expect_refusal(TR_SOURCE_DIR "/models/mlp.yaml", m);
}

Test(torchscript, refuses_a_gzip_file_that_is_corrupt_or_holds_no_archive)
{
    /* gzip's magic and method byte, then a header with reserved flag bits set: zlib refuses it at byte 0 */
    char bad[TR_PATH_MAX];
    snprintf(bad, sizeof bad, "%s/corrupt.pt.gz", support_tmpdir);
    FILE *f = fopen(bad, "wb");
    cr_assert(f);
    fwrite("\x1f\x8b\x08\xe0garbage", 1, 11, f);
    fclose(f);
    const char *const n[] = {"not a valid gzip file at inflated byte 0", NULL};
    expect_refusal(bad, n);
    /* a valid gzip of something else: inflated, then refused as an archive would be */
    char yaml_gz[TR_PATH_MAX + 32], cmd[2 * TR_PATH_MAX + 64];
    snprintf(yaml_gz, sizeof yaml_gz, "%s/mlp.yaml.gz", support_tmpdir);
    snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", TR_SOURCE_DIR "/models/mlp.yaml", yaml_gz);
    cr_assert_eq(system(cmd), 0);
    const char *const m[] = {"not a TorchScript archive", NULL};
    expect_refusal(yaml_gz, m);
}

Test(torchscript, refuses_a_module_without_parameters)
{
    const char *const n[] = {"it has no parameters to train (a torch.jit.freeze'd module keeps its weights as "
                             "constants",
                             NULL};
    expect_refusal(FIX "frozen.pt", n);
}

Test(torchscript, refuses_a_forward_that_does_not_take_one_tensor)
{
    const char *const n[] = {"its forward must take one tensor, forward(self, x: Tensor) -> Tensor; argument 'y' "
                             "has no default: forward(",
                             NULL};
    expect_refusal(FIX "two_inputs.pt", n);
    const char *const m[] = {"its forward must return one tensor", "(Tensor, Tensor)", NULL};
    expect_refusal(FIX "tuple_output.pt", m);
}

Test(torchscript, refuses_an_output_that_cannot_meet_the_targets_naming_both_shapes)
{
    const char *const n[] = {"forward maps a batch of shape [2, 1, 28, 28] to [2, 7], but the training labels go "
                             "up to 9: cross_entropy needs outputs of shape [2, 10]",
                             NULL};
    expect_refusal(FIX "seven_outputs.pt", n);
}

Test(torchscript, refuses_a_traced_module_whose_batchnorm_and_dropout_cannot_switch_mode)
{
    const char *const n[] = {"it looks traced (torch.jit.trace): 1 x aten::batch_norm, 1 x aten::dropout with the "
                             "train/eval flag fixed",
                             "torch.jit.save(torch.jit.script(m), FILE)", NULL};
    expect_refusal(FIX "traced.pt", n);
}

Test(torchscript, refuses_in_the_shim_with_the_file_named)
{
    const int64_t shape[3] = {1, 28, 28};
    trs_model *m = (trs_model *)1;
    cr_assert_eq(trs_model_load_torchscript(FIX "missing.pt", shape, 3, &m), TRS_E_INVALID);
    cr_assert_null(m);
    cr_assert(strstr(trs_last_error(), FIX "missing.pt: not a TorchScript archive"), "%s", trs_last_error());
    cr_assert_eq(trs_model_load_torchscript(FIX "no_leak.pt", shape, 0, &m), TRS_E_INVALID);
    /* a shape the module cannot take: the forward's own error, with the shape */
    const int64_t flat[1] = {100};
    const trs_status st = trs_model_load_torchscript(FIX "no_leak.pt", flat, 1, &m);
    cr_assert_eq(st, TRS_E_INVALID, "status %d: %s", (int)st, trs_last_error());
    cr_assert(strstr(trs_last_error(), "no_leak.pt: forward fails on a batch of shape [2, 100] (2 samples of the "
                                       "data's shape): RuntimeError: mat1 and mat2 shapes cannot be multiplied "
                                       "(2x100 and 784x10)"),
              "%s", trs_last_error());
}

/* Archives on which libtorch 1.13's reader crashes (SIGSEGV; found by tests/fuzz/torchscript.sh, rebuilt minimal
 * in tests/fuzz/corpus/torchscript/) are refused before libtorch reads them, with the entry and the reason named:
 * in this process, so a regression crashes the test. */
Test(torchscript, archives_that_crashed_libtorch_are_refused_naming_the_entry)
{
    static const struct {
        const char *file, *want;
    } cases[] = {
        /* made by tests/fuzz/corpus/torchscript/make_regressions.py from no_leak.pt */
        {"class_attribute_without_type.pt", "___torch_mangle_5.py: line 2: in class Linear(Module):, `__paramheters__ "
                                            "= [\"weight\", \"bias\", ]` assigns a class attribute without a type"},
        {"constants_pickle_pops_an_empty_stack.pt", "entry no_leak/constants.pkl: a malformed pickle: byte 2: a "
                                                    "tuple's items missing"},
    };
    const int64_t shape[3] = {1, 28, 28};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fuzz/corpus/torchscript/%s", TR_SOURCE_DIR, cases[i].file);
        trs_model *m = (trs_model *)1;
        cr_assert_eq(trs_model_load_torchscript(path, shape, 3, &m), TRS_E_INVALID, "%s: %s", path, trs_last_error());
        cr_expect_null(m);
        cr_expect(strstr(trs_last_error(), path) && strstr(trs_last_error(), "can load safely: entry ") &&
                      strstr(trs_last_error(), cases[i].want),
                  "%s: '%s' in: %s", cases[i].file, cases[i].want, trs_last_error());
    }
    /* a malformed source map (.debug_pkl), which libtorch reads only to quote the Python source of an error, and
     * whose forward crashed: the archive is loaded without its source maps, and its forward runs */
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/torchscript/debug_pickle_pops_an_empty_stack.pt", TR_SOURCE_DIR);
    trs_model *m = NULL;
    cr_assert_eq(trs_model_load_torchscript(path, shape, 3, &m), TRS_OK, "%s", trs_last_error());
    trs_model_free(m);
}

/* ---------------------------------------------------------------------------------------------- config */

Test(torchscript, config_takes_exactly_one_model)
{
    tr_config c;
    tr_error err = {0};
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_string(&c, "model:\n  spec: m.yaml\n  torchscript: m.pt\n", "c.yaml", &err),
                 TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "c.yaml:3:3: model.torchscript: give exactly one of model.spec (a model YAML) and "
                              "model.torchscript (a TorchScript archive), not both");
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_string(&c, "model:\n  torchscript: m.pt\n  spec: m.yaml\n", "c.yaml", &err),
                 TR_E_CONFIG);
    cr_assert(strstr(err.msg, "c.yaml:3:3: model.spec: give exactly one"), "%s", err.msg);
    /* an empty value is no model: a run's config.yaml writes both keys */
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_string(&c, "model:\n  spec: ''\n  torchscript: m.pt\n", "c.yaml", &err), TR_OK,
                 "%s", err.msg);
    cr_assert_eq(tr_config_validate(&c, &err), TR_OK, "%s", err.msg);
    /* an override replaces the file's model, of either kind */
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_string(&c, "model:\n  spec: m.yaml\n", "c.yaml", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_config_override(&c, "model.torchscript=m.pt", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.model.spec, "");
    cr_assert_str_eq(c.model.torchscript, "m.pt");
    cr_assert_eq(tr_config_validate(&c, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_config_override(&c, "model.spec=m.yaml", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.model.torchscript, "");
    /* both set (the API can do it): validation refuses */
    strcpy(c.model.torchscript, "m.pt");
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "model.torchscript: give exactly one of model.spec (m.yaml) and model.torchscript "
                              "(m.pt), not both");
    /* model.input_shape: whole numbers, TorchScript only */
    c.model.spec[0] = '\0';
    cr_assert_eq(tr_config_override(&c, "model.input_shape=[1, 28.5]", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "model.input_shape[1]: 28.5 is not a whole number");
}

/* ---------------------------------------------------------------------------------------------- names */

Test(torchscript, state_dict_names_are_the_python_modules)
{
    char want[4096];
    support_read_file(TR_SOURCE_DIR "/tests/reference/resnet_small.keys", want, sizeof want);
    const int64_t shape[3] = {1, 28, 28};
    trs_model *m = NULL;
    cr_assert_eq(trs_model_load_torchscript(TR_SOURCE_DIR "/models/resnet_small.pt", shape, 3, &m), TRS_OK, "%s",
                 trs_last_error());
    int64_t n = 0, params = 0;
    cr_assert_eq(trs_model_state_count(m, &n), TRS_OK);
    char got[4096] = "";
    size_t used = 0;
    for (int64_t i = 0; i < n; i++) {
        char name[256];
        cr_assert_eq(trs_model_state_entry(m, i, name, sizeof name, NULL, NULL, NULL), TRS_OK);
        used += (size_t)snprintf(got + used, sizeof got - used, "%s\n", name);
    }
    cr_assert_str_eq(got, want, "trainrun's state_dict names vs PyTorch's");
    cr_assert_eq(n, 38);
    cr_assert_eq(trs_model_param_count(m, &params), TRS_OK);
    cr_assert_eq(params, 77290, "models/resnet_small.py prints 77290 parameters");
    int64_t dim = 0;
    cr_assert_eq(trs_model_output_dim(m, &dim), TRS_OK);
    cr_assert_eq(dim, 10);
    int training = 0;
    cr_assert_eq(trs_model_is_training(m, &training), TRS_OK);
    cr_assert_eq(training, 1, "a loaded module starts in train mode");
    trs_model_free(m);
}

/* ---------------------------------------------------------------------------------------------- twin */

/** Train `config` on a subset with `extra` (a space-separated override string) and read its trace. */
static void train_trace(const char *config, const char *name, const char *extra, tr_trace *t)
{
    char args[2048], trace[600];
    snprintf(trace, sizeof trace, "%s.trace", support_path(name));
    snprintf(args, sizeof args,
             "configs/%s " SUBSET " train.max_steps=120 train.batch_size=32 eval.every_steps=40 eval.every_epoch=false"
             " %s run.dir='%s' run.name=%s --trace '%s'",
             config, extra, support_tmpdir, name, trace);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    tr_error err = {0};
    cr_assert_eq(tr_trace_read(trace, t, &err), TR_OK, "%s", err.msg);
}

static void check_twin(const char *extra, const char *tag)
{
    support_require_fmnist();
    char a[64], b[64];
    snprintf(a, sizeof a, "yaml-%s", tag);
    snprintf(b, sizeof b, "ts-%s", tag);
    tr_trace yaml = {0}, ts = {0};
    train_trace("fashion_mnist_mlp.yaml", a, extra, &yaml);
    train_trace("fashion_mnist_mlp_torchscript.yaml", b, extra, &ts);
    cr_assert_eq(yaml.n_steps, 120);
    cr_assert_geq(yaml.n_evals, 3);
    char msg[512], warn[512];
    cr_assert_eq(tr_trace_compare(&ts, &yaml, 0, 1, msg, sizeof msg, warn, sizeof warn), 0,
                 "TorchScript twin vs YAML MLP (%s), bit for bit: %s", extra, msg);
    cr_assert(yaml.steps[119].loss < yaml.steps[0].loss - 0.5, "it trains: %g -> %g", yaml.steps[0].loss,
              yaml.steps[119].loss);
    tr_trace_free(&yaml);
    tr_trace_free(&ts);
}

Test(torchscript, yaml_mlp_and_its_torchscript_twin_train_to_the_same_trace)
{
    check_twin("", "plain");
}

Test(torchscript, twin_matches_with_ema_accumulation_clipping_and_no_decay_globs)
{
    check_twin("ema.enabled=true ema.decay=0.99 eval.weights=both train.accumulate_steps=2 "
               "optim.grad_clip_norm=0.7 optim.weight_decay=0.05 optim.no_decay='\"*.bias,1.weight\"'",
               "options");
}

/* ---------------------------------------------------------------------------------------------- resume */

#define RESNET "configs/fashion_mnist_resnet.yaml"
#define RESNET_RUN                                                                                               \
    "data.train_subset=1200 data.val_size=200 eval.test_at_end=false eval.every_epoch=false eval.every_steps=30 " \
    "log.progress=never log.every_steps=1 train.batch_size=16 train.max_steps=90 checkpoint.every_steps=10 "     \
    "checkpoint.every_seconds=0"

/** The digest of the final checkpoint's model.safetensors, from its manifest. */
static void model_sha(const char *run_dir, char *sha)
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/checkpoints/step-0000000090", run_dir);
    support_manifest_digest(dir, "model.safetensors", sha);
    cr_assert_neq(sha[0], '\0', "no model digest in %s/MANIFEST.json", dir);
}

static void check_resume(const char *tag, const char *optim)
{
    support_require_fmnist();
    char args[2048], straight[600], killed[600], log[700];
    snprintf(straight, sizeof straight, "%s/%s-straight", support_tmpdir, tag);
    snprintf(killed, sizeof killed, "%s/%s-killed", support_tmpdir, tag);
    snprintf(args, sizeof args, RESNET " " RESNET_RUN " %s run.dir='%s' run.name=%s-straight", optim, support_tmpdir,
             tag);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);

    support_seed(tag);
    const long long target = 15 + rand() % 61; /* a random step in [15, 75] */
    cr_log_info("%s: SIGKILL at the end of step %lld", tag, target);
    char run_name[64], run_dir[600], opt_buf[4][128];
    snprintf(run_name, sizeof run_name, "run.name=%s-killed", tag);
    snprintf(run_dir, sizeof run_dir, "run.dir=%s", support_tmpdir);
    const char *argv[40];
    int n = 0;
    argv[n++] = RESNET;
    static char runbuf[1024];
    snprintf(runbuf, sizeof runbuf, "%s", RESNET_RUN);
    for (char *save = NULL, *tok = strtok_r(runbuf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        argv[n++] = tok;
    char optbuf[512];
    snprintf(optbuf, sizeof optbuf, "%s", optim);
    int k = 0;
    for (char *save = NULL, *tok = strtok_r(optbuf, " ", &save); tok && k < 4; tok = strtok_r(NULL, " ", &save))
        argv[n++] = strcpy(opt_buf[k++], tok);
    argv[n++] = run_dir;
    argv[n++] = run_name;
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s.log", killed);
    char at_step[32];
    snprintf(at_step, sizeof at_step, "%lld", target);
    setenv("TRAINRUN_KILL_AT_STEP", at_step, 1); /* an exact step (run.c, kill_due), not a poll that can miss the end */
    const int code = support_wait(support_spawn(argv, log));
    unsetenv("TRAINRUN_KILL_AT_STEP");
    cr_assert_eq(code, 128 + SIGKILL, "%s: exit %d, not killed at step %lld", tag, code, target);
    const long long at = support_last_step(killed, "train");
    cr_assert_eq(at, target);

    /* resume from the run directory's own config.yaml, which points at its copy of the archive (model.pt) */
    char cfg[700], text[1 << 14];
    snprintf(cfg, sizeof cfg, "%s/config.yaml", killed);
    support_read_file(cfg, text, sizeof text);
    cr_assert(strstr(text, "torchscript: \"model.pt\""), "%s", text);
    snprintf(args, sizeof args, "'%s' log.progress=never", cfg);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    double resume_step[4];
    cr_assert_eq(support_read_field(killed, "resume", "step", resume_step, NULL, 4), 1, "one resume");
    cr_assert_leq(resume_step[0], (double)at);

    char sha_s[65], sha_k[65];
    model_sha(straight, sha_s);
    model_sha(killed, sha_k);
    cr_assert_str_eq(sha_k, sha_s, "%s: final parameters differ after SIGKILL at %lld + resume", tag, at);
}

Test(torchscript, resnet_resume_after_sigkill_is_byte_identical_adamw)
{
    check_resume("adamw", "optim.name=adamw");
}

Test(torchscript, resnet_resume_after_sigkill_is_byte_identical_sgd_momentum)
{
    check_resume("sgd", "optim.name=sgd optim.lr=0.05 optim.momentum=0.9 optim.weight_decay=5e-4");
}

Test(torchscript, check_passes_on_the_resnet)
{
    support_require_fmnist();
    char args[2048];
    snprintf(args, sizeof args,
             "check " RESNET " --steps 60 data.train_subset=1200 data.val_size=200 eval.test_at_end=false "
             "train.batch_size=16 run.dir='%s'",
             support_tmpdir);
    const int code = support_cli(args, out, sizeof out);
    cr_assert_eq(code, 0, "trainrun check exited %d: %s", code, out);
}

/* ---------------------------------------------------------------------------------------------- leaks */

Test(torchscript, a_leak_written_in_torchscript_is_measured_and_stopped)
{
    support_require_fmnist();
    const char *const extra[] = {"model.torchscript=" FIX "leak.pt", "train.max_steps=5000", "train.batch_size=8",
                                 "log.every_steps=50", "watchdog.every_steps=50", "eval.every_steps=300",
                                 "eval.test_at_end=false", "watchdog.limit_ratio=1.5",
                                 "watchdog.action=checkpoint_exit", "schedule.warmup_steps=0", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "leak", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_E_WATCHDOG, "%s", err.msg);
    cr_expect(s.watchdog_stopped);
    /* 16,384 float32 zeros = 65,536 bytes appended to a List[Tensor] attribute per training forward */
    cr_expect(fabs(s.growth_per_step - 65536.0) <= 0.1 * 65536.0, "growth %.1f bytes/step, true 65536",
              s.growth_per_step);
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"limit\""), 1);
    cr_expect_lt(s.steps, 5000);

    /* the CLI's exit code for a watchdog stop */
    char args[2048];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml model.torchscript=%s " SUBSET " train.batch_size=8 train.max_steps=5000 "
             "eval.every_steps=300 watchdog.every_steps=50 watchdog.limit_ratio=1.5 schedule.warmup_steps=0 "
             "run.dir='%s' run.name=leak-cli",
             FIX "leak.pt", support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 3, "%s", out);
}

Test(torchscript, the_same_module_without_the_append_is_flat_to_the_byte_over_3000_steps)
{
    support_require_fmnist();
    const char *const extra[] = {"model.torchscript=" FIX "no_leak.pt", "train.max_steps=3000", "train.batch_size=8",
                                 "log.every_steps=50", "watchdog.every_steps=50", "eval.every_steps=300",
                                 "eval.test_at_end=false", "schedule.warmup_steps=0", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "flat", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_assert_gt(s.baseline_bytes, 0);
    support_assert_flat(&s, 60);
}

/* ---------------------------------------------------------------------------------------------- trainer API */

Test(torchscript, the_trainer_api_trains_a_torchscript_module_of_the_configured_input_shape)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "model:\n  torchscript: %s/models/resnet_small.pt\noptim:\n  name: sgd\n  lr: 0.05\n",
             TR_SOURCE_DIR);
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_E_CONFIG);
    cr_assert_str_eq(trainrun_trainer_errmsg(t), "model.input_shape: a trainer of a TorchScript model needs the "
                                                 "per-sample input shape (e.g. model.input_shape=[1, 28, 28])");
    trainrun_trainer_close(t);

    const char *const shape[] = {"model.input_shape=[1, 28, 28]"};
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, shape, 1, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    /* 16 images: a left-half and a right-half pattern per class 0 / 1, which SGD separates in a few steps */
    static float x[16 * 28 * 28];
    int64_t y[16];
    for (int i = 0; i < 16; i++) {
        y[i] = i % 2;
        for (int r = 0; r < 28; r++)
            for (int c = 0; c < 28; c++) x[i * 784 + r * 28 + c] = ((c < 14) == (y[i] == 0)) ? 1.0f : -1.0f;
    }
    const trainrun_batch b = {.x = x, .x_dtype = TRAINRUN_FLOAT32, .ndim = 4, .shape = {16, 1, 28, 28}, .y = y,
                              .y_dtype = TRAINRUN_INT64};
    trainrun_step_result r0, r;
    cr_assert_eq(trainrun_trainer_train_step(t, &b, &r0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    for (int i = 0; i < 9; i++)
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_lt(r.loss, r0.loss, "loss at step 10 %g vs step 1 %g", r.loss, r0.loss);
    cr_assert_eq(r.correct, 16, "both patterns told apart by step 10");
    trainrun_step_result e;
    cr_assert_eq(trainrun_trainer_eval_step(t, &b, &e), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(e.samples, 16);
    cr_assert(isfinite(e.loss), "%g", e.loss);
    cr_assert_eq(trainrun_trainer_close(t), TRAINRUN_OK);
}
