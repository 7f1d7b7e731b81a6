/* test_config.c -- the schema-driven config: defaults, YAML 1.2 scalars, exact error messages, overrides,
 * validation, the YAML writer (round trip) and the reference table. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

/* Load `yaml` over the defaults into *cfg; returns the status, message in *err. */
static int load(tr_config *cfg, const char *yaml, tr_error *err)
{
    memset(err, 0, sizeof *err);
    tr_config_defaults(cfg);
    return tr_config_load_string(cfg, yaml, "x.yaml", err);
}

/* Assert that `yaml` fails with TR_E_CONFIG and exactly `msg`. */
static void expect_error(const char *yaml, const char *msg)
{
    tr_config cfg;
    tr_error err;
    int rc = load(&cfg, yaml, &err);
    cr_assert_eq(rc, TR_E_CONFIG, "expected failure for:\n%s", yaml);
    cr_assert_eq(err.code, TR_E_CONFIG);
    cr_assert_str_eq(err.msg, msg);
}

/* Assert that override `kv` on the defaults fails with exactly `msg`. */
static void expect_override_error(const char *kv, const char *msg)
{
    tr_config cfg;
    tr_error err = {0};
    tr_config_defaults(&cfg);
    cr_assert_eq(tr_config_override(&cfg, kv, &err), TR_E_CONFIG, "expected failure for %s", kv);
    cr_assert_str_eq(err.msg, msg);
}

/* Write `text` to a fresh temp file; path in out[64]. */
static void write_temp(const char *text, char *out)
{
    strcpy(out, "/tmp/trainrun_cfg_XXXXXX");
    int fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
}

Test(config, defaults)
{
    tr_config c;
    tr_config_defaults(&c);
    cr_assert_str_eq(c.source, "");
    cr_assert_eq(c.seed, 0);
    cr_assert_eq(c.threads, 0);
    cr_assert_eq(c.interop_threads, 1);
    cr_assert_eq(c.deterministic, false);
    cr_assert_eq(c.data.format, TR_DATA_IDX);
    cr_assert_str_eq(c.data.root, "/usr/share/datasets/fashion-mnist");
    cr_assert_str_eq(c.data.train_images, "train-images-idx3-ubyte.gz");
    cr_assert_str_eq(c.data.train_labels, "train-labels-idx1-ubyte.gz");
    cr_assert_str_eq(c.data.test_images, "t10k-images-idx3-ubyte.gz");
    cr_assert_str_eq(c.data.test_labels, "t10k-labels-idx1-ubyte.gz");
    cr_assert_eq(c.data.val_size, 5000);
    cr_assert_eq(c.data.train_subset, 0);
    cr_assert_eq(c.data.test_subset, 0);
    cr_assert_eq(c.data.n_mean, 1);
    cr_assert_eq(c.data.mean[0], 0.2860);
    cr_assert_eq(c.data.n_std, 1);
    cr_assert_eq(c.data.std[0], 0.3530);
    cr_assert_eq(c.data.shuffle, true);
    cr_assert_str_eq(c.model.spec, "");
    cr_assert_eq(c.optim.name, TR_OPTIM_ADAMW);
    cr_assert_eq(c.optim.lr, 1e-3);
    cr_assert_eq(c.optim.momentum, 0.0);
    cr_assert_eq(c.optim.dampening, 0.0);
    cr_assert_eq(c.optim.nesterov, false);
    cr_assert_eq(c.optim.weight_decay, 0.0);
    cr_assert_eq(c.optim.beta1, 0.9);
    cr_assert_eq(c.optim.beta2, 0.999);
    cr_assert_eq(c.optim.eps, 1e-8);
    cr_assert_eq(c.optim.amsgrad, false);
    cr_assert_eq(c.optim.grad_clip_norm, 0.0);
    cr_assert_eq(c.schedule.name, TR_SCHED_CONSTANT);
    cr_assert_eq(c.schedule.warmup_steps, 0);
    cr_assert_eq(c.schedule.step_size, 1000);
    cr_assert_eq(c.schedule.gamma, 0.1);
    cr_assert_eq(c.schedule.min_lr, 0.0);
    cr_assert_eq(c.train.epochs, 10);
    cr_assert_eq(c.train.max_steps, 0);
    cr_assert_eq(c.train.batch_size, 64);
    cr_assert_eq(c.train.loss, TR_LOSS_CROSS_ENTROPY);
    cr_assert_eq(c.train.label_smoothing, 0.0);
    cr_assert_eq(c.train.drop_last, true);
    cr_assert_eq(c.eval.every_steps, 0);
    cr_assert_eq(c.eval.every_epoch, true);
    cr_assert_eq(c.eval.batch_size, 1000);
    cr_assert_eq(c.eval.test_at_end, true);
    cr_assert_eq(c.log.every_steps, 50);
    cr_assert_eq(c.log.progress, TR_PROGRESS_AUTO);
    cr_assert_str_eq(c.run.dir, "runs");
    cr_assert_str_eq(c.run.name, "");

    /* Every default is valid except the one key without a default: the model. */
    tr_error err = {0};
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "model.spec: no model given (e.g. model.spec=../models/mlp.yaml)");
    strcpy(c.model.spec, "mlp.yaml");
    cr_assert_eq(tr_config_validate(&c, &err), TR_OK, "%s", err.msg);
}

