/* shim_stubs.c -- the few shim calls the readers' neighbours reference (device.c, through config.c's device
 * check), answered as a CPU-only build would: the harnesses never link libtorch. */
#include <string.h>

#include "trainrun_shim.h"

const char *trs_last_error(void) { return "no libtorch in the fuzz build"; }
const char *trs_torch_version(void) { return "none"; }
int trs_cuda_built(void) { return 0; }
trs_status trs_cuda_device_count(int *count)
{
    if (count) *count = 0;
    return TRS_OK;
}
trs_status trs_cuda_memory_info(int index, int64_t *free_bytes, int64_t *total_bytes)
{
    (void)index;
    if (free_bytes) *free_bytes = 0;
    if (total_bytes) *total_bytes = 0;
    return TRS_E_INVALID;
}
trs_status trs_memory_stats_get(trs_memory_stats *stats)
{
    if (stats) memset(stats, 0, sizeof *stats);
    return TRS_OK;
}
