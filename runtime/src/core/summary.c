/*
 * summary.c -- what a run reports when it ends: tr_summary filled from where the run stands, and
 * RUN_DIR/summary.json written from it with cJSON through the atomic path (io.h).
 *
 * summary.json (one object on one line; keys in this order, those in brackets only when they apply):
 *   status ("completed", "watchdog", "interrupted", "peer_failed", "error"), params, steps, epochs,
 *   epochs_completed, train_seconds, samples_per_s, [tokens_per_s], last_loss, baseline_bytes, baseline_step,
 *   final_bytes, peak_bytes, peak_reserved_bytes, final_rss_bytes, peak_rss_bytes, memory_cache, growth_per_step,
 *   device, [final_reserved_bytes], [world_size, allreduce_seconds, allreduce_share], [val_loss, val_accuracy],
 *   [test_loss, test_accuracy, test_samples], [val_metrics, val_ema_metrics, test_metrics, test_ema_metrics:
 *   {samples, loss, [bpc|bpb|bits_per_token, perplexity], the task's figures, step}], threads {intra_op, inter_op,
 *   blas}, malloc_tuning, prefetch, [data_cache_disk {train|val|test: {read, written, path}}: data.cache: disk, the
 *   samples each set read from its cache file at set-up and wrote to it], [early_stopped, stop_reason],
 *   [best {monitor, step, score, checkpoint}],
 *   [error]. A number that is NaN or infinite is null (JSON has neither).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dist.h"
#include "io.h"
#include "run_internal.h"

/* summary.json's "status" for the run's code: any code but the four named ones is an "error". */
static const char *status_name(int rc)
{
    switch (rc) {
    case TR_OK: return "completed";
    case TR_E_WATCHDOG: return "watchdog";
    case TR_E_SIGNAL: return "interrupted";
    case TR_E_PEER: return "peer_failed";
    default: return "error";
    }
}

/* A number member, printed as metrics.jsonl prints them (%.17g: it reads back as the same double; cJSON's own
 * printing may drop the last digit), or null for NaN and infinities (JSON has neither). */
static void add_number(cJSON *o, const char *key, double v)
{
    char text[32];
    if (!isfinite(v)) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    snprintf(text, sizeof text, "%.17g", v);
    cJSON_AddRawToObject(o, key, text);
}

/* One evaluation's figures: the loss, the language model's bits and perplexity, the task's figures, its step. */
static cJSON *eval_figures(const tr_summary_context *c, const tr_eval_figures *e)
{
    cJSON *o = cJSON_CreateObject();
    add_number(o, "samples", (double)e->samples);
    add_number(o, "loss", e->loss);
    if (c->metrics->bits_name) { /* language modelling: the loss is nats per token */
        add_number(o, c->metrics->bits_name, tr_nats_to_bits(e->loss));
        add_number(o, "perplexity", tr_perplexity(e->loss));
    }
    switch (c->metrics->task) {
    case TR_TASK_CLASSIFY:
        add_number(o, "accuracy", e->accuracy);
        if (c->cfg->eval.top_k > 0) {
            char key[32];
            snprintf(key, sizeof key, "top_%d_accuracy", c->cfg->eval.top_k);
            add_number(o, key, e->top_k_accuracy);
        }
        break;
    case TR_TASK_MULTI_LABEL:
        add_number(o, "subset_accuracy", e->accuracy);
        add_number(o, "micro_f1", e->micro_f1);
        add_number(o, "macro_f1", e->macro_f1);
        break;
    case TR_TASK_REGRESSION:
        add_number(o, "mse", e->mse);
        add_number(o, "mae", e->mae);
        break;
    }
    add_number(o, "step", (double)e->step); /* last: tools match the members before it as text */
    return o;
}