Test(config, empty_and_comment_only_files_keep_defaults)
{
    const char *texts[] = {"", "# nothing here\n", "---\n", "~\n", "optim:\n  # all commented out\n"};
    tr_config def;
    tr_config_defaults(&def);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        tr_config c;
        tr_error err;
        cr_assert_eq(load(&c, texts[i], &err), TR_OK, "%s", err.msg);
        cr_assert_eq(memcmp(&c, &def, sizeof c), 0, "text %zu changed the config", i);
    }
}

Test(config, yaml12_numbers)
{
    tr_config c;
    tr_error err;
    int rc = load(&c,
                  "seed: 0x10\n"
                  "threads: 0o17\n"
                  "interop_threads: +2\n"
                  "deterministic: True\n"
                  "optim:\n"
                  "  lr: 1e-3\n"
                  "  eps: 1e-08\n"
                  "  weight_decay: 3.\n"
                  "  momentum: .5\n"
                  "  grad_clip_norm: 2\n"
                  "  beta2: 9.99e-1\n"
                  "  amsgrad: TRUE\n"
                  "schedule:\n"
                  "  min_lr: +1.5E-4\n"
                  "  gamma: 1\n"
                  "train:\n"
                  "  drop_last: False\n"
                  "  max_steps: 0xe8d4a51000\n"
                  "data:\n"
                  "  mean: [0.5, -1, 2e0]\n"
                  "  std: 0.25\n",
                  &err);
    cr_assert_eq(rc, TR_OK, "%s", err.msg);
    cr_assert_eq(c.seed, 16);
    cr_assert_eq(c.threads, 15);
    cr_assert_eq(c.interop_threads, 2);
    cr_assert_eq(c.deterministic, true);
    cr_assert_eq(c.optim.lr, 1e-3);
    cr_assert_eq(c.optim.eps, 1e-8);
    cr_assert_eq(c.optim.weight_decay, 3.0);
    cr_assert_eq(c.optim.momentum, 0.5);
    cr_assert_eq(c.optim.grad_clip_norm, 2.0);
    cr_assert_eq(c.optim.beta2, 0.999);
    cr_assert_eq(c.optim.amsgrad, true);
    cr_assert_eq(c.schedule.min_lr, 1.5e-4);
    cr_assert_eq(c.schedule.gamma, 1.0);
    cr_assert_eq(c.train.drop_last, false);
    cr_assert_eq(c.train.max_steps, 1000000000000LL); /* the largest allowed */
    cr_assert_eq(c.data.n_mean, 3);
    cr_assert_eq(c.data.mean[0], 0.5);
    cr_assert_eq(c.data.mean[1], -1.0);
    cr_assert_eq(c.data.mean[2], 2.0);
    cr_assert_eq(c.data.mean[3], 0.0);
    cr_assert_eq(c.data.n_std, 1);
    cr_assert_eq(c.data.std[0], 0.25);
}

Test(config, strings_enums_and_nulls)
{
    tr_config c;
    tr_error err;
    int rc = load(&c,
                  "seed: 18446744073709551615\n"
                  "optim: {name: sgd, momentum: 0.9, nesterov: true}\n"
                  "schedule:\n  name: \"cosine\"\n"
                  "log:\n  progress: never\n"
                  "run:\n  dir: 'out dir'\n  name: ~\n"
                  "model:\n  spec: 123\n"
                  "data:\n  root: \"tab\\there \\\"q\\\"\"\n",
                  &err);
    cr_assert_eq(rc, TR_OK, "%s", err.msg);
    cr_assert_eq(c.seed, UINT64_MAX);
    cr_assert_eq(c.optim.name, TR_OPTIM_SGD);
    cr_assert_eq(c.optim.momentum, 0.9);
    cr_assert_eq(c.optim.nesterov, true);
    cr_assert_eq(c.schedule.name, TR_SCHED_COSINE);
    cr_assert_eq(c.log.progress, TR_PROGRESS_NEVER);
    cr_assert_str_eq(c.run.dir, "out dir");
    cr_assert_str_eq(c.run.name, "");
    cr_assert_str_eq(c.model.spec, "123");
    cr_assert_str_eq(c.data.root, "tab\there \"q\"");
    cr_assert_str_eq(c.source, "");
}

