/*
 * export.c -- `trainrun export` (see export.h): the run's TorchScript module with a checkpoint's weights, written
 * back as an archive.
 */
#include "export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "predict.h"
#include "run.h"
#include "model_core.h"
#include "trainrun_shim_export.h"

static int usage_error(const char *msg)
{
    fprintf(stderr,
            "trainrun export: %s\nusage: trainrun export RUN_DIR_OR_CHECKPOINT [-o MODEL.pt] [--weights live|ema] "
            "[key=value ...]\n",
            msg);
    return TR_E_CONFIG;
}

static void warn_line(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "trainrun export: warning: %s\n", msg);
}

/* The per-sample input shape the model was trained on: model.input_shape, else the run's training data's, as
 * training takes it ([D] for flat features, [C, H, W] for images). */
static int input_shape_of(tr_config *cfg, int64_t *shape, int *ndim, tr_error *err)
{
    if (cfg->model.n_input_shape > 0) {
        *ndim = cfg->model.n_input_shape;
        for (int i = 0; i < *ndim; i++) shape[i] = (int64_t)cfg->model.input_shape[i];
        return TR_OK;
    }
    tr_dataset train = {0}, val = {0}, test = {0};
    cfg->eval.test_at_end = false;
    cfg->eval.split = TR_EVAL_VAL;
    cfg->data.val_size = 0;
    const int rc = tr_load_data(cfg, &train, &val, &test, err);
    if (!rc) {
        *ndim = train.h == 1 && train.w == 1 ? 1 : 3;
        shape[0] = train.c;
        shape[1] = train.h;
        shape[2] = train.w;
    }
    tr_dataset_free(&train);
    tr_dataset_free(&val);
    tr_dataset_free(&test);
    return rc;
}

int tr_cli_export(int argc, char **argv)
{
    const char *path = NULL, *out_arg = NULL, *weights = "live";
    char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
    if (!overrides) return TR_E_RUNTIME;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: trainrun export RUN_DIR_OR_CHECKPOINT [-o MODEL.pt] [--weights live|ema] [key=value ...]\n"
                   "Writes a TorchScript run's module with the checkpoint's trained weights (live, or the EMA's) as\n"
                   "an archive torch.jit.load opens (default RUN_DIR/export.pt).\n");
            free(overrides);
            return TR_OK;
        }
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--weights") == 0) && i + 1 >= argc) {
            free(overrides);
            return usage_error(argv[i][1] == 'o' ? "-o needs a file name" : "--weights needs live or ema");
        }
        if (strcmp(argv[i], "-o") == 0) out_arg = argv[++i];
        else if (strcmp(argv[i], "--weights") == 0) weights = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "trainrun export: unknown option '%s'\n", argv[i]);
            free(overrides);
            return TR_E_CONFIG;
        } else if (!path) path = argv[i];
        else overrides[n++] = argv[i];
    }
    if (!path) {
        free(overrides);
        return usage_error("no run directory or checkpoint given");
    }
    if (strcmp(weights, "live") != 0 && strcmp(weights, "ema") != 0) {
        free(overrides);
        return usage_error("--weights: live or ema");
    }
    const int ema = strcmp(weights, "ema") == 0;

    tr_error err = {0};
    char run_dir[TR_PATH_MAX], ckpt[TR_PATH_MAX], config[TR_PATH_MAX + 16], model_path[TR_PATH_MAX];
    char out_path[TR_PATH_MAX + 16], tmp[TR_PATH_MAX + 32], ema_file[TR_PATH_MAX + 32];
    tr_config *cfg = calloc(1, sizeof *cfg);
    tr_core core;
    memset(&core, 0, sizeof core);
    int rc = cfg ? tr_resolve_run_config(path, run_dir, ckpt, config, sizeof config, &err)
                 : tr_error_set(&err, TR_E_RUNTIME, "out of memory");
    if (!rc) rc = tr_config_load_cli(cfg, config, overrides, n, &err);
    if (!rc && !cfg->model.torchscript[0])
        rc = tr_error_set(&err, TR_E_CONFIG,
                          "%s: a model YAML run has no TorchScript code to write; its weights are "
                          "%s/model.safetensors (the state_dict of the nn.Sequential the YAML describes, PyTorch's "
                          "names): docs/torchscript.md, \"Back to PyTorch\", loads them in plain PyTorch",
                          run_dir, ckpt);
    snprintf(ema_file, sizeof ema_file, "%s/ema.safetensors", ckpt);
    if (!rc && ema && access(ema_file, R_OK) != 0)
        rc = tr_error_set(&err, TR_E_CONFIG, "--weights ema: %s has no EMA weights (ema.enabled was off)", ckpt);
    int64_t shape[TR_MAX_CHANNELS] = {0};
    int ndim = 0;
    if (!rc) rc = input_shape_of(cfg, shape, &ndim, &err);
    if (!rc) {
        tr_config_resolve_path(cfg, cfg->model.torchscript, model_path);
        snprintf(cfg->device, sizeof cfg->device, "cpu"); /* exported from the CPU: loads on any machine */
        rc = tr_device_resolve(cfg->device, &core.device, &err);
    }
    if (!rc) rc = tr_core_open(&core, cfg, NULL, model_path, shape, ndim, TR_E_RUNTIME, &err);
    if (!rc) {
        if (out_arg) snprintf(out_path, sizeof out_path, "%s", out_arg);
        else snprintf(out_path, sizeof out_path, "%s/export.pt", run_dir);
        snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out_path, (long)getpid());
        if (tr_core_enter(&core)) {
            rc = tr_error_set(&err, TR_E_RUNTIME, "restoring the generator: %s", trs_last_error());
        } else {
            rc = tr_checkpoint_load_weights(ckpt, core.model, true, warn_line, NULL, &err);
            if (!rc && ema) rc = tr_checkpoint_load_weights(ema_file, core.model, false, warn_line, NULL, &err);
            if (!rc && trs_model_save_torchscript(core.model, tmp) != TRS_OK)
                rc = tr_error_set(&err, TR_E_RUNTIME, "%s: %s", tmp, trs_last_error());
            tr_core_leave(&core);
        }
        if (!rc && rename(tmp, out_path) != 0)
            rc = tr_error_set(&err, TR_E_RUNTIME, "%s: cannot rename to %s: %s", tmp, out_path, strerror(errno));
        if (rc) unlink(tmp);
    }
    if (!rc)
        printf("%s -> %s (%s weights of %s; torch.jit.load(\"%s\") in PyTorch)\n", run_dir, out_path, weights, ckpt,
               out_path);
    else fprintf(stderr, "trainrun export: %s\n", err.msg);
    tr_core_close(&core);
    free(cfg);
    free(overrides);
    return rc;
}