/* summary.json's object (NULL when out of memory). */
static cJSON *summary_json(const tr_summary *s, const tr_summary_context *c, int rc, const char *error)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "status", status_name(rc));
    add_number(o, "params", (double)s->params);
    add_number(o, "steps", (double)s->steps);
    add_number(o, "epochs", (double)s->epochs);
    add_number(o, "epochs_completed", s->epochs_completed);
    add_number(o, "train_seconds", s->train_seconds);
    add_number(o, "samples_per_s", s->samples_per_s);
    if (c->block) /* token data: a sample is a window of block tokens */
        add_number(o, "tokens_per_s", s->samples_per_s * (double)c->block);
    add_number(o, "last_loss", s->last_loss);
    add_number(o, "baseline_bytes", (double)s->baseline_bytes);
    add_number(o, "baseline_step", (double)s->baseline_step);
    add_number(o, "final_bytes", (double)s->final_bytes);
    add_number(o, "peak_bytes", (double)s->peak_bytes);
    add_number(o, "peak_reserved_bytes", (double)s->peak_reserved_bytes);
    add_number(o, "final_rss_bytes", (double)s->final_rss_bytes);
    add_number(o, "peak_rss_bytes", (double)s->peak_rss_bytes);
    cJSON_AddBoolToObject(o, "memory_cache", c->cfg->memory.cache);
    add_number(o, "growth_per_step", s->growth_per_step);
    cJSON_AddStringToObject(o, "device", s->device);
    if (s->final_reserved_bytes >= 0) add_number(o, "final_reserved_bytes", (double)s->final_reserved_bytes);
    if (s->world_size > 1) {
        add_number(o, "world_size", s->world_size);
        add_number(o, "allreduce_seconds", s->allreduce_seconds);
        add_number(o, "allreduce_share", s->allreduce_share);
    }
    if (s->has_val) {
        add_number(o, "val_loss", s->val_loss);
        add_number(o, "val_accuracy", s->val_accuracy);
    }
    if (s->has_test) {
        add_number(o, "test_loss", s->test_loss);
        add_number(o, "test_accuracy", s->test_accuracy);
        add_number(o, "test_samples", (double)s->test_samples);
    }
    const tr_eval_figures *figs[] = {&s->val_live, &s->val_ema, &s->test_live, &s->test_ema};
    static const char *const fig_names[] = {"val_metrics", "val_ema_metrics", "test_metrics", "test_ema_metrics"};
    for (int i = 0; i < 4; i++)
        if (figs[i]->has) cJSON_AddItemToObject(o, fig_names[i], eval_figures(c, figs[i]));
    tr_ckpt_json_add_threads(o);
    cJSON_AddBoolToObject(o, "malloc_tuning", c->malloc_tuning);
    cJSON_AddBoolToObject(o, "prefetch", c->cfg->data.prefetch);
    if (c->cfg->data.cache == TR_IMAGE_CACHE_DISK) { /* samples each set took from / gave to its cache file */
        cJSON *dc = cJSON_AddObjectToObject(o, "data_cache_disk");
        static const char *const names[] = {"train", "val", "test"};
        for (int i = 0; i < 3; i++) {
            const tr_dataset *set = c->sets[i];
            if (!set || !set->images) continue;
            int64_t r = 0, w = 0;
            tr_image_disk_counts(set->images, &r, &w);
            cJSON *e = cJSON_AddObjectToObject(dc, names[i]);
            add_number(e, "read", (double)r);
            add_number(e, "written", (double)w);
            cJSON_AddStringToObject(e, "path", tr_image_disk_path(set->images));
        }
    }
    if (s->early_stopped) {
        cJSON_AddTrueToObject(o, "early_stopped");
        cJSON_AddStringToObject(o, "stop_reason",
                                s->stop_reason[0] ? s->stop_reason : "early stopping (in an earlier process of the run)");
    }
    if (s->best_step >= 0) {
        cJSON *best = cJSON_AddObjectToObject(o, "best");
        char dir[48];
        snprintf(dir, sizeof dir, "checkpoints/step-%010lld", (long long)s->best_step);
        cJSON_AddStringToObject(best, "monitor", s->best_monitor);
        add_number(best, "step", (double)s->best_step);
        add_number(best, "score", s->best_score);
        cJSON_AddStringToObject(best, "checkpoint", dir);
    }
    if ((rc == TR_E_RUNTIME || rc == TR_E_CONFIG) && error) cJSON_AddStringToObject(o, "error", error);
    return o;
}

void tr_summary_memory(tr_summary *s, const tr_device *device)
{
    tr_memory m;
    if (tr_memory_read(device, &m) == TR_OK) {
        s->final_bytes = m.allocated;
        s->peak_bytes = m.peak;
        s->final_reserved_bytes = m.reserved;
        s->final_rss_bytes = m.rss;
    }
    trs_memory_stats ms; /* the process's: the CPU allocator's peak reserved, the peak resident set */
    if (trs_memory_stats_get(&ms) == TRS_OK) {
        s->peak_reserved_bytes = device->cuda ? -1 : ms.peak_reserved_bytes;
        s->peak_rss_bytes = ms.peak_rss_bytes;
    }
}

