/*
 * run_events.c -- a run's event path (event.h): every event goes, in this order, to metrics.jsonl and the console
 * (log.c), the trace (trace.c), TensorBoard's event file (tensorboard.c, log.tensorboard), the embedding API's hook,
 * data.cache: disk's write outcomes, and the summary (summary.c). A new output is one more entry in `sinks`.
 */
#include "run_internal.h"
#include "trace.h"

static void log_sink(trainer *t, const tr_event *ev) { tr_log_event(&t->log, ev); }

static void trace_sink(trainer *t, const tr_event *ev)
{
    if (t->trace) tr_trace_event(t->trace, ev);
}

/* log.tensorboard, on the main process: opened at the run's first event (a resumed run's is its resume, which says
 * the step it continues from), so a run that fails in set-up or is already complete leaves no file. */
static void tensorboard_sink(trainer *t, const tr_event *ev)
{
    if (!t->cfg->log.tensorboard || !tr_dist_is_main(&t->dist) || !t->log_open) return;
    if (!t->tb_tried) {
        t->tb_tried = 1;
        tr_error err = {0};
        const int64_t from = ev->kind == TR_EV_RESUME ? ev->step : 0;
        if (tr_tb_open(&t->tb, t->run_dir, t->cfg, from, !t->resume_from[0], &t->core.device, NULL, &err))
            tr_log_message(&t->log, "warning: log.tensorboard: %s; the run goes on without TensorBoard events",
                           err.msg);
    }
    if (tr_tb_event(&t->tb, ev)) tr_log_message(&t->log, "warning: %s", t->tb.warning);
}

/* tr_run_set_event_hook's function (the embedding API's queue). */
static void hook_sink(trainer *t, const tr_event *ev)
{
    if (t->on_event) t->on_event(t->event_ctx, ev);
}

/* data.cache: disk: each image set's cache file is written by the thread that decodes its last sample (the loader's,
 * during training); what came of it is said here, on the run's thread, at the first event after. */
static void data_cache_sink(trainer *t, const tr_event *ev)
{
    (void)ev;
    if (t->cfg->data.cache != TR_IMAGE_CACHE_DISK) return;
    tr_dataset *const sets[] = {&t->train, &t->val, &t->test};
    static const char *const names[] = {"training", "validation", "test"};
    for (int i = 0; i < 3; i++) {
        char line[4 * TR_PATH_MAX + 64];
        int warn = 0;
        if (tr_image_disk_outcome(sets[i]->images, line, sizeof line, &warn))
            tr_log_message(&t->log, "%s: %s: %s", warn ? "warning: data.cache: disk" : "data", names[i], line);
    }
}

void run_emit(trainer *t, const tr_event *ev)
{
    static void (*const sinks[])(trainer *, const tr_event *) = {log_sink,  trace_sink,      tensorboard_sink,
                                                                 hook_sink, data_cache_sink, run_summary_event};
    for (size_t i = 0; i < sizeof sinks / sizeof *sinks; i++) sinks[i](t, ev);
}
