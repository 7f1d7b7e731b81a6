#include "memreport.h"
#include "io.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tr_memsnap_take(tr_memsnap *s, int64_t step, tr_error *err)
{
    size_t n = 0;
    if (trs_memory_live_keys(NULL, 0, &n) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "memory snapshot: %s", trs_last_error());
    for (int attempt = 0; attempt < 4; attempt++) { /* keys may appear between the two calls: retry with room */
        const size_t cap = n + 64;
        trs_memory_key *k = malloc(cap * sizeof *k);
        if (!k) return tr_error_set(err, TR_E_RUNTIME, "memory snapshot: out of memory");
        if (trs_memory_live_keys(k, cap, &n) != TRS_OK) {
            free(k);
            return tr_error_set(err, TR_E_RUNTIME, "memory snapshot: %s", trs_last_error());
        }
        if (n <= cap) {
            free(s->keys);
            s->keys = k;
            s->n = n;
            s->step = step;
            s->taken = 1;
            return TR_OK;
        }
        free(k);
    }
    return tr_error_set(err, TR_E_RUNTIME, "memory snapshot: the live blocks kept changing");
}

void tr_memsnap_free(tr_memsnap *s)
{
    free(s->keys);
    memset(s, 0, sizeof *s);
}

static int key_cmp(const trs_memory_key *a, const trs_memory_key *b)
{
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    return a->size < b->size ? -1 : a->size > b->size;
}

static int growth_cmp(const void *pa, const void *pb)
{
    const tr_mem_growth *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->phase != b->phase) return a->phase < b->phase ? -1 : 1;
    return a->size < b->size ? -1 : a->size > b->size;
}

size_t tr_memsnap_diff(const tr_memsnap *base, const tr_memsnap *cur, tr_mem_growth **out, int *oom)
{
    *out = NULL;
    if (oom) *oom = 0;
    if (!cur->taken) return 0;
    tr_mem_growth *g = malloc((cur->n + 1) * sizeof *g);
    if (!g) {
        if (oom) *oom = 1;
        return 0;
    }
    const int64_t steps = base->taken ? cur->step - base->step : 0;
    size_t n = 0, i = 0, j = 0;
    const size_t nb = base->taken ? base->n : 0;
    /* both lists are sorted by (phase, size): one merge pass */
    while (j < cur->n) {
        const trs_memory_key *c = &cur->keys[j];
        int cmp = 1;
        while (i < nb && (cmp = key_cmp(&base->keys[i], c)) < 0) i++;
        if (i >= nb) cmp = 1;
        const int64_t b_bytes = cmp == 0 ? base->keys[i].bytes : 0, b_blocks = cmp == 0 ? base->keys[i].blocks : 0;
        if (c->bytes > b_bytes) {
            tr_mem_growth *e = &g[n++];
            e->phase = c->phase;
            e->size = c->size;
            e->blocks = c->blocks - b_blocks;
            e->bytes = c->bytes - b_bytes;
            e->bytes_per_step = steps > 0 ? (double)e->bytes / (double)steps : 0.0;
            e->blocks_per_step = steps > 0 ? (double)e->blocks / (double)steps : 0.0;
        }
        j++;
    }
    if (n == 0) {
        free(g);
        return 0;
    }
    qsort(g, n, sizeof *g, growth_cmp);
    *out = g;
    return n;
}

/* A figure without a fraction when it has none: 4096, 81.92. */
static void fmt_num(double v, char *buf, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%.4g", v);
}

void tr_mem_growth_line(const tr_mem_growth *g, int64_t base_step, char *buf, size_t n)
{
    char rate[48], per[96];
    fmt_num(g->bytes_per_step, rate, sizeof rate);
    if (g->blocks_per_step >= 1.0 || g->blocks_per_step <= 0.0) {
        char b[48];
        fmt_num(g->blocks_per_step, b, sizeof b);
        snprintf(per, sizeof per, "%s block%s of %lld B per step", b, g->blocks_per_step == 1.0 ? "" : "s",
                 (long long)g->size);
    } else {
        char every[48];
        fmt_num(1.0 / g->blocks_per_step, every, sizeof every);
        snprintf(per, sizeof per, "1 block of %lld B every %s steps", (long long)g->size, every);
    }
    snprintf(buf, n, "+%s B/step: %s, allocated in %s, still alive (+%lld block%s, %lld B since step %lld)", rate,
             per, trs_memory_phase_name(g->phase), (long long)g->blocks, g->blocks == 1 ? "" : "s",
             (long long)g->bytes, (long long)base_step);
}

static void add_stats(cJSON *o, const char *name, const trs_memory_stats *m)
{
    cJSON *s = cJSON_AddObjectToObject(o, name);
    if (!s) return;
    cJSON_AddNumberToObject(s, "allocated", (double)m->allocated_bytes);
    cJSON_AddNumberToObject(s, "reserved", (double)m->reserved_bytes);
    cJSON_AddNumberToObject(s, "rss", (double)m->rss_bytes);
    cJSON_AddNumberToObject(s, "live_blocks", (double)m->live_allocations);
}