Test(config, errors_unknown_key)
{
    expect_error("seed: 1\noptim:\n  lr: 0.1\n  lrr: 0.2\n",
                 "x.yaml:4:3: optim.lrr: unknown key; did you mean 'optim.lr'?");
    /* a key of another section is suggested by its full path */
    expect_error("lr: 0.1\n", "x.yaml:1:1: lr: unknown key; did you mean 'optim.lr'?");
    expect_error("train:\n  epochz: 3\n", "x.yaml:2:3: train.epochz: unknown key; did you mean 'train.epochs'?");
    expect_error("optim:\n  foo: 1\n",
                 "x.yaml:2:3: optim.foo: unknown key; valid keys are name, lr, momentum, dampening, nesterov, "
                 "weight_decay, beta1, beta2, eps, amsgrad, no_decay, grad_clip_norm");
    expect_error("sed: 1\n", "x.yaml:1:1: sed: unknown key; did you mean 'seed'?");
    expect_error("seed: 1\noptim.lr: 0.1\n",
                 "x.yaml:2:1: optim.lr: dotted keys are not allowed in a file; nest the key under its section");
}

Test(config, errors_duplicate_key)
{
    expect_error("optim:\n  name: sgd\n\n  lr: 0.1\n  momentum: 0.9\n\n  # again\n  lr: 0.2\n",
                 "x.yaml:8:3: optim.lr: duplicate key (first set at line 4)");
    expect_error("seed: 1\nthreads: 1\nseed: 2\n", "x.yaml:3:1: seed: duplicate key (first set at line 1)");
}

Test(config, errors_wrong_type)
{
    expect_error("optim:\n  lr: abc\n", "x.yaml:2:7: optim.lr: expected a float, got 'abc'");
    expect_error("optim:\n  lr: \"1e-3\"\n",
                 "x.yaml:2:7: optim.lr: expected a float, got \"1e-3\" (quoted, so a string)");
    expect_error("optim:\n  lr:\n", "x.yaml:2:6: optim.lr: expected a float, got null");
    expect_error("optim:\n  lr: [1]\n", "x.yaml:2:7: optim.lr: expected a float, got a sequence");
    expect_error("train:\n  epochs: 2.5\n", "x.yaml:2:11: train.epochs: expected an integer, got '2.5'");
    expect_error("train:\n  epochs: 1e3\n", "x.yaml:2:11: train.epochs: expected an integer, got '1e3'");
    expect_error("deterministic: yes\n", "x.yaml:1:16: deterministic: expected a boolean (true/false), got 'yes'");
    expect_error("data:\n  shuffle: off\n", "x.yaml:2:12: data.shuffle: expected a boolean (true/false), got 'off'");
    expect_error("data:\n  shuffle: 1\n", "x.yaml:2:12: data.shuffle: expected a boolean (true/false), got '1'");
    expect_error("run:\n  name: {a: 1}\n", "x.yaml:2:9: run.name: expected a string, got a mapping");
    expect_error("optim: adam\n",
                 "x.yaml:1:8: optim: expected a mapping (a section of keys such as optim.KEY: VALUE), got 'adam'");
    expect_error("- seed\n", "x.yaml:1:1: expected a mapping of keys at the top level, got a sequence");
    expect_error("data:\n  mean: [0.1, x]\n", "x.yaml:2:15: data.mean[1]: expected a float, got 'x'");
    expect_error("data:\n  mean: [1, 2, 3, 4, 5]\n",
                 "x.yaml:2:9: data.mean: expected a list of 1 to 4 floats, got 5 entries");
    expect_error("seed: !!int 3\n",
                 "x.yaml:1:7: seed: explicit YAML tags are not supported (got 'tag:yaml.org,2002:int')");
}

Test(config, errors_out_of_range)
{
    expect_error("optim:\n  lr: -1\n", "x.yaml:2:7: optim.lr: -1 is out of range (must be > 0)");
    expect_error("optim:\n  lr: 0\n", "x.yaml:2:7: optim.lr: 0 is out of range (must be > 0)");
    expect_error("optim:\n  momentum: 1.0\n", "x.yaml:2:13: optim.momentum: 1.0 is out of range (must be in [0, 1))");
    expect_error("schedule:\n  gamma: 0\n", "x.yaml:2:10: schedule.gamma: 0 is out of range (must be in (0, 1])");
    expect_error("threads: 1025\n", "x.yaml:1:10: threads: 1025 is out of range (must be in [0, 1024])");
    expect_error("seed: -1\n", "x.yaml:1:7: seed: -1 is out of range (must be >= 0)");
    expect_error("train:\n  batch_size: 0\n", "x.yaml:2:15: train.batch_size: 0 is out of range (must be >= 1)");
    expect_error("data:\n  std: [0.3, 0]\n", "x.yaml:2:14: data.std[1]: 0 is out of range (must be > 0)");
    expect_error("optim:\n  lr: .inf\n", "x.yaml:2:7: optim.lr: .inf is out of range (must be > 0 and finite)");
    expect_error("data:\n  mean: .nan\n", "x.yaml:2:9: data.mean: .nan is out of range (must be finite)");
    expect_error("seed: 18446744073709551616\n",
                 "x.yaml:1:7: seed: 18446744073709551616 does not fit in a 64-bit unsigned integer");
    expect_error("train:\n  epochs: 9223372036854775808\n",
                 "x.yaml:2:11: train.epochs: 9223372036854775808 does not fit in a 64-bit integer");
}

