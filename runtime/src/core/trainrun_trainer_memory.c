/*
 * trainrun_trainer_memory.c -- a trainer's memory: the device's statistics (trainrun_trainer_memory), the baseline
 * and what grew since (_memory_baseline, _memory_growth; memreport.c's snapshots), and the memory watchdog
 * (_watchdog: watchdog.c's sampler and the warm-up rule a run uses, its limit agreed over the ranks of a group).
 */
#include "trainrun_trainer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "memreport.h"

/* The baseline's snapshot of live blocks by (phase, size), and the allocator's figures beside it. */
static int take_baseline(trainrun_trainer *tr)
{
    if (trs_memory_stats_get(&tr->mem_base_stats) != TRS_OK) memset(&tr->mem_base_stats, 0, sizeof tr->mem_base_stats);
    return tr_memsnap_take(&tr->mem_base, tr->p.step, &tr->err);
}

void trainer_memory_report(trainrun_trainer *tr, const char *reason)
{
    if (!tr->dir.path[0] || !tr_dist_is_main(&tr->dist)) return;
    tr_memreport_report(tr->dir.path, reason, tr->p.step, &tr->mem_base, &tr->mem_base_stats, tr->core.device.cuda,
                        0, tr->cfg.watchdog.backtrace, tr->log.open && strcmp(reason, "end") != 0,
                        tr->log.open ? &tr->log.log : NULL);
}

int trainrun_trainer_watchdog(trainrun_trainer *tr, trainrun_watchdog_report *out)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (out) memset(out, 0, sizeof *out);
    const tr_config *cfg = &tr->cfg;
    if (tr->dist.pg && (tr->dist.agreed & TR_DIST_WATCHDOG)) { /* a rank's limit, agreed at this step */
        tr->save_reason = "watchdog";
        tr->wd_stopped = 1;
        return tr_error_set(&tr->err, TRAINRUN_E_WATCHDOG, "watchdog: a rank reached its limit (watchdog.action "
                            "checkpoint_exit): every rank saves and stops at step %lld", (long long)tr->p.step);
    }
    if (!cfg->watchdog.enabled || tr->p.step < 1 || tr->p.step % cfg->watchdog.every_steps != 0) return TRAINRUN_OK;
    tr_memory m;
    if (tr_memory_read(&tr->core.device, &m) != TR_OK)
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "watchdog: %s", trs_last_error());
    tr_watchdog_report r;
    const int warm = tr_watchdog_warmed_up(cfg, tr->p.step, 0, tr->ckpt.done);
    const tr_watchdog_event ev = tr_watchdog_sample(&tr->wd, tr->p.step, m.allocated, warm, &r);
    r.reserved = m.reserved;
    r.rss = m.rss;
    if (ev == TR_WD_EV_BASELINE && take_baseline(tr))
        return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "watchdog: %s", tr->err.msg);
    if (ev != TR_WD_EV_NONE)
        trainer_emit(tr, &(tr_event){.kind = TR_EV_WATCHDOG, .step = tr->p.step, .epoch = tr->p.epoch, .watchdog = r});
    if (ev == TR_WD_EV_WARN || ev == TR_WD_EV_LIMIT) trainer_memory_report(tr, ev == TR_WD_EV_LIMIT ? "limit" : "warn");
    if (out)
        *out = (trainrun_watchdog_report){.kind = ev == TR_WD_EV_BASELINE ? TRAINRUN_WATCHDOG_BASELINE
                                                  : ev == TR_WD_EV_WARN   ? TRAINRUN_WATCHDOG_WARN
                                                  : ev == TR_WD_EV_LIMIT  ? TRAINRUN_WATCHDOG_LIMIT
                                                                          : 0,
                                          .step = tr->p.step, .allocated_bytes = r.current,
                                          .baseline_bytes = r.baseline, .limit_bytes = r.limit,
                                          .growth_per_step = r.growth_per_step};
    if (ev == TR_WD_EV_LIMIT && cfg->watchdog.action == TR_WD_CHECKPOINT_EXIT && tr->dist.pg) {
        tr->wd_pending = 1; /* the ranks agree on it at the next step, and all save and stop there */
        return TRAINRUN_OK;
    }
    if (ev == TR_WD_EV_LIMIT && cfg->watchdog.action == TR_WD_CHECKPOINT_EXIT) {
        tr->save_reason = "watchdog";
        tr->wd_stopped = 1;
        return tr_error_set(&tr->err, TRAINRUN_E_WATCHDOG, "watchdog: allocated %lld bytes at step %lld reach the "
                            "limit %lld (baseline %lld, %+.0f bytes/step): save and stop (watchdog.action "
                            "checkpoint_exit)", (long long)r.current, (long long)tr->p.step, (long long)r.limit,
                            (long long)r.baseline, r.growth_per_step);
    }
    return TRAINRUN_OK;
}

int trainrun_trainer_memory(trainrun_trainer *tr, trainrun_memory *out)
{
    const int rc = trainer_begin(tr, out, "memory: out is NULL", 0);
    if (rc) return rc;
    trs_memory_stats m;
    tr_memory dm;
    if (trs_memory_stats_get(&m) != TRS_OK || tr_memory_read(&tr->core.device, &dm) != TR_OK)
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "memory: %s", trs_last_error());
    out->allocated_bytes = dm.allocated; /* the trainer's device: the CPU's counted bytes, or the CUDA device's */
    out->peak_bytes = dm.peak;
    out->live_allocations = m.live_allocations;
    out->total_allocations = m.total_allocations;
    out->reserved_bytes = dm.reserved;
    out->peak_reserved_bytes = m.peak_reserved_bytes;
    out->rss_bytes = m.rss_bytes;
    out->peak_rss_bytes = m.peak_rss_bytes;
    return TRAINRUN_OK;
}

int trainrun_trainer_memory_baseline(trainrun_trainer *tr)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (take_baseline(tr)) return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "memory_baseline: %s", tr->err.msg);
    return TRAINRUN_OK;
}

int trainrun_trainer_memory_growth(trainrun_trainer *tr, trainrun_memory_growth *out, size_t cap, size_t *count)
{
    const int rc = trainer_begin(tr, count, "memory_growth: count is NULL", 0);
    if (rc) return rc;
    if (!out && cap > 0) return tr_api_invalid(&tr->err, "memory_growth: out is NULL with cap > 0");
    *count = 0;
    if (!tr->mem_base.taken) return TRAINRUN_OK;
    tr_memsnap cur = {0};
    if (tr_memsnap_take(&cur, tr->p.step, &tr->err))
        return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "memory_growth: %s", tr->err.msg);
    tr_mem_growth *g = NULL;
    int oom = 0;
    const size_t n = tr_memsnap_diff(&tr->mem_base, &cur, &g, &oom);
    tr_memsnap_free(&cur);
    if (oom) return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "memory_growth: out of memory");
    tr_api_copy_growth(g, n, out, cap);
    free(g);
    *count = n;
    return TRAINRUN_OK;
}
