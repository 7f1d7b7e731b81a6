/*
 * checkpoint.c -- what saving and loading a checkpoint share (checkpoint_internal.h): the files every checkpoint
 * holds, warnings, the bounded reader of its JSON, dtype codes, the model's device. The protocol (checkpoint.h):
 * checkpoint_save.c writes, checkpoint_list.c lists, prunes and sets aside, checkpoint_load.c verifies and loads.
 */
#include "checkpoint_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tr_ckpt_files[TR_CKPT_N_FILES] = {"model.safetensors", "optimizer.safetensors", "rng.safetensors",
                                                    "trainer.json"};

void tr_ckpt_warnf(tr_ckpt_warn_fn warn, void *ctx, const char *fmt, ...)
{
    if (!warn) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    warn(ctx, msg);
}

void tr_ckpt_json_add_threads(cJSON *o)
{
    int intra = 0, inter = 0, blas = 0;
    trs_get_threads(&intra, &inter, &blas);
    cJSON *th = cJSON_AddObjectToObject(o, "threads");
    cJSON_AddNumberToObject(th, "intra_op", intra);
    cJSON_AddNumberToObject(th, "inter_op", inter);
    cJSON_AddNumberToObject(th, "blas", blas);
}

char *tr_ckpt_read_text(const char *path, tr_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tr_error_set(err, TR_E_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n > (64L << 20)) { /* a manifest, trainer.json or model spec: kilobytes; refuse before allocating */
        fclose(f);
        tr_error_set(err, TR_E_RUNTIME, "%s: %ld bytes, more than the 64 MiB a checkpoint's JSON may have", path, n);
        return NULL;
    }
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        tr_error_set(err, TR_E_RUNTIME, "%s: cannot read", path);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

tr_st_dtype tr_ckpt_st_dtype(trs_dtype d)
{
    switch (d) {
    case TRS_DTYPE_FLOAT32: return TR_ST_F32;
    case TRS_DTYPE_INT64: return TR_ST_I64;
    case TRS_DTYPE_UINT8: return TR_ST_U8;
    default: return TR_ST_DTYPE_COUNT_;
    }
}

int tr_ckpt_cuda_generators(trs_model *model)
{
    trs_device_type type = TRS_DEVICE_CPU;
    int count = 0;
    if (!model || trs_model_device(model, &type, NULL) != TRS_OK || type != TRS_DEVICE_CUDA) return 0;
    if (trs_cuda_device_count(&count) != TRS_OK) return 0;
    return count;
}

void tr_ckpt_device_name(trs_model *model, char *buf, size_t n)
{
    trs_device_type type = TRS_DEVICE_CPU;
    int index = -1;
    if (model) trs_model_device(model, &type, &index);
    if (type == TRS_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", index);
    else snprintf(buf, n, "cpu");
}
