#include "sys.h"

#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

double tr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tr_utc_stamp(char out[32])
{
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int64_t tr_memory_available(void)
{
    int64_t best = 0;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) best = (int64_t)pages * (int64_t)page;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        long long v;
        if (fscanf(f, "%lld", &v) == 1 && v > 0 && (best == 0 || v < best)) best = v;
        fclose(f);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (best == 0 || (int64_t)rl.rlim_cur < best))
        best = (int64_t)rl.rlim_cur;
    return best;
}
