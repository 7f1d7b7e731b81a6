/*
 * device.c -- the `device` key: parsing, the start-up check against this build and machine, memory figures
 * (see device.h).
 */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainrun_shim.h"
#include "sys.h" /* tr_memory_available */

int tr_device_parse(const char *text, tr_device *out, char *why, size_t n)
{
    tr_device d = {.cuda = 0, .index = -1};
    if (strcmp(text, "cpu") == 0) {
        if (out) *out = d;
        return 0;
    }
    d.cuda = 1;
    if (strcmp(text, "cuda") == 0) {
        if (out) *out = d;
        return 0;
    }
    if (strncmp(text, "cuda:", 5) == 0) {
        const char *num = text + 5;
        const size_t len = strlen(num);
        int ok = len > 0 && len <= 4;
        for (size_t i = 0; ok && i < len; i++) ok = num[i] >= '0' && num[i] <= '9';
        const long v = ok ? strtol(num, NULL, 10) : -1;
        if (!ok || v > TR_DEVICE_MAX_INDEX) {
            snprintf(why, n, "'%s' is not a device index: expected cuda:N with N a number from 0 to %d", num,
                     TR_DEVICE_MAX_INDEX);
            return -1;
        }
        d.index = (int)v;
        if (out) *out = d;
        return 0;
    }
    snprintf(why, n, "unknown device '%s': expected cpu, cuda or cuda:N (N = 0, 1, ...)", text);
    return -1;
}

void tr_device_name(const tr_device *d, char *buf, size_t n)
{
    if (!d || !d->cuda) snprintf(buf, n, "cpu");
    else if (d->index < 0) snprintf(buf, n, "cuda");
    else snprintf(buf, n, "cuda:%d", d->index);
}

/* The rank on this machine of a multi-process run (WORLD_SIZE > 1), as the shim's process group reads it: LOCAL_RANK,
 * else RANK; -1 in a one-process run or when neither is a number. */
static int local_rank(void)
{
    const char *ws = getenv("WORLD_SIZE");
    if (!ws || !*ws || strcmp(ws, "1") == 0) return -1;
    const char *v = getenv("LOCAL_RANK");
    if (!v || !*v) v = getenv("RANK");
    if (!v || !*v) return -1;
    char *end = NULL;
    const long r = strtol(v, &end, 10);
    return *end || r < 0 || r > TR_DEVICE_MAX_INDEX ? -1 : (int)r;
}

int tr_device_resolve(const char *device, tr_device *out, tr_error *err)
{
    char why[256];
    if (tr_device_parse(device, out, why, sizeof why) != 0)
        return tr_error_set(err, TR_E_CONFIG, "device: %s", why);
    if (!out->cuda) return TR_OK;
    if (!trs_cuda_built())
        return tr_error_set(err, TR_E_CONFIG,
                            "device: %s, but this trainrun was built against a CPU-only libtorch (%s), so CUDA is "
                            "unavailable: set device: cpu, or rebuild trainrun against a CUDA-enabled libtorch "
                            "(docs/gpu.md)",
                            device, trs_torch_version());
    int count = 0;
    if (trs_cuda_device_count(&count) != TRS_OK)
        return tr_error_set(err, TR_E_CONFIG, "device: %s: counting CUDA devices failed: %s", device,
                            trs_last_error());
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (count == 0)
        return tr_error_set(err, TR_E_CONFIG, "device: %s, but no CUDA device is visible to this process "
                            "(driver missing, or CUDA_VISIBLE_DEVICES=%s)", device, visible ? visible : "unset");
    if (out->index < 0) {
        const int lr = local_rank();
        out->index = lr >= 0 ? lr : 0;
        if (out->index >= count)
            return tr_error_set(err, TR_E_CONFIG, "device: cuda in a multi-process run takes cuda:LOCAL_RANK = "
                                "cuda:%d, but this process sees %d CUDA device(s): start at most %d process(es) per "
                                "machine", out->index, count, count);
    } else if (out->index >= count) {
        return tr_error_set(err, TR_E_CONFIG, "device: %s, but this process sees %d CUDA device(s) (cuda:0 to "
                            "cuda:%d)", device, count, count - 1);
    }
    return TR_OK;
}

int tr_memory_read(const tr_device *d, tr_memory *out)
{
    trs_memory_stats m;
    out->allocated = out->peak = 0;
    out->reserved = -1;
    out->rss = 0;
    if (trs_memory_stats_get(&m) != TRS_OK) return TR_E_RUNTIME;
    out->rss = m.rss_bytes;
    if (d && d->cuda && d->index >= 0 && d->index < m.cuda_devices) {
        out->allocated = m.cuda_allocated_bytes[d->index];
        out->reserved = m.cuda_reserved_bytes[d->index];
        out->peak = m.cuda_peak_allocated_bytes[d->index];
        return TR_OK;
    }
    out->allocated = m.allocated_bytes;
    out->reserved = m.reserved_bytes;
    out->peak = m.peak_bytes;
    return TR_OK;
}

int64_t tr_device_memory_total(const tr_device *d)
{
    if (!d || !d->cuda) return tr_memory_available();
    int64_t free_bytes = 0, total = 0;
    if (trs_cuda_memory_info(d->index, &free_bytes, &total) != TRS_OK) return 0;
    return total;
}
