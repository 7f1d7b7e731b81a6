/*
 * checkpoint.c -- what saving and loading a checkpoint share (checkpoint_internal.h): the files every checkpoint
 * holds, warnings, the bounded reader of its JSON, dtype codes, the model's device. The protocol (checkpoint.h):
 * checkpoint_save.c writes, checkpoint_list.c lists, prunes and sets aside, checkpoint_load.c verifies and loads.
 */
#include "checkpoint_internal.h"
#include "io.h"

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
    unsigned char *buf = NULL;
    size_t len = 0;
    /* a manifest, trainer.json or model spec: kilobytes; the one file reader refuses more than 64 MiB unread */
    if (tr_io_read_file(path, (int64_t)64 << 20, &buf, &len, err) != TR_OK) {
        if (err) err->code = TR_E_RUNTIME; /* a checkpoint's file, never the user's input */
        return NULL;
    }
    return (char *)buf; /* NUL-terminated */
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
