/*
 * run_events.c -- a run's event path (event.h): every event goes, in this order, to metrics.jsonl and the console
 * (log.c), the trace (trace.c), TensorBoard's event file (tensorboard.c, log.tensorboard), the embedding API's hook,
 * data.cache: disk's write outcomes, and the summary (summary.c). A new output is one more entry in `sinks`.
 * curves.png, drawn from metrics.jsonl after an evaluation and at the end, is here too (run_draw_curves).
 */
#include "run_internal.h"
#include "trace.h"

static void log_sink(tr_run_state *t, const tr_event *ev) { tr_log_event(&t->sinks.log, ev); }

static void trace_sink(tr_run_state *t, const tr_event *ev)
{
    if (t->sinks.trace) tr_trace_event(t->sinks.trace, ev);
}

/* log.tensorboard, on the main process: opened at the run's first event (a resumed run's is its resume, which says
 * the step it continues from), so a run that fails in set-up or is already complete leaves no file. */
static void tensorboard_sink(tr_run_state *t, const tr_event *ev)
{
    if (!t->cfg->log.tensorboard || !tr_dist_is_main(&t->dist) || !t->sinks.log_open) return;
    if (!t->sinks.tb_tried) {
        t->sinks.tb_tried = 1;
        tr_error err = {0};
        const int64_t from = ev->kind == TR_EV_RESUME ? ev->step : 0;
        if (tr_tb_open(&t->sinks.tb, t->dir.path, t->cfg, from, !t->dir.resume_from[0], &t->core.device, NULL, &err))
            tr_log_message(&t->sinks.log, "warning: log.tensorboard: %s; the run goes on without TensorBoard events",
                           err.msg);
    }
    if (tr_tb_event(&t->sinks.tb, ev)) tr_log_message(&t->sinks.log, "warning: %s", t->sinks.tb.warning);
}

/* tr_run_set_event_hook's function (the embedding API's queue). */
static void hook_sink(tr_run_state *t, const tr_event *ev)
{
    if (t->sinks.on_event) t->sinks.on_event(t->sinks.event_ctx, ev);
}

/* data.cache: disk: each image set's cache file is written by the thread that decodes its last sample (the loader's,
 * during training); what came of it is said here, on the run's thread, at the first event after. */
static void data_cache_sink(tr_run_state *t, const tr_event *ev)
{
    (void)ev;
    if (t->cfg->data.cache != TR_IMAGE_CACHE_DISK) return;
    tr_dataset *const sets[] = {&t->train, &t->val, &t->test};
    static const char *const names[] = {"training", "validation", "test"};
    for (int i = 0; i < 3; i++) {
        char line[4 * TR_PATH_MAX + 64];
        int warn = 0;
        if (tr_image_disk_outcome(sets[i]->images, line, sizeof line, &warn))
            tr_log_message(&t->sinks.log, "%s: %s: %s", warn ? "warning: data.cache: disk" : "data", names[i], line);
    }
}

void run_emit(tr_run_state *t, const tr_event *ev)
{
    static void (*const sinks[])(tr_run_state *, const tr_event *) = {log_sink,  trace_sink,      tensorboard_sink,
                                                                 hook_sink, data_cache_sink, run_summary_event};
    for (size_t i = 0; i < sizeof sinks / sizeof *sinks; i++) sinks[i](t, ev);
}

/* RUN_DIR/curves.png (tr_run_dir_draw_curves): after each evaluation and at the end. */
void run_draw_curves(tr_run_state *t)
{
    if (tr_dist_is_main(&t->dist) && t->sinks.log_open)
        tr_run_dir_draw_curves(t->dir.path, &t->sinks.curves_failed, &t->sinks.log);
}