Test(config, errors_enum)
{
    expect_error("optim:\n  name: sgdd\n",
                 "x.yaml:2:9: optim.name: 'sgdd' is not one of sgd, adam, adamw; did you mean 'sgd'?");
    expect_error("optim:\n  name: rmsprop\n", "x.yaml:2:9: optim.name: 'rmsprop' is not one of sgd, adam, adamw");
    expect_error("log:\n  progress:\n", "x.yaml:2:12: log.progress: expected one of auto, always, never, got null");
}

Test(config, device_values)
{
    tr_config c;
    tr_error err;
    cr_assert_eq(load(&c, "seed: 1\n", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.device, "cpu", "the default device is the CPU");
    static const char *const good[] = {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:1023", "'cuda:1'"};
    static const char *const want[] = {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:1023", "cuda:1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char yaml[64];
        snprintf(yaml, sizeof yaml, "device: %s\n", good[i]);
        cr_assert_eq(load(&c, yaml, &err), TR_OK, "%s: %s", good[i], err.msg);
        cr_assert_str_eq(c.device, want[i]);
    }
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_override(&c, "device=cuda:2", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.device, "cuda:2");
}

Test(config, errors_device)
{
    expect_error("device: cuda:abc\n",
                 "x.yaml:1:9: device: 'abc' is not a device index: expected cuda:N with N a number from 0 to 1023");
    expect_error("seed: 3\ndevice: 'cuda:'\n",
                 "x.yaml:2:9: device: '' is not a device index: expected cuda:N with N a number from 0 to 1023");
    expect_error("device: cuda:-1\n",
                 "x.yaml:1:9: device: '-1' is not a device index: expected cuda:N with N a number from 0 to 1023");
    expect_error("device: cuda:1024\n",
                 "x.yaml:1:9: device: '1024' is not a device index: expected cuda:N with N a number from 0 to 1023");
    expect_error("device: 'cuda: 1'\n",
                 "x.yaml:1:9: device: ' 1' is not a device index: expected cuda:N with N a number from 0 to 1023");
    expect_error("device: gpu\n", "x.yaml:1:9: device: unknown device 'gpu': expected cpu, cuda or cuda:N (N = 0, 1, ...)");
    expect_error("device: CUDA\n",
                 "x.yaml:1:9: device: unknown device 'CUDA': expected cpu, cuda or cuda:N (N = 0, 1, ...)");
    expect_error("device:\n", "x.yaml:1:8: device: unknown device '': expected cpu, cuda or cuda:N (N = 0, 1, ...)");
    expect_error("device: [cuda]\n", "x.yaml:1:9: device: expected a string, got a sequence");
    expect_override_error("device=cuda:x", "override 'device=cuda:x': device: 'x' is not a device index: expected "
                                           "cuda:N with N a number from 0 to 1023");
    /* a config struct filled by hand (the embedding API's path) is checked by validate, naming the key */
    tr_config c;
    tr_error err = {0};
    tr_config_defaults(&c);
    strcpy(c.model.spec, "mlp.yaml");
    strcpy(c.device, "cuda:1x");
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "device: '1x' is not a device index: expected cuda:N with N a number from 0 to 1023");
}

Test(config, errors_syntax)
{
    expect_error("optim:\n  lr: 0.1\n bad: 1\n",
                 "x.yaml:3:2: YAML syntax error: did not find expected key (while parsing a block mapping at line 1)");
    expect_error("optim: {lr: 1\n",
                 "x.yaml:2:1: YAML syntax error: did not find expected ',' or '}' "
                 "(while parsing a flow mapping at line 1)");
    expect_error("seed: 1\n---\nseed: 2\n", "x.yaml:3:1: only one YAML document is allowed");
    expect_error("seed: *nope\n", "x.yaml:1:7: YAML syntax error: found undefined alias");
}

Test(config, error_leaves_config_unchanged)
{
    tr_config c, before;
    tr_error err = {0};
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_string(&c, "seed: 7\n", "a.yaml", &err), TR_OK);
    memcpy(&before, &c, sizeof c);
    cr_assert_eq(tr_config_load_string(&c, "seed: 9\noptim:\n  lr: 0.5\n  bogus: 1\n", "b.yaml", &err), TR_E_CONFIG);
    cr_assert_eq(memcmp(&c, &before, sizeof c), 0);
    cr_assert_eq(c.seed, 7);
}