void tr_summary_write(const char *dir, const tr_summary *s, const tr_summary_context *c, int rc, const char *error,
                      tr_log *log)
{
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    tr_error werr = {0};
    cJSON *o = summary_json(s, c, rc, error);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    const size_t len = text ? strlen(text) : 0;
    char *line = text ? realloc(text, len + 2) : NULL; /* one line, newline-terminated */
    if (!line) {
        free(text);
        tr_error_set(&werr, TR_E_RUNTIME, "%s: out of memory", path);
    } else {
        memcpy(line + len, "\n", 2);
        tr_io_write_file_atomic(path, line, len + 1, &werr);
        free(line);
    }
    if (werr.code && log) tr_log_message(log, "warning: summary not written: %s", werr.msg);
}

/* Fill t->sum from where the run stands; `rc` is the run's status (an error fills the loop's figures too). */
static void fill_summary(tr_run_state *t, int rc)
{
    tr_summary *sum = &t->sum;
    sum->steps = t->p.step;
    sum->epochs = t->core.model ? t->p.epoch + 1 : 0;
    sum->epochs_completed = t->shape.steps_per_epoch > 0 && !t->data.next_batch
                                ? (double)t->p.step / (double)t->shape.steps_per_epoch : 0.0;
    sum->last_loss = t->p.last_loss;
    if (t->clock.start > 0 && rc != TR_OK && rc != TR_E_SIGNAL && rc != TR_E_WATCHDOG) {
        /* an error ended the loop before tr_run_finish filled these: where the run stands, not zeros */
        sum->train_seconds = run_elapsed(t);
        sum->samples_per_s = t->p.step_seconds > 0 ? (double)t->p.samples_total / t->p.step_seconds : 0.0;
        if (t->p.win_steps > 0) sum->last_loss = t->p.win_loss / (double)t->p.win_steps; /* the open window */
        tr_memory m; /* the run's device's, as tr_run_finish reports them */
        if (tr_memory_read(&t->core.device, &m) == TR_OK) {
            sum->final_bytes = m.allocated;
            sum->peak_bytes = m.peak;
        }
    }
    sum->has_val = t->p.has_val;
    sum->val_loss = t->p.val_loss;
    sum->val_accuracy = t->p.val_accuracy;
    sum->val_live = t->eval.fig[0][0];
    sum->val_ema = t->eval.fig[0][1];
    sum->test_live = t->eval.fig[1][0];
    sum->test_ema = t->eval.fig[1][1];
    sum->task = (int)t->eval.metrics.task;
    sum->top_k = t->cfg->eval.top_k;
    sum->early_stopped = t->p.sel.es.stopped;
    snprintf(sum->stop_reason, sizeof sum->stop_reason, "%s", t->sel.stop_reason);
    sum->best_step = t->p.sel.topk.n > 0 ? t->p.sel.topk.step[0] : -1;
    sum->best_score = t->p.sel.topk.n > 0 ? t->p.sel.topk.score[0] : NAN;
    snprintf(sum->best_monitor, sizeof sum->best_monitor, "%s", t->p.sel.topk_metric);
    snprintf(sum->run_dir, sizeof sum->run_dir, "%s", t->dir.path);
    tr_device_name(&t->core.device, sum->device, sizeof sum->device);
    sum->rank = t->dist.rank;
    sum->world_size = t->dist.world_size;
}

void run_summary_event(tr_run_state *t, const tr_event *ev)
{
    if (ev->kind == TR_EV_WATCHDOG && ev->watchdog.event == TR_WD_EV_BASELINE) {
        t->sum.baseline_bytes = ev->watchdog.baseline;
        t->sum.baseline_step = ev->watchdog.step;
    } else if (ev->kind == TR_EV_END) {
        fill_summary(t, ev->rc);
        if (!t->sinks.log_open || !tr_dist_is_main(&t->dist)) return;
        const tr_summary_context c = {.cfg = t->cfg, .block = t->shape.block, .metrics = &t->eval.metrics,
                                      .malloc_tuning = t->malloc_tuning.applied,
                                      .sets = {&t->train, &t->val, &t->test}};
        tr_summary_write(t->dir.path, &t->sum, &c, ev->rc, ev->err ? ev->err->msg : NULL, &t->sinks.log);
    }
}
