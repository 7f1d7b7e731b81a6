/*
 * run.c -- the training loop, as open / step / finish / close so that a caller (the CLI's tr_run, the embedding
 * API) can drive it a step at a time. step_locked() ("THE STEP" below) is the loop's body on one screen: one
 * optimizer step, then each concern -- EMA, log, evaluation, watchdog, checkpoint -- as
 * `if (!rc && X_due(t)) rc = X(t, err);`. What a run reports goes through the event path (event.h, run_events.c).
 * tr_run_finish() saves the last checkpoint and tests; tr_run_close() reports and frees. Set-up is in
 * run_setup.c (a resume in run_restore.c), the run directory's files in run_dir.c, the batches in run_loader.c, the
 * summary in summary.c.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "best.h"
#include "device.h"
#include "io.h"
#include "plot.h"
#include "run_internal.h"
#include "text.h"
#include "trace.h"

static volatile sig_atomic_t stop_requested;

void tr_request_stop(void) { stop_requested = 1; }

int run_stop_requested(void *ctx)
{
    const trainer *t = ctx;
    return stop_requested || t->stop;
}

/* Whether this is the step at whose end the process is to send itself SIGKILL: the environment variable
 * TRAINRUN_KILL_AT_STEP (read once; a positive step), which `trainrun check` sets in the run it kills and resumes,
 * and the test suite's resume tests the same way -- a kill at an exact, reproducible step, where killing the run from
 * outside, or polling metrics.jsonl, lands wherever the scheduler let it. Unset: one comparison per step. */
static int kill_due(const trainer *t)
{
    static int64_t kill_at = -2; /* -2: not read yet; -1: not set */
    if (kill_at == -2) {
        const char *s = getenv("TRAINRUN_KILL_AT_STEP");
        char *end = NULL;
        const long long v = s && *s ? strtoll(s, &end, 10) : -1;
        kill_at = end && *end == '\0' && v > 0 ? (int64_t)v : -1;
    }
    return t->p.step == kill_at;
}

/* ---------------------------------------------------------------------------------------------------- steps */

/* Evaluate a whole data set in order, in eval-batch-sized chunks, with the live weights (ema NULL) or the EMA's;
 * the shim returns counts per batch and they are accumulated here in C. */