Test(config, load_file_sets_source_and_resolves_paths)
{
    char path[64];
    write_temp("model:\n  spec: ../models/mlp.yaml\noptim:\n  lr: 0.05\n", path);
    tr_config c;
    tr_error err = {0};
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_file(&c, path, &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.source, path);
    cr_assert_eq(c.optim.lr, 0.05);
    char out[TR_PATH_MAX];
    tr_config_resolve_path(&c, c.model.spec, out);
    cr_assert_str_eq(out, "/tmp/../models/mlp.yaml");
    tr_config_resolve_path(&c, "/abs/x", out);
    cr_assert_str_eq(out, "/abs/x");
    unlink(path);

    /* errors name the file */
    write_temp("optim:\n  lr: nope\n", path);
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_file(&c, path, &err), TR_E_CONFIG);
    char want[256];
    snprintf(want, sizeof want, "%s:2:7: optim.lr: expected a float, got 'nope'", path);
    cr_assert_str_eq(err.msg, want);
    unlink(path);

    cr_assert_eq(tr_config_load_file(&c, "/nonexistent/trainrun.yaml", &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "/nonexistent/trainrun.yaml: cannot open: No such file or directory");
}

Test(config, resolve_path)
{
    tr_config c;
    char out[TR_PATH_MAX];
    tr_config_defaults(&c);
    tr_config_resolve_path(&c, "models/mlp.yaml", out); /* from a string: unchanged */
    cr_assert_str_eq(out, "models/mlp.yaml");
    strcpy(c.source, "configs/fmnist.yaml");
    tr_config_resolve_path(&c, "../models/mlp.yaml", out);
    cr_assert_str_eq(out, "configs/../models/mlp.yaml");
    tr_config_resolve_path(&c, "/usr/share/x", out);
    cr_assert_str_eq(out, "/usr/share/x");
    strcpy(c.source, "fmnist.yaml");
    tr_config_resolve_path(&c, "m.yaml", out);
    cr_assert_str_eq(out, "m.yaml");
    strcpy(c.source, "/c.yaml");
    tr_config_resolve_path(&c, "m.yaml", out);
    cr_assert_str_eq(out, "/m.yaml");
}

