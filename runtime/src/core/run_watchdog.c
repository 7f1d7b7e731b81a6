/*
 * run_watchdog.c -- the memory watchdog of a run, in one place: its set-up (the sampler from watchdog.*, CUDA
 * memory history under watchdog.snapshot, the cache limit derived from its hard limit), when it samples, the
 * baseline's snapshot of live blocks by (phase, size), what it reports at warn / limit / end (log lines,
 * memory_report.json, on CUDA memory_snapshot.pickle) and its stop (watchdog.action checkpoint_exit). Its state is
 * tr_run_state.wd (run_watchdog, run_internal.h); the growth fit is watchdog.c, the snapshots memreport.c, the
 * counting allocator shim/src/memory.cpp.
 */
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "run_internal.h"

/* watchdog.snapshot: allocation/free events the CUDA allocator keeps (the newest; Python users pass ~100000) */
#define TR_SNAPSHOT_MAX_ENTRIES 100000

/* watchdog.snapshot: record the CUDA allocator's history from here on (the main rank; before the first step, so
 * the warm-up is in it). TR_E_RUNTIME when libtorch refuses. */
int run_watchdog_record(tr_run_state *t, tr_error *err)
{
    if (!t->cfg->watchdog.snapshot || !tr_dist_is_main(&t->dist)) return TR_OK;
    if (trs_cuda_memory_record_history(1, TR_SNAPSHOT_MAX_ENTRIES) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "watchdog.snapshot: %s", trs_last_error());
    t->wd.recording_history = 1;
    return TR_OK;
}

/* The sampler from cfg->watchdog against the device's memory, and the cache limit it implies. */
int run_watchdog_open(tr_run_state *t, tr_error *err)
{
    const int rc = tr_watchdog_init(&t->wd.sampler, t->cfg, tr_device_memory_total(&t->core.device), err);
    if (!rc) run_apply_cache_limit(t);
    return rc;
}

/* Recording costs a stack walk per allocation: off once the run is over. */
void run_watchdog_stop_recording(tr_run_state *t)
{
    if (!t->wd.recording_history) return;
    trs_cuda_memory_record_history(0, TR_SNAPSHOT_MAX_ENTRIES);
    t->wd.recording_history = 0;
}

void run_watchdog_free(tr_run_state *t)
{
    tr_watchdog_free(&t->wd.sampler);
    tr_memsnap_free(&t->wd.base);
}

/* Warm-up is over (tr_watchdog_warmed_up): the first step, the first validation pass when one is configured, the
 * first step-interval checkpoint when configured, watchdog.warmup_steps. Saving a checkpoint keeps no tensor
 * memory (tests/test_checkpoint.c). */
static int warmed_up(const tr_run_state *t)
{
    const tr_config *cfg = t->cfg;
    const int val_configured = run_eval_set(t)->n > 0 && (cfg->eval.every_steps > 0 || cfg->eval.every_epoch);
    return tr_watchdog_warmed_up(cfg, t->p.step, val_configured && t->p.evals_done == 0, t->ckpt.done);
}

/* What grew since the baseline (tr_memreport_report): the log's lines, RUN_DIR/memory_report.json and on CUDA the
 * allocator's snapshot. `reason`: "warn", "limit", "end". */
void run_watchdog_report(tr_run_state *t, const char *reason, int log_lines)
{
    if (!tr_dist_is_main(&t->dist)) return;
    tr_memreport_report(t->dir.path, reason, t->p.step, &t->wd.base, &t->wd.base_stats, t->core.device.cuda,
                        t->wd.recording_history, t->cfg->watchdog.backtrace, log_lines, &t->sinks.log);
}

/* Sample allocated bytes and report what the watchdog sees. Its limit with watchdog.action checkpoint_exit asks
 * for the run to stop (requests). */
void run_watchdog_sample(tr_run_state *t)
{
    const tr_config *cfg = t->cfg;
    tr_memory m; /* the CPU's counted bytes, or the CUDA caching allocator's for the run's device */
    if (tr_memory_read(&t->core.device, &m) != TR_OK) return;
    tr_watchdog_report r;
    const tr_watchdog_event ev = tr_watchdog_sample(&t->wd.sampler, t->p.step, m.allocated, warmed_up(t), &r);
    r.reserved = m.reserved;
    r.rss = m.rss;
    t->sum.growth_per_step = r.growth_per_step;
    if (ev == TR_WD_EV_NONE) return;
    if (ev == TR_WD_EV_BASELINE) {
        tr_error e = {0};
        if (tr_memsnap_take(&t->wd.base, t->p.step, &e)) tr_log_message(&t->sinks.log, "watchdog: %s", e.msg);
        if (trs_memory_stats_get(&t->wd.base_stats) != TRS_OK) memset(&t->wd.base_stats, 0, sizeof t->wd.base_stats);
        run_apply_cache_limit(t);
    }
    run_emit(t, &(tr_event){.kind = TR_EV_WATCHDOG, .step = t->p.step, .epoch = t->p.epoch, .watchdog = r});
    if (ev != TR_WD_EV_BASELINE) run_watchdog_report(t, ev == TR_WD_EV_LIMIT ? "limit" : "warn", 1);
    if (ev == TR_WD_EV_LIMIT && cfg->watchdog.action == TR_WD_CHECKPOINT_EXIT) {
        tr_log_message(&t->sinks.log, "watchdog: stopping at step %lld (watchdog.action = checkpoint_exit)",
                       (long long)t->p.step);
        t->wd.pending = 1;
    }
}

int run_watchdog_due(const tr_run_state *t)
{
    return t->cfg->watchdog.enabled && t->p.step % t->cfg->watchdog.every_steps == 0;
}

/* The watchdog stops the run at this step: no more concerns; tr_run_finish saves the watchdog's checkpoint. */
int run_watchdog_stop_due(const tr_run_state *t) { return (run_requests(t) & TR_DIST_WATCHDOG) != 0; }

/* The watchdog ends the loop here (watchdog_stop_due). */
int run_watchdog_stop(tr_run_state *t)
{
    t->sum.watchdog_stopped = 1;
    return TR_OK;
}

int tr_run_memory_growth(tr_run_state *t, tr_mem_growth **out, size_t *n, tr_error *err)
{
    *out = NULL;
    *n = 0;
    if (!t->wd.base.taken) return TR_OK;
    tr_memsnap cur = {0};
    const int rc = tr_memsnap_take(&cur, t->p.step, err);
    if (rc) return rc;
    int oom = 0;
    *n = tr_memsnap_diff(&t->wd.base, &cur, out, &oom);
    tr_memsnap_free(&cur);
    return oom ? tr_error_set(err, TR_E_RUNTIME, "memory growth: out of memory") : TR_OK;
}

/* memory.cache_limit_bytes and memory.cache_limit_fraction x the watchdog's hard limit, whichever is smaller (0:
 * none): reserved bytes above it give the cache back. The watchdog's limit is known in full at its baseline. */
void run_apply_cache_limit(const tr_run_state *t)
{
    const tr_config *cfg = t->cfg;
    int64_t lim = cfg->memory.cache_limit_bytes;
    const int64_t wd = t->wd.sampler.has_baseline ? t->wd.sampler.limit : tr_watchdog_limit_without_baseline(&t->wd.sampler);
    if (cfg->watchdog.enabled && cfg->memory.cache_limit_fraction > 0 && wd > 0) {
        const int64_t f = (int64_t)(cfg->memory.cache_limit_fraction * (double)wd);
        if (lim == 0 || f < lim) lim = f;
    }
    trs_memory_configure(cfg->memory.cache, lim, cfg->watchdog.backtrace);
}