int tr_memreport_write(const char *path, const char *reason, int64_t base_step, int64_t step,
                       const trs_memory_stats *base_stats, const trs_memory_stats *now, const tr_mem_growth *g,
                       size_t n, const char *backtrace, tr_error *err)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL;
    if (ok) {
        cJSON_AddStringToObject(o, "reason", reason);
        cJSON_AddNumberToObject(o, "baseline_step", (double)base_step);
        cJSON_AddNumberToObject(o, "step", (double)step);
        if (base_stats) add_stats(o, "baseline", base_stats);
        if (now) add_stats(o, "now", now);
        cJSON *arr = cJSON_AddArrayToObject(o, "growth");
        ok = arr != NULL;
        for (size_t i = 0; ok && i < n; i++) {
            cJSON *e = cJSON_CreateObject();
            char line[256];
            tr_mem_growth_line(&g[i], base_step, line, sizeof line);
            ok = e && cJSON_AddStringToObject(e, "phase", trs_memory_phase_name(g[i].phase)) &&
                 cJSON_AddNumberToObject(e, "block_bytes", (double)g[i].size) &&
                 cJSON_AddNumberToObject(e, "blocks", (double)g[i].blocks) &&
                 cJSON_AddNumberToObject(e, "bytes", (double)g[i].bytes) &&
                 cJSON_AddNumberToObject(e, "bytes_per_step", g[i].bytes_per_step) &&
                 cJSON_AddNumberToObject(e, "blocks_per_step", g[i].blocks_per_step) &&
                 cJSON_AddStringToObject(e, "line", line);
            if (e) cJSON_AddItemToArray(arr, e);
        }
        if (ok && backtrace && backtrace[0]) {
            cJSON *bt = cJSON_AddArrayToObject(o, "backtrace");
            const char *p = backtrace;
            while (ok && bt && *p) {
                const char *nl = strchr(p, '\n');
                const size_t len = nl ? (size_t)(nl - p) : strlen(p);
                char *frame = malloc(len + 1);
                ok = frame != NULL;
                if (frame) {
                    memcpy(frame, p, len);
                    frame[len] = '\0';
                    cJSON *s = cJSON_CreateString(frame);
                    free(frame);
                    ok = s != NULL;
                    if (s) cJSON_AddItemToArray(bt, s);
                }
                p += len + (nl ? 1 : 0);
            }
        }
    }
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory building the report", path);
    /* The report ends with a newline, as every JSON file trainrun writes; written through the atomic path so a
       failing write (a full disk) leaves the previous report whole. */
    const size_t len = strlen(text);
    char *buf = malloc(len + 2);
    int rc = TR_OK;
    if (!buf) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory building the report", path);
    } else {
        memcpy(buf, text, len);
        buf[len] = '\n';
        rc = tr_io_write_file_atomic(path, buf, len + 1, err);
        free(buf);
    }
    cJSON_free(text);
    return rc;
}

/* A message into `log` (none without one): a report's failures are logged, not fatal. */
static void say(tr_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(tr_log *log, const char *fmt, ...)
{
    if (!log) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tr_log_message(log, "%s", msg);
}

/* RUN_DIR/memory_snapshot.pickle: torch.cuda.memory._snapshot() pickled (trs_cuda_memory_snapshot), replaced
 * atomically. Failing to take or write it is logged, not fatal. */
static void write_memory_snapshot(const char *dir, tr_log *log)
{
    if (!trs_cuda_memory_snapshot_built()) return;
    void *data = NULL;
    size_t n = 0;
    if (trs_cuda_memory_snapshot(&data, &n) != TRS_OK) {
        say(log, "watchdog: no memory snapshot: %s", trs_last_error());
        return;
    }
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/memory_snapshot.pickle", dir);
    tr_error e = {0};
    if (tr_io_write_file_atomic(path, data, n, &e)) say(log, "watchdog: %s", e.msg);
    else say(log, "watchdog: wrote %s (%zu bytes; open it at https://pytorch.org/memory_viz)", path, n);
    free(data);
}

void tr_memreport_report(const char *dir, const char *reason, int64_t step, const tr_memsnap *base,
                         const trs_memory_stats *base_stats, int cuda, int recording_history, int backtrace,
                         int log_lines, tr_log *log)
{
    /* On a CUDA device, the caching allocator's own snapshot beside the report when the watchdog acts (segments
     * and blocks; with watchdog.snapshot also the recorded history and its stacks), and at the end on request. */
    if (cuda && (strcmp(reason, "end") != 0 || recording_history)) write_memory_snapshot(dir, log);
    if (!base->taken) return;
    tr_memsnap cur = {0};
    tr_error e = {0};
    if (tr_memsnap_take(&cur, step, &e)) {
        say(log, "watchdog: %s", e.msg);
        return;
    }
    tr_mem_growth *g = NULL;
    const size_t n = tr_memsnap_diff(base, &cur, &g, NULL);
    trs_memory_stats now;
    if (trs_memory_stats_get(&now) != TRS_OK) memset(&now, 0, sizeof now);
    char bt[8192] = "";
    if (n > 0 && backtrace) {
        size_t best = 0; /* fastest-growing: most bytes per step, i.e. g[0] (sorted by bytes) */
        trs_memory_key_backtrace(g[best].phase, g[best].size, bt, sizeof bt, NULL);
    }
    for (size_t i = 0; log_lines && log && i < n && i < 5; i++) {
        char line[256];
        tr_mem_growth_line(&g[i], base->step, line, sizeof line);
        say(log, "watchdog:   %s", line);
    }
    if (log_lines && log && n > 5) say(log, "watchdog:   ... %zu more (phase, size) keys grew", n - 5);
    if (log_lines && log && bt[0]) { /* the first key's allocating stack, innermost first, one frame a line */
        say(log, "watchdog:   the first was allocated at:");
        for (const char *line = bt; *line;) {
            const char *nl = strchr(line, '\n');
            say(log, "watchdog:     %.*s", nl ? (int)(nl - line) : (int)strlen(line), line);
            if (!nl) break;
            line = nl + 1;
        }
    }
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/memory_report.json", dir);
    if (tr_memreport_write(path, reason, base->step, step, base_stats, &now, g, n, bt, &e))
        say(log, "watchdog: %s", e.msg);
    free(g);
    tr_memsnap_free(&cur);
}