static int evaluate_weights(trainer *t, const tr_dataset *ds, const char *split, trs_ema *ema, tr_eval_figures *fig,
                            tr_error *err)
{
    const double t0 = run_now(t);
    const int64_t ebs = t->cfg->eval.batch_size;
    const size_t tc = (size_t)ds->t_cols;
    tr_metrics *m = &t->metrics;
    tr_metrics_reset(m);
    for (int64_t i = 0; i < ds->n; i += ebs) {
        const int64_t n = i + ebs <= ds->n ? ebs : ds->n - i;
        trs_batch b = run_batch_view(t, n);
        if (t->block) { /* token data: the fixed windows i, i + 1, ... starting at multiples of block */
            int64_t *starts = t->starts + t->step_batch;
            for (int64_t j = 0; j < n; j++) starts[j] = (i + j) * t->block;
            tr_window_cut(ds->tokens, starts, n, t->block, t->eval_ids, t->eval_y);
            b.x_ids = t->eval_ids;
            b.y = t->eval_y;
        } else {
            b.x = tr_dataset_rows(ds, i, n, &t->eval_buf, err); /* in memory: no gather, no copy */
            if (!b.x) return err->code;
            b.y = ds->y + i;
            b.target = ds->t ? ds->t + (size_t)i * tc : NULL;
        }
        trs_step_result r;
        const int rc = tr_core_eval_step(&t->core, ema, &b, &r, &m->batch, NULL, err, "%s evaluation%s", split,
                                         ema ? " (EMA weights)" : "");
        if (rc) return rc;
        tr_metrics_add(m, &r);
    }
    const double secs = run_now(t) - t0;
    run_emit(t, &(tr_event){.kind = TR_EV_EVAL, .step = t->p.step, .epoch = t->p.epoch, .split = split,
                            .weights = ema ? "ema" : "live", .metrics = m, .top_k = t->cfg->eval.top_k,
                            .loss = tr_metrics_loss(m), .accuracy = tr_metrics_accuracy(m), .correct = m->correct,
                            .samples = m->samples, .seconds = secs,
                            /* the caller hears of the weights evaluate() returns */
                            .reported = !ema || t->cfg->eval.weights == TR_WEIGHTS_EMA});
    *fig = (tr_eval_figures){.has = 1, .loss = tr_metrics_loss(m), .accuracy = tr_metrics_accuracy(m),
                             .top_k_accuracy = tr_metrics_topk_accuracy(m), .micro_f1 = tr_metrics_micro_f1(m),
                             .macro_f1 = tr_metrics_macro_f1(m), .mse = tr_metrics_mse(m), .mae = tr_metrics_mae(m),
                             .samples = m->samples, .step = t->p.step};
    if (m->confusion) { /* the run directory keeps the latest confusion matrix of each split and weights */
        char path[TR_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/confusion_%s%s.csv", t->run_dir, split, ema ? "_ema" : "");
        return tr_metrics_write_confusion(m, path, err);
    }
    return TR_OK;
}

/* A phase change (after an evaluation pass, before a checkpoint): the caching allocators release the blocks no
 * tensor uses -- the CPU one's (trs_memory_empty_cache) and, on a CUDA device, the CUDA one's
 * (torch.cuda.empty_cache) -- so `reserved` shows what the next phase needs. Never per step: a released block must
 * be obtained again when it is needed (on CUDA a synchronising cudaMalloc). */
static void phase_change(const trainer *t)
{
    trs_memory_empty_cache(NULL);
    if (t->core.device.cuda) trs_cuda_empty_cache();
}

/* Evaluate with the weights eval.weights names: live, EMA or both. *loss_out / *acc_out get the live figures (the
 * EMA's when only those are evaluated); every figure goes into t->fig. */
static int evaluate(trainer *t, const tr_dataset *ds, const char *split, double *loss_out, double *acc_out,
                    tr_error *err)
{
    const int s = strcmp(split, "test") == 0;
    const tr_eval_weights w = t->cfg->eval.weights;
    int rc = TR_OK;
    /* Phase changes, train to eval and back: the training step's cached blocks go back before the pass (whose
     * activations at eval.batch_size are other sizes), and the pass's after it. Never inside the loop of steps. */
    trs_memory_empty_cache(NULL);
    if (w != TR_WEIGHTS_EMA) rc = evaluate_weights(t, ds, split, NULL, &t->fig[s][0], err);
    if (!rc && w != TR_WEIGHTS_LIVE) rc = evaluate_weights(t, ds, split, t->core.ema, &t->fig[s][1], err);
    phase_change(t);
    if (rc) return rc;
    const tr_eval_figures *f = &t->fig[s][w == TR_WEIGHTS_EMA ? 1 : 0];
    if (loss_out) *loss_out = f->loss;
    if (acc_out) *acc_out = f->accuracy;
    return TR_OK;
}

/* Close the open log window into a train record. */
static void log_window(trainer *t, int partial)
{
    tr_ckpt_progress *p = &t->p;
    if (p->win_steps == 0) return;
    const double now = run_now(t);
    p->last_loss = p->win_loss / (double)p->win_steps;
    /* token data: correct counts positions, block of them per window */
    const double counted = (double)p->win_samples * (double)(t->block ? t->block : 1);
    run_emit(t, &(tr_event){.kind = TR_EV_TRAIN, .step = p->step, .epoch = p->epoch, .loss = p->last_loss,
                            .accuracy = (double)p->win_correct / counted, .lr = t->lr, .partial = partial,
                            .samples_per_s = (double)p->win_samples / (now - t->win_t0 > 0 ? now - t->win_t0 : 1e-9)});
    p->win_loss = 0.0;
    p->win_correct = p->win_samples = p->win_steps = 0;
    t->win_t0 = run_now(t);
}

/* ---------------------------------------------------------------------------------------------------- concerns */

/* Warm-up is over once the lazily allocated state exists: optimizer state (first step), evaluation buffers (first
 * validation pass, when one is configured), the first step-interval checkpoint (when configured) -- and the
 * configured number of steps has passed. Saving a checkpoint keeps no tensor memory (tests/test_checkpoint.c). */
static int warmed_up(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    const int val_configured = run_eval_set(t)->n > 0 && (cfg->eval.every_steps > 0 || cfg->eval.every_epoch);
    const int ckpt_configured = cfg->checkpoint.every_steps > 0;
    return t->p.step >= 1 && t->p.step >= cfg->watchdog.warmup_steps && (!val_configured || t->p.evals_done > 0) &&
           (!ckpt_configured || t->checkpoints_done > 0);
}

/* RUN_DIR/memory_snapshot.pickle: torch.cuda.memory._snapshot() pickled (trs_cuda_memory_snapshot), replaced
 * atomically. Failing to take or write it is logged, not fatal. */
static void write_memory_snapshot(trainer *t)
{
    if (!trs_cuda_memory_snapshot_built()) return;
    void *data = NULL;
    size_t n = 0;
    if (trs_cuda_memory_snapshot(&data, &n) != TRS_OK) {
        tr_log_message(&t->log, "watchdog: no memory snapshot: %s", trs_last_error());
        return;
    }
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/memory_snapshot.pickle", t->run_dir);
    tr_error e = {0};
    if (tr_io_write_file_atomic(path, data, n, &e)) tr_log_message(&t->log, "watchdog: %s", e.msg);
    else tr_log_message(&t->log, "watchdog: wrote %s (%zu bytes; open it at https://pytorch.org/memory_viz)", path, n);
    free(data);
}

/* What grew since the baseline, by (phase, size): the top lines into the log, and RUN_DIR/memory_report.json
 * (with the fastest-growing key's allocating call stack under watchdog.backtrace), and on CUDA the allocator's
 * snapshot (write_memory_snapshot). `reason`: "warn", "limit", "end". Failing to write the report is logged, not fatal: the run's own work comes first. */
static void report_growth(trainer *t, const char *reason, int log_lines)
{
    if (!tr_dist_is_main(&t->dist)) return;
    /* On a CUDA device, the caching allocator's own snapshot beside the report when the watchdog acts (segments
     * and blocks; with watchdog.snapshot also the recorded history and its stacks), and at the end on request. */
    if (t->core.device.cuda && (strcmp(reason, "end") != 0 || t->recording_history)) write_memory_snapshot(t);
    if (!t->mem_base.taken) return;
    tr_memsnap cur = {0};
    tr_error e = {0};
    if (tr_memsnap_take(&cur, t->p.step, &e)) {
        tr_log_message(&t->log, "watchdog: %s", e.msg);
        return;
    }
    tr_mem_growth *g = NULL;
    const size_t n = tr_memsnap_diff(&t->mem_base, &cur, &g, NULL);
    trs_memory_stats now;
    if (trs_memory_stats_get(&now) != TRS_OK) memset(&now, 0, sizeof now);
    char bt[8192] = "";
    if (n > 0 && t->cfg->watchdog.backtrace) {
        size_t best = 0; /* fastest-growing: most bytes per step, i.e. g[0] (sorted by bytes) */
        trs_memory_key_backtrace(g[best].phase, g[best].size, bt, sizeof bt, NULL);
    }
    for (size_t i = 0; log_lines && i < n && i < 5; i++) {
        char line[256];
        tr_mem_growth_line(&g[i], t->mem_base.step, line, sizeof line);
        tr_log_message(&t->log, "watchdog:   %s", line);
    }
    if (log_lines && n > 5) tr_log_message(&t->log, "watchdog:   ... %zu more (phase, size) keys grew", n - 5);
    if (log_lines && bt[0]) { /* the first key's allocating stack, innermost first, one frame a line */
        tr_log_message(&t->log, "watchdog:   the first was allocated at:");
        for (const char *line = bt; *line;) {
            const char *nl = strchr(line, '\n');
            tr_log_message(&t->log, "watchdog:     %.*s", nl ? (int)(nl - line) : (int)strlen(line), line);
            if (!nl) break;
            line = nl + 1;
        }
    }
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/memory_report.json", t->run_dir);
    if (tr_memreport_write(path, reason, t->mem_base.step, t->p.step, &t->mem_base_stats, &now, g, n, bt, &e))
        tr_log_message(&t->log, "watchdog: %s", e.msg);
    free(g);
    tr_memsnap_free(&cur);
}

/* Sample allocated bytes and report what the watchdog sees. Its limit with watchdog.action checkpoint_exit asks
 * for the run to stop (requests). */
static void watch_memory(trainer *t)
{
    const tr_config *cfg = t->cfg;
    tr_memory m; /* the CPU's counted bytes, or the CUDA caching allocator's for the run's device */
    if (tr_memory_read(&t->core.device, &m) != TR_OK) return;
    tr_watchdog_report r;
    const tr_watchdog_event ev = tr_watchdog_sample(&t->wd, t->p.step, m.allocated, warmed_up(t), &r);
    r.reserved = m.reserved;
    r.rss = m.rss;
    t->sum.growth_per_step = r.growth_per_step;
    if (ev == TR_WD_EV_NONE) return;
    if (ev == TR_WD_EV_BASELINE) {
        tr_error e = {0};
        if (tr_memsnap_take(&t->mem_base, t->p.step, &e)) tr_log_message(&t->log, "watchdog: %s", e.msg);
        if (trs_memory_stats_get(&t->mem_base_stats) != TRS_OK) memset(&t->mem_base_stats, 0, sizeof t->mem_base_stats);
        run_apply_cache_limit(t);
    }
    run_emit(t, &(tr_event){.kind = TR_EV_WATCHDOG, .step = t->p.step, .epoch = t->p.epoch, .watchdog = r});
    if (ev != TR_WD_EV_BASELINE) report_growth(t, ev == TR_WD_EV_LIMIT ? "limit" : "warn", 1);
    if (ev == TR_WD_EV_LIMIT && cfg->watchdog.action == TR_WD_CHECKPOINT_EXIT) {
        tr_log_message(&t->log, "watchdog: stopping at step %lld (watchdog.action = checkpoint_exit)",
                       (long long)t->p.step);
        t->wd_pending = 1;
    }
}

/* ---------------------------------------------------------------------------------------------------- requests */

static int interval_due(const trainer *t)
{
    const double every = t->cfg->checkpoint.every_seconds;
    return every > 0 && run_elapsed(t) - t->last_ckpt_elapsed >= every;
}

/* What this process asks for as it stands (TR_DIST_* bits): a stop (a signal: tr_request_stop; the caller:
 * tr_run_request_stop), the watchdog's stop, an interval checkpoint (checkpoint.every_seconds). */
static int own_requests(const trainer *t)
{
    return (stop_requested || t->stop ? TR_DIST_STOP : 0) | (t->wd_pending ? TR_DIST_WATCHDOG : 0) |
           (interval_due(t) ? TR_DIST_CHECKPOINT : 0);
}

/* What the run acts on. Several processes: what the ranks agreed on at this step (agree_on_step: the OR over
 * ranks), so that all stop or save at the same step, a rank's own request taking effect at the next step's
 * agreement. One process: its own requests, at once. The concerns ask this alone. */
static int requests(const trainer *t) { return t->dist.pg ? t->flags : own_requests(t); }

/* Once per step, after the train step: the ranks all-reduce the step's loss and counts and agree on the requests
 * (one process: nothing to agree with). */
static int agree_on_step(trainer *t, trs_step_result *r, tr_error *err)
{
    t->flags = own_requests(t);
    return tr_dist_reduce_step(&t->dist, r, &t->flags, err);
}

/* ---------------------------------------------------------------------------------------------------- due */

static int log_due(const trainer *t)
{
    return t->p.step % t->cfg->log.every_steps == 0 || t->p.step == t->total_steps;
}

/* The EMA after optimizer step p.step: a fresh copy of the weights at ema.start_step (> 0), then an update every
 * ema.every_steps steps after it. */
static int ema_due(const trainer *t)
{
    const int64_t s = t->p.step, start = t->cfg->ema.start_step;
    return t->core.ema && ((s == start && start > 0) || (s > start && (s - start) % t->cfg->ema.every_steps == 0));
}

static int eval_due(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    return run_eval_set(t)->n > 0 && ((cfg->eval.every_steps > 0 && t->p.step % cfg->eval.every_steps == 0) ||
                            (cfg->eval.every_epoch && run_epoch_done(t)));
}

static int watchdog_due(const trainer *t)
{
    return t->cfg->watchdog.enabled && t->p.step % t->cfg->watchdog.every_steps == 0;
}

/* The watchdog stops the run at this step: no more concerns; tr_run_finish saves the watchdog's checkpoint. */
static int watchdog_stop_due(const trainer *t) { return (requests(t) & TR_DIST_WATCHDOG) != 0; }

/* A background save (checkpoint.async) is in flight: its record (or error) once it has finished. */
static int saved_due(const trainer *t) { return tr_ckpt_saver_busy(&t->saver); }

/* Why a checkpoint is due after this step ("best", "steps", "interval"), or NULL. */
static const char *checkpoint_due(const trainer *t)
{
    const tr_config *cfg = t->cfg;
    if (t->best_due) return "best"; /* the last evaluation entered checkpoint.save_top_k's set */
    if (cfg->checkpoint.every_steps > 0 && t->p.step % cfg->checkpoint.every_steps == 0) return "steps";
    if (requests(t) & TR_DIST_CHECKPOINT) return "interval";
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------- selection */

/* The monitored metric's value in the latest periodic evaluation (fig[split][weights]). */
static double monitored(const trainer *t, const tr_monitor *m)
{
    const tr_eval_figures *f = &t->fig[m->test][m->ema];
    switch (m->metric) {
    case TR_MON_LOSS: return f->loss;
    case TR_MON_ACCURACY: return f->accuracy;
    case TR_MON_TOP_K_ACCURACY: return f->top_k_accuracy;
    case TR_MON_MICRO_F1: return f->micro_f1;
    case TR_MON_MACRO_F1: return f->macro_f1;
    case TR_MON_MSE: return f->mse;
    case TR_MON_MAE: return f->mae;
    }
    return NAN;
}

/* After each periodic evaluation: offer it to the top-k (a checkpoint is then due), step the plateau schedule,
 * and let early stopping decide (Lightning's order: the checkpoint of this evaluation is saved before the stop). */
static void select_after_eval(trainer *t)
{
    const tr_config *cfg = t->cfg;
    tr_select_state *s = &t->p.sel;
    if (t->has_topk && tr_topk_offer(&s->topk, cfg->checkpoint.save_top_k, s->topk_max, t->p.step,
                                     monitored(t, &t->topk_mon), NULL))
        t->best_due = 1;
    if (t->has_plateau) {
        const double before = s->plateau.lr;
        if (tr_plateau_step(cfg, s, monitored(t, &t->plateau_mon)))
            tr_log_message(&t->log, "plateau: %s has not improved for %lld evaluations: lr %.6g -> %.6g after step %lld",
                           cfg->schedule.monitor, (long long)cfg->schedule.patience + 1, before, s->plateau.lr,
                           (long long)t->p.step);
    }
    if (t->has_es && !s->es.stopped) {
        char why[256];
        if (tr_early_stop_update(&s->es, s->es_max, cfg->early_stopping.min_delta, cfg->early_stopping.patience,
                                 t->p.step, monitored(t, &t->es_mon), cfg->early_stopping.monitor, why, sizeof why)) {
            snprintf(t->stop_reason, sizeof t->stop_reason, "early stopping after step %lld: %s", (long long)t->p.step,
                     why);
            tr_log_message(&t->log, "%s", t->stop_reason);
        }
    }
}

/* RUN_DIR/curves.png redrawn from metrics.jsonl (plot.h): after each evaluation and at the end. A failure is
 * logged once and not retried; the run goes on. */
static void draw_curves(trainer *t)
{
    if (!tr_dist_is_main(&t->dist) || t->curves_failed || !t->log_open) return;
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/curves.png", t->run_dir);
    const char *dir = t->run_dir;
    tr_error e = {0};
    if (tr_plot_runs(&dir, 1, path, &e)) {
        t->curves_failed = 1;
        tr_log_message(&t->log, "warning: curves.png is no longer drawn: %s", e.msg);
    }
}

/* A validation pass; its time is left out of the open train window's samples/s. */
static int validate(trainer *t, tr_error *err)
{
    const double e0 = run_now(t);
    const int rc = evaluate(t, run_eval_set(t), t->cfg->eval.split == TR_EVAL_TEST ? "test" : "val", &t->p.val_loss, &t->p.val_accuracy, err);
    if (rc) return rc;
    t->p.has_val = 1;
    t->p.evals_done++;
    select_after_eval(t);
    draw_curves(t);
    t->win_t0 += run_now(t) - e0;
    return TR_OK;
}

/* Add one step's scalars to the run's totals and the open log window. */
static void accumulate(trainer *t, const trs_step_result *r, double lr)
{
    t->p.step++;
    t->last_step_loss = r->loss;
    t->p.samples_total += r->samples;
    t->p.win_loss += r->loss;
    t->p.win_correct += r->correct;
    t->p.win_samples += r->samples;
    t->p.win_steps++;
    run_emit(t, &(tr_event){.kind = TR_EV_STEP, .step = t->p.step, .epoch = t->p.epoch, .loss = r->loss, .lr = lr,
                            .grad_norm = r->grad_norm, .samples = r->samples, .correct = r->correct});
}

/* The EMA's update after a step (ema_due): at ema.start_step (> 0) a fresh copy of the weights. */
static int update_ema(trainer *t, tr_error *err)
{
    const int64_t s = t->p.step, start = t->cfg->ema.start_step;
    return tr_core_update_ema(&t->core, s == start && start > 0, err, "step %lld: ema", (long long)s);
}

/* Report a finished save: its record and event, or its error. A save's outcome is taken on the run's thread, so
 * the sinks see it in order; the record's step and epoch are the checkpoint's. */
static int checkpoint_saved(trainer *t, const tr_ckpt_saved *r, tr_error *err)
{
    if (r->rc) {
        if (err) *err = r->err;
        return r->rc;
    }
    const double seconds = t->saving.stall + r->write_seconds; /* from the snapshot to the renamed directory */
    run_emit(t, &(tr_event){.kind = TR_EV_CHECKPOINT, .step = r->step, .epoch = t->saving.epoch, .reason = r->reason,
                            .path = r->path, .bytes = r->bytes, .seconds = seconds,
                            .stall_seconds = t->saving.stall, .elapsed = t->saving.elapsed});
    if (r->prune_rc) {
        if (err) *err = r->err;
        return r->prune_rc; /* the checkpoint is complete; a prune that failed still ends the run (exit 1) */
    }
    if (t->has_topk) /* the run directory names its best checkpoint (the set as of this checkpoint) */
        return tr_best_write(t->run_dir, t->cfg->checkpoint.monitor, t->p.sel.topk_max, &t->saving.best, err);
    return TR_OK;
}

/* The background save's outcome: with `wait`, after waiting for it (a due save waits for the previous one; the
 * end of the run, a stop and an error wait for it); without, only once it has finished. */
static int settle_checkpoint(trainer *t, int wait, tr_error *err)
{
    tr_ckpt_saved r;
    if (!tr_ckpt_saver_take(&t->saver, wait, &r)) return TR_OK;
    return checkpoint_saved(t, &r, err);
}

/* Save a checkpoint now (unless one of this very step exists): the loop pays for a snapshot of the state; the
 * files are written and old checkpoints pruned on the saver's thread (checkpoint.async), or here. Every rank takes
 * part (its generator state is gathered); rank 0 writes. With `wait`, the save is complete (or failed) on return. */
static int save_checkpoint(trainer *t, const char *reason, int wait, tr_error *err)
{
    int rc = settle_checkpoint(t, 1, err); /* at most one save in flight */
    if (rc || t->last_ckpt_step == t->p.step) return rc;
    phase_change(t);
    const double t0 = run_now(t);
    t->p.elapsed = run_elapsed(t);
    rc = tr_dist_gather_rng(&t->dist, &t->p, t->core.device.cuda ? t->core.device.index : -1, err);
    int phase = TRS_PHASE_OUTSIDE;
    trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
    if (!rc && tr_dist_is_main(&t->dist)) {
        tr_ckpt_snapshot *snap = NULL;
        rc = tr_checkpoint_snapshot(t->cfg, t->core.model, t->core.opt, t->core.ema, &t->p, reason, &snap, err);
        t->saving.elapsed = t->p.elapsed;
        t->saving.epoch = t->p.epoch;
        t->saving.best = t->p.sel.topk; /* checkpoint.save_top_k's set as of this checkpoint: pruning and best.json */
        const tr_topk *best = t->saving.best.n > 0 ? &t->saving.best : NULL;
        if (!rc && t->cfg->checkpoint.async) {
            t->saving.stall = run_now(t) - t0;
            rc = tr_ckpt_saver_start(&t->saver, t->run_dir, t->cfg->checkpoint.keep_last, best, snap, reason, err);
        } else if (!rc) { /* written here: the loop waits for all of it, and seconds = stall */
            tr_ckpt_saved r = {.step = t->p.step, .reason = reason};
            tr_io_save_begin(); /* the fault hook counts the I/O calls of the save and its prune */
            r.rc = tr_checkpoint_write(t->run_dir, snap, r.path, &r.bytes, &r.err);
            if (!r.rc) r.prune_rc = tr_checkpoint_prune(t->run_dir, t->cfg->checkpoint.keep_last, t->p.step, best, &r.err);
            tr_io_save_end();
            tr_checkpoint_snapshot_free(snap);
            t->saving.stall = run_now(t) - t0;
            trs_memory_set_phase(phase, NULL);
            if (!r.rc) {
                t->last_ckpt_elapsed = t->p.elapsed;
                t->last_ckpt_step = t->p.step;
                t->checkpoints_done++;
                t->best_due = 0;
            }
            return checkpoint_saved(t, &r, err);
        }
    }
    trs_memory_set_phase(phase, NULL);
    if (rc) return rc;
    t->last_ckpt_elapsed = t->p.elapsed;
    t->last_ckpt_step = t->p.step;
    t->checkpoints_done++;
    t->best_due = 0;
    return wait ? settle_checkpoint(t, 1, err) : TR_OK;
}

/* ---------------------------------------------------------------------------------------------------- the run */

/* Fill the summary from where the run stands and write summary.json (once; after the loop or on an error). */
static void conclude(trainer *t, int rc, const tr_error *err)
{
    if (t->phase == RUN_REPORTED) return;
    t->phase = RUN_REPORTED;
    if (t->recording_history) { /* recording costs a stack walk per allocation: off once the run is over */
        trs_cuda_memory_record_history(0, TR_SNAPSHOT_MAX_ENTRIES);
        t->recording_history = 0;
    }
    if (tr_ckpt_saver_busy(&t->saver)) { /* an error ended the run while a save was in flight: let it complete */
        tr_error serr = {0};
        if (settle_checkpoint(t, 1, &serr) != TR_OK && t->log_open)
            tr_log_message(&t->log, "%s", serr.msg);
    }
    run_emit(t, &(tr_event){.kind = TR_EV_END, .step = t->p.step, .epoch = t->p.epoch, .rc = rc, .err = err});
}

/* The watchdog ends the loop here (watchdog_stop_due). */
static int watchdog_stop(trainer *t)
{
    t->sum.watchdog_stopped = 1;
    return TR_OK;
}

/* The loop is over before another step: every planned step taken, early stopping, the watchdog, or a stop asked
 * for by a signal (tr_request_stop) or the caller (tr_run_request_stop). */
static int loop_over(trainer *t)
{
    if (run_complete(t) || t->sum.watchdog_stopped) return 1;
    if (!(requests(t) & TR_DIST_STOP)) return 0;
    t->sum.stopped = 1;
    tr_log_message(&t->log, "stop requested: stopping after step %lld", (long long)t->p.step);
    return 1;
}

/*
 * The first step after a resume failed with what the checkpoint's state can cause (a non-finite loss, a libtorch
 * error in the lr or the step; not memory, not a peer): with the config that saved it (tr_checkpoint_same_config:
 * only the run's length may differ), the same state produced finite steps before it was saved, so the checkpoint
 * is what is wrong -- and resuming it again would fail the
 * same way forever. It is set aside (RUN_DIR/checkpoints/step-N.unresumable, kept), so that the next start resumes
 * from the next older checkpoint (tr_run starts it at once in a one-process run). With another config the failure
 * is the config's: reported as it is, nothing renamed. Returns rc, with err saying what was done.
 */
static int first_resumed_step_failed(trainer *t, int rc, trs_status st, tr_error *err)
{
    if (t->resumed_at < 0 || t->p.step != t->resumed_at || !t->resumed_same_config ||
        !(st == TRS_E_NONFINITE || st == TRS_E_RUNTIME || st == TRS_E_INVALID) || !tr_dist_is_main(&t->dist))
        return rc;
    char msg[sizeof err->msg], to[TR_PATH_MAX + 96];
    snprintf(msg, sizeof msg, "%s", err->msg);
    tr_error serr = {0};
    if (tr_checkpoint_set_aside(t->resume_from, "unresumable", to, sizeof to, &serr))
        return tr_error_set(err, rc, "%s (the first step after resuming from %s; setting it aside failed: %s)", msg,
                            t->resume_from, serr.msg);
    t->fell_back = 1;
    return tr_error_set(err, rc,
                        "%s: the first step after resuming from %s failed with the config that saved it, "
                        "so the checkpoint cannot be resumed: it is set aside as %s (kept), and the next start "
                        "resumes from the next older checkpoint",
                        msg, t->resume_from, to);
}

/* A non-finite loss in a run that was training: it diverged. The records so far stay (the open window is logged,
 * marked partial), and the message says where, from what, and what to try. Returns rc. */
static int diverged(trainer *t, int rc, long long step, tr_error *err)
{
    char msg[sizeof err->msg], last[96] = "at its first step";
    snprintf(msg, sizeof msg, "%s", err->msg);
    if (t->p.step > 0 && t->p.step > t->resumed_at)
        snprintf(last, sizeof last, "the last finite loss was %.6g, at step %lld", t->last_step_loss,
                 (long long)t->p.step);
    log_window(t, 1);
    return tr_error_set(err, rc,
                        "%s: the run diverged at step %lld (%s) and stopped; its records so far are in "
                        "metrics.jsonl. Try a lower optim.lr (%g now) or gradient clipping, optim.grad_clip_norm "
                        "(%s)",
                        msg, step, last, t->lr, t->cfg->optim.grad_clip_norm > 0 ? "already on: lower it" : "e.g. 1.0");
}

/* One optimizer step: the batch, the scheduled lr, the train step (only scalars come back), the agreement. */
static int train_step(trainer *t, tr_error *err)
{
    trs_batch b;
    int rc = run_next_batch(t, &b, err);
    if (rc) return rc;
    t->lr = run_scheduled_lr(t);
    const long long step = (long long)t->p.step + 1; /* the one being taken, for messages */
    trs_status st = TRS_OK;
    if ((rc = tr_core_set_lr(&t->core, t->lr, &st, err, "step %lld: lr %g", step, t->lr)))
        return first_resumed_step_failed(t, rc, st, err);
    trs_step_result r;
    const double s0 = run_now(t);
    if ((rc = tr_core_train_step(&t->core, &b, &r, &st, err, "step %lld", step))) {
        if (st == TRS_E_NONFINITE && t->p.step != t->resumed_at) return diverged(t, rc, step, err);
        return first_resumed_step_failed(t, rc, st, err);
    }
    if ((rc = agree_on_step(t, &r, err))) return rc;
    t->p.step_seconds += run_now(t) - s0;
    t->step_seconds_here += run_now(t) - s0;
    accumulate(t, &r, t->lr);
    return TR_OK;
}

/*
 * THE STEP: one optimizer step, then every concern in order, each done when it is due. The requests a
 * multi-process run agrees on (a stop, the watchdog's stop, an interval checkpoint) reach the concerns the way a
 * one-process run's own do (requests), so no concern asks how many processes there are. TR_OK or an error.
 */
static int step_locked(trainer *t, tr_error *err)
{
    int rc = train_step(t, err);
    if (!rc && ema_due(t)) rc = update_ema(t, err);
    if (!rc && log_due(t)) log_window(t, 0);
    if (!rc && eval_due(t)) rc = validate(t, err);
    if (!rc && watchdog_due(t)) watch_memory(t);
    if (!rc && watchdog_stop_due(t)) return watchdog_stop(t);
    if (!rc && saved_due(t)) rc = settle_checkpoint(t, 0, err);
    if (!rc && checkpoint_due(t)) rc = save_checkpoint(t, checkpoint_due(t), 0, err);
    if (!rc && kill_due(t)) raise(SIGKILL); /* `trainrun check`'s resume test: TRAINRUN_KILL_AT_STEP */
    return rc;
}

int tr_run_step(tr_run_state *t, tr_error *err)
{
    if (t->phase != RUN_STEPPING) return t->rc ? t->rc : TR_RUN_DONE;
    if (tr_core_enter(&t->core)) {
        t->phase = RUN_OVER;
        return t->rc = tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
    }
    const int over = loop_over(t);
    const int rc = over ? TR_OK : step_locked(t, err);
    tr_core_leave(&t->core);
    if (over || rc) t->phase = RUN_OVER;
    return over ? TR_RUN_DONE : (t->rc = rc);
}

int tr_run_evaluate(tr_run_state *t, int test, tr_eval_figures *out, tr_error *err)
{
    if (t->phase != RUN_STEPPING)
        return tr_error_set(err, TR_E_CONFIG, "evaluate: the run has ended; evaluate before its last step");
    const tr_dataset *ds = test ? &t->test : &t->val;
    if (ds->n == 0)
        return tr_error_set(err, TR_E_CONFIG, "evaluate: the run has no %s data (%s)", test ? "test" : "validation",
                            test ? "a test set of the config's data with eval.test_at_end, or trainrun_run_set_data "
                                   "TRAINRUN_TEST"
                                 : "data.val_size, or trainrun_run_set_data TRAINRUN_VAL");
    if (tr_core_enter(&t->core))
        return tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
    /* the scheduled pass itself (eval mode, no_grad, eval.weights, an eval record and event), left out of the
     * train window's samples/s; model selection and early stopping follow only the scheduled evaluations */
    const double e0 = run_now(t);
    const int rc = evaluate(t, ds, test ? "test" : "val", NULL, NULL, err);
    t->win_t0 += run_now(t) - e0;
    tr_core_leave(&t->core);
    if (!rc && out) *out = t->fig[test][t->cfg->eval.weights == TR_WEIGHTS_EMA ? 1 : 0];
    return rc;
}

static int finish_locked(trainer *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    tr_summary *sum = &t->sum;
    const int early = sum->stopped || sum->watchdog_stopped;
    /* The checkpoint keeps the open log window, so a resumed run's records equal an uninterrupted run's; the
     * partial window is logged after it, for the people watching this process. */
    int rc = TR_OK;
    report_growth(t, sum->watchdog_stopped ? "limit" : "end", 0); /* the loop's last word on memory */
    if (cfg->checkpoint.at_end || early)
        rc = save_checkpoint(t, sum->watchdog_stopped ? "watchdog" : sum->stopped ? "signal" : "end", 1, err);
    else
        rc = settle_checkpoint(t, 1, err); /* the last interval save, still in flight */
    if (rc) goto out;
    if (early) log_window(t, 1);
    else if (t->p.sel.es.stopped) log_window(t, 0); /* early stopping ended the run here: its last window, whole */
    sum->train_seconds = run_elapsed(t);
    sum->samples_per_s = t->p.step_seconds > 0 ? (double)t->p.samples_total / t->p.step_seconds : 0.0;
    if (t->dist.pg) {
        trs_dist_stats(t->dist.pg, &sum->allreduce_seconds, NULL, NULL, NULL);
        sum->allreduce_seconds -= t->allreduce0; /* the loop's: set-up's agreement waits for the slowest rank */
        sum->allreduce_share = t->step_seconds_here > 0 ? sum->allreduce_seconds / t->step_seconds_here : 0.0;
    }
    tr_memory m;
    if (tr_memory_read(&t->core.device, &m) == TR_OK) {
        sum->final_bytes = m.allocated;
        sum->peak_bytes = m.peak;
        sum->final_reserved_bytes = m.reserved;
        sum->final_rss_bytes = m.rss;
    }
    trs_memory_stats ms; /* the process's: the CPU allocator's peak reserved, the peak resident set */
    if (trs_memory_stats_get(&ms) == TRS_OK) {
        sum->peak_reserved_bytes = t->core.device.cuda ? -1 : ms.peak_reserved_bytes;
        sum->peak_rss_bytes = ms.peak_rss_bytes;
    }
    if (!early) { /* the final parameters' digest (the trace's last lines: one per state_dict entry too) */
        tr_event ev = {.kind = TR_EV_TRAINED, .step = t->p.step, .epoch = t->p.epoch};
        trs_model_digest(t->core.model, TRS_DIGEST_PARAMS, &ev.crc, &ev.abs_sum, NULL);
        tr_param_digest *params = NULL;
        tr_error perr = {0};
        if (t->trace && tr_param_digests(t->core.model, &params, &ev.n_params, &perr) != TR_OK)
            tr_log_message(&t->log, "trace: no per-tensor records: %s", perr.msg);
        ev.params = params;
        run_emit(t, &ev);
        free(params);
    }
    if (!early && t->test.n > 0) {
        rc = evaluate(t, &t->test, "test", &sum->test_loss, &sum->test_accuracy, err);
        if (rc) goto out;
        sum->has_test = 1;
        sum->test_samples = t->test.n;
    }
    draw_curves(t);
    rc = sum->watchdog_stopped ? TR_E_WATCHDOG : sum->stopped ? TR_E_SIGNAL : TR_OK;
out:
    conclude(t, rc, err);
    return t->rc = rc;
}

int tr_run_finish(tr_run_state *t, tr_error *err)
{
    if (t->phase >= RUN_FINISHED) return t->rc;
    t->phase = RUN_FINISHED;
    if (tr_core_enter(&t->core)) {
        const int rc = tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
        conclude(t, rc, err);
        return t->rc = rc;
    }
    const int rc = finish_locked(t, err);
    tr_core_leave(&t->core);
    return rc;
}

void tr_run_request_stop(tr_run_state *t) { t->stop = 1; }

void tr_run_set_event_hook(tr_run_state *t, tr_run_event_fn fn, void *ctx)
{
    t->on_event = fn;
    t->event_ctx = ctx;
}

const tr_summary *tr_run_summary(const tr_run_state *t) { return &t->sum; }

int64_t tr_run_total_steps(const tr_run_state *t) { return t->total_steps; }

int tr_run_close(tr_run_state *t, int rc, const tr_error *err, tr_summary *sum_out)
{
    if (!t) {
        if (sum_out) memset(sum_out, 0, sizeof *sum_out);
        return rc;
    }
    conclude(t, rc, err);
    tr_torch_enter(NULL, 0);
    run_teardown(t);
    tr_torch_leave(NULL, 0);
    if (sum_out) *sum_out = t->sum;
    free(t);
    return rc;
}

int tr_run_memory_growth(tr_run_state *t, tr_mem_growth **out, size_t *n, tr_error *err)
{
    *out = NULL;
    *n = 0;
    if (!t->mem_base.taken) return TR_OK;
    tr_memsnap cur = {0};
    const int rc = tr_memsnap_take(&cur, t->p.step, err);
    if (rc) return rc;
    int oom = 0;
    *n = tr_memsnap_diff(&t->mem_base, &cur, out, &oom);
    tr_memsnap_free(&cur);
    return oom ? tr_error_set(err, TR_E_RUNTIME, "memory growth: out of memory") : TR_OK;
}

int tr_run(const tr_config *cfg, tr_summary *sum, tr_error *err)
{
    stop_requested = 0;
    for (;;) {
        tr_run_state *run = NULL;
        int rc = tr_run_open(cfg, NULL, &run, err);
        while (rc == TR_OK) rc = tr_run_step(run, err);
        if (rc == TR_RUN_DONE) rc = tr_run_finish(run, err);
        /* the first step after the resume failed and its checkpoint was set aside (first_resumed_step_failed):
         * one process starts again at once, from the next older checkpoint (each retry sets one aside, so this
         * ends); the ranks of a multi-process run leave that to the next start */
        const int again = rc != TR_OK && run && run->fell_back && run->dist.world_size == 1 && !stop_requested;
        if (again) tr_log_message(&run->log, "%s; starting again", err->msg);
        rc = tr_run_close(run, rc, err, sum);
        if (!again) return rc;
        memset(err, 0, sizeof *err);
    }
}