Test(config, overrides_good)
{
    tr_config c;
    tr_error err = {0};
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_override(&c, "optim.lr=0.05", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.optim.lr, 0.05);
    cr_assert_eq(tr_config_override(&c, "optim.eps=1e-08", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.optim.eps, 1e-8);
    cr_assert_eq(tr_config_override(&c, "optim.name=sgd", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.optim.name, TR_OPTIM_SGD);
    cr_assert_eq(tr_config_override(&c, "data.mean=[0.5, 0.4, 0.3]", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.data.n_mean, 3);
    cr_assert_eq(c.data.mean[2], 0.3);
    cr_assert_eq(tr_config_override(&c, "data.std=0.5", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.data.n_std, 1);
    cr_assert_eq(c.data.std[0], 0.5);
    cr_assert_eq(tr_config_override(&c, "run.name=foo bar", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.run.name, "foo bar");
    cr_assert_eq(tr_config_override(&c, "run.name=", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.run.name, "");
    cr_assert_eq(tr_config_override(&c, " deterministic = true", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.deterministic, true);
    cr_assert_eq(tr_config_override(&c, "train.epochs=3", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(c.train.epochs, 3);
    cr_assert_eq(tr_config_override(&c, "model.spec=a=b.yaml", &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(c.model.spec, "a=b.yaml");
}

Test(config, overrides_bad)
{
    expect_override_error("optim.lr=abc", "override 'optim.lr=abc': optim.lr: expected a float, got 'abc'");
    expect_override_error("optim.lr=-1", "override 'optim.lr=-1': optim.lr: -1 is out of range (must be > 0)");
    expect_override_error("optim.lrr=1", "override 'optim.lrr=1': optim.lrr: unknown key; did you mean 'optim.lr'?");
    expect_override_error("optm.lr=1", "override 'optm.lr=1': optm.lr: unknown key; did you mean 'optim.lr'?");
    expect_override_error("optim.lr", "override 'optim.lr': expected KEY=VALUE (e.g. optim.lr=0.01)");
    expect_override_error("=1", "override '=1': empty key (expected KEY=VALUE)");
    expect_override_error("optim.lr=", "override 'optim.lr=': optim.lr: expected a float, got null");
    expect_override_error("deterministic=yes",
                          "override 'deterministic=yes': deterministic: expected a boolean (true/false), got 'yes'");
    expect_override_error("optim.name=sgdd",
                          "override 'optim.name=sgdd': optim.name: 'sgdd' is not one of sgd, adam, adamw; "
                          "did you mean 'sgd'?");
    expect_override_error("schedule=cosine",
                          "override 'schedule=cosine': schedule: is a section; override one of its keys (name, "
                          "warmup_steps, step_size, gamma, min_lr, interval, milestones, monitor, mode, factor, patience, "
                          "threshold, threshold_mode, cooldown)");
    expect_override_error("data.mean=[0.5",
                          "override 'data.mean=[0.5': data.mean: YAML syntax error: did not find expected ',' or ']' "
                          "(while parsing a flow sequence at line 1)");

    /* a failed override changes nothing */
    tr_config c, before;
    tr_error err;
    tr_config_defaults(&c);
    memcpy(&before, &c, sizeof c);
    cr_assert_eq(tr_config_override(&c, "data.std=[0.5, -1]", &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "override 'data.std=[0.5, -1]': data.std[1]: -1 is out of range (must be > 0)");
    cr_assert_eq(memcmp(&c, &before, sizeof c), 0);
}

/* Defaults plus the one key that has none. */
static void defaults_with_model(tr_config *c)
{
    tr_config_defaults(c);
    strcpy(c->model.spec, "mlp.yaml");
}

Test(config, validate_cross_keys)
{
    tr_config c;
    tr_error err = {0};

    defaults_with_model(&c);
    c.optim.name = TR_OPTIM_SGD;
    c.optim.nesterov = true;
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "optim.nesterov: true requires optim.momentum > 0 and optim.dampening = 0 "
                              "(got momentum 0.0, dampening 0.0)");
    c.optim.momentum = 0.9;
    c.optim.dampening = 0.1;
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    c.optim.dampening = 0;
    cr_assert_eq(tr_config_validate(&c, &err), TR_OK, "%s", err.msg);

    defaults_with_model(&c);
    c.data.n_std = 3;
    c.data.std[1] = c.data.std[2] = 0.5;
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "data.mean and data.std must have the same number of entries (got 1 and 3)");

    defaults_with_model(&c);
    c.data.n_mean = c.data.n_std = 0;
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "data.mean: has 0 entries (must have 1 to 4)");

    defaults_with_model(&c);
    c.optim.lr = -0.5; /* set by code, not YAML: the schema ranges still apply */
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "optim.lr: -0.5 is out of range (must be > 0)");

    defaults_with_model(&c);
    c.schedule.name = TR_SCHED_COSINE;
    c.schedule.min_lr = 0.01;
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "schedule.min_lr: 0.01 is larger than optim.lr (0.001); a cosine schedule decays to it");

    defaults_with_model(&c);
    strcpy(c.run.name, "a/b");
    cr_assert_eq(tr_config_validate(&c, &err), TR_E_CONFIG);
    cr_assert_str_eq(err.msg, "run.name: 'a/b' must be a plain directory name (no '/')");
}

/* Render the config as YAML into a malloc'd string. */
static char *to_yaml(const tr_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cr_assert_eq(tr_config_write_yaml(c, f), TR_OK);
    fclose(f);
    return buf;
}

Test(config, write_yaml_round_trip)
{
    tr_config c;
    tr_config_defaults(&c);
    c.seed = UINT64_MAX;
    c.threads = 3;
    c.deterministic = true;
    c.optim.name = TR_OPTIM_SGD;
    c.optim.lr = 0.1 + 0.2; /* 0.30000000000000004 */
    c.optim.eps = 1e-300;
    c.optim.momentum = 1.0 / 3.0;
    c.optim.weight_decay = 5.0;
    c.schedule.name = TR_SCHED_STEP;
    c.schedule.gamma = 0.5;
    c.train.max_steps = 1000000000000LL;
    c.data.n_mean = c.data.n_std = 3;
    c.data.mean[1] = -0.125;
    c.data.mean[2] = 1e22;
    c.data.std[1] = 2.5e-7;
    c.data.std[2] = 1.0;
    c.log.progress = TR_PROGRESS_ALWAYS;
    strcpy(c.run.name, "quote \" back\\slash\ttab\nnewline é");
    strcpy(c.model.spec, "models/mlp.yaml");

    char *text = to_yaml(&c);
    cr_assert_not_null(strstr(text, "\noptim:\n  name: sgd\n  lr: 0.30000000000000004\n"), "%s", text);
    cr_assert_not_null(strstr(text, "  weight_decay: 5.0\n"), "%s", text);
    cr_assert_not_null(strstr(text, "  eps: 1.0e-300\n"), "%s", text);
    cr_assert_not_null(strstr(text, "  std: [0.353, 2.5e-07, 1.0]\n"), "%s", text);
    cr_assert_not_null(strstr(text, "seed: 18446744073709551615\n"), "%s", text);

    tr_config back;
    tr_error err = {0};
    tr_config_defaults(&back);
    cr_assert_eq(tr_config_load_string(&back, text, "written.yaml", &err), TR_OK, "%s\n%s", err.msg, text);
    cr_assert_str_eq(back.run.name, c.run.name);
    cr_assert_eq(back.optim.lr, c.optim.lr);
    cr_assert_eq(memcmp(&back, &c, sizeof c), 0, "round trip differs:\n%s", text);
    free(text);

    /* the defaults round-trip too, and every key is written */
    tr_config_defaults(&c);
    text = to_yaml(&c);
    tr_config_defaults(&back);
    back.seed = 99;
    cr_assert_eq(tr_config_load_string(&back, text, "written.yaml", &err), TR_OK, "%s", err.msg);
    cr_assert_eq(memcmp(&back, &c, sizeof c), 0);
    cr_assert_not_null(strstr(text, "  lr: 0.001\n"));
    cr_assert_not_null(strstr(text, "  eps: 1.0e-08\n"));
    cr_assert_not_null(strstr(text, "  momentum: 0.0\n"));
    cr_assert_not_null(strstr(text, "\nrun:\n  dir: \"runs\"\n  name: \"\"\n"));
    free(text);
}

/* The keys of a reference table's rows ("| `key` | ..."), in order, into keys[max]. Returns how many. */
static int reference_keys(const char *table, char keys[][64], int max)
{
    int n = 0;
    for (const char *p = table; (p = strstr(p, "\n| `")) != NULL && n < max; p++) {
        const char *k = p + 4, *end = strchr(k, '`');
        if (!end || end - k >= 64) continue;
        memcpy(keys[n], k, (size_t)(end - k));
        keys[n++][end - k] = '\0';
    }
    return n;
}

Test(config, write_reference)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_config_write_reference(f);
    fclose(f);
    cr_assert(strncmp(buf, "| key | type | default | range | meaning |\n|-----|", 50) == 0, "%s", buf);
    cr_assert_not_null(strstr(buf, "| `optim.lr` | float | `0.001` | > 0 | base learning rate |\n"), "%s", buf);
    cr_assert_not_null(strstr(buf, "| `optim.name` | enum: `sgd`, `adam`, `adamw` | `adamw` |  | optimizer |\n"));
    cr_assert_not_null(strstr(buf, "| `optim.momentum` | float | `0.0` | [0, 1) | SGD momentum |\n"));
    cr_assert_not_null(strstr(buf, "| `data.std` | float list | `[0.353]` | 1 to 4 entries, each > 0 |"));
    /* after the header and separator, every line is the row of one key, no key twice, and every row's default
     * (the third column), given as an override, is accepted for its key and leaves the defaults as they are: each
     * row names a schema key with its real default (no count of keys to keep in step with the schema) */
    static char keys[512][64];
    const int n = reference_keys(buf, keys, 512);
    size_t lines = 0;
    for (const char *p = buf; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, (size_t)n + 2, "%zu lines for %d key rows", lines, n);
    cr_assert_gt(n, 0);
    tr_config defaults, c;
    tr_config_defaults(&defaults);
    tr_config_defaults(&c);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) cr_assert_str_neq(keys[i], keys[j], "key %s has two rows", keys[i]);
        char row[80], kv[600];
        snprintf(row, sizeof row, "| `%.63s` | ", keys[i]);
        const char *def = strstr(strstr(buf, row) + strlen(row), " | `");
        cr_assert_not_null(def, "%s: no default", keys[i]);
        def += 4;
        const int dlen = (int)(strchr(def, '`') - def);
        snprintf(kv, sizeof kv, "%.63s=%.*s", keys[i], dlen, def);
        tr_error err = {0};
        cr_assert_eq(tr_config_override(&c, kv, &err), TR_OK, "%s: %s", kv, err.msg);
    }
    char diff[1024];
    cr_expect_eq(tr_config_diff(&defaults, &c, NULL, diff, sizeof diff), 0, "defaults in the table differ: %s", diff);
    cr_assert_not_null(strstr(buf, "| `device` | string | `\"cpu\"` |  | where the model, optimizer state and EMA live:"));
    /* the order is the schema order (seed first, run.name last) */
    cr_assert(strstr(buf, "| `seed` |") < strstr(buf, "| `run.name` |"));
    free(buf);
}

/* Adding a key means documenting it: docs/config.md's config reference (between its config-reference markers) has a row
 * for every key of the schema, and none for a key the schema lacks. */
Test(config, readme_documents_every_schema_key_and_no_other)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/config.md", TR_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char readme[1 << 20];
    const size_t len = fread(readme, 1, sizeof readme - 1, f);
    fclose(f);
    readme[len] = '\0';
    char *begin = strstr(readme, "<!-- config-reference:begin");
    char *end = begin ? strstr(begin, "<!-- config-reference:end") : NULL;
    cr_assert(begin && end, "%s: no <!-- config-reference:begin / end --> markers", path);
    *end = '\0';

    char *buf = NULL;
    size_t blen = 0;
    FILE *m = open_memstream(&buf, &blen);
    tr_config_write_reference(m);
    fclose(m);
    static char schema[512][64], doc[512][64];
    const int ns = reference_keys(buf, schema, 512), nd = reference_keys(begin, doc, 512);
    free(buf);
    cr_assert_gt(ns, 0);
    int missing = 0, extra = 0;
    for (int i = 0; i < ns; i++) {
        int found = 0;
        for (int j = 0; j < nd && !found; j++) found = strcmp(schema[i], doc[j]) == 0;
        if (!found) {
            cr_log_error("docs/config.md documents no `%s` (scripts/config-reference.sh rewrites the table)",
                         schema[i]);
            missing++;
        }
    }
    for (int j = 0; j < nd; j++) {
        int found = 0;
        for (int i = 0; i < ns && !found; i++) found = strcmp(schema[i], doc[j]) == 0;
        if (!found) {
            cr_log_error("docs/config.md documents `%s`, which is no config key", doc[j]);
            extra++;
        }
    }
    cr_expect_eq(missing, 0, "%d schema keys undocumented in %s", missing, path);
    cr_expect_eq(extra, 0, "%d documented keys not in the schema", extra);
}

static int skip_log(const char *key) { return strncmp(key, "log.", 4) == 0; }

/* Issue 18: differences are named key by key (the checkpoint warning, verify, an updated config.yaml), and the
 * overrides between two configs turn one into the other. */
Test(config, diff_names_each_differing_key_and_overrides_reproduce_the_config)
{
    tr_config a, b;
    tr_error err = {0};
    tr_config_defaults(&a);
    tr_config_defaults(&b);
    char text[512];
    cr_expect_eq(tr_config_diff(&a, &b, NULL, text, sizeof text), 0);
    cr_expect_str_eq(text, "");
    const char *const kv[] = {"train.max_steps=4100", "optim.lr=1.5e-4", "data.mean=[0.5]", "optim.no_decay=auto",
                              "log.progress=never"};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        cr_assert_eq(tr_config_override(&b, kv[i], &err), TR_OK, "%s", err.msg);
    cr_expect_eq(tr_config_diff(&a, &b, NULL, text, sizeof text), 5);
    cr_expect_str_eq(text, "data.mean [0.286] -> [0.5], optim.lr 0.001 -> 0.00015, optim.no_decay \"\" -> \"auto\", "
                           "train.max_steps 0 -> 4100, log.progress auto -> never");
    /* a key left out by the caller is not counted */
    cr_expect_eq(tr_config_diff(&a, &b, skip_log, text, sizeof text), 4);
    /* a short buffer is cut with "..." but every difference is counted */
    char small[24];
    cr_expect_eq(tr_config_diff(&a, &b, NULL, small, sizeof small), 5);
    cr_expect(strstr(small, "...") != NULL, "'%s'", small);

    char **ov = NULL;
    const int n = tr_config_overrides_between(&a, &b, skip_log, &ov);
    cr_assert_eq(n, 4);
    tr_config c;
    tr_config_defaults(&c);
    c.log = b.log; /* left out of the overrides */
    for (int i = 0; i < n; i++) cr_assert_eq(tr_config_override(&c, ov[i], &err), TR_OK, "%s: %s", ov[i], err.msg);
    cr_expect_null(ov[n]);
    cr_expect_eq(tr_config_diff(&b, &c, NULL, text, sizeof text), 0, "the overrides did not reproduce it: %s", text);
    tr_config_overrides_free(ov);
}

/* A tab where YAML wants indentation is named as a tab, with its line and column (libyaml's own words, "found
 * character that cannot start any token", do not say what the character is). */
Test(config, a_tab_is_reported_as_a_tab_with_its_column)
{
    tr_config c;
    tr_error err = {0};
    tr_config_defaults(&c);
    cr_assert_eq(tr_config_load_string(&c, "optim:\n  lr: 0.1\n\tmomentum: 0.9\n", "t.yaml", &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "t.yaml:3:1: ") != NULL, "%s", err.msg);
    cr_expect(strstr(err.msg, "a tab character; YAML indents with spaces only") != NULL, "%s", err.msg);
    cr_expect_null(strstr(err.msg, "cannot start any token"), "%s", err.msg);
}
