/*
 * run_events.c -- a run's event path (event.h): every event goes, in this order, to metrics.jsonl and the console
 * (log.c), the trace (trace.c), the embedding API's hook, and the summary (summary.c). A new output is one more
 * entry in `sinks`.
 */
#include "run_internal.h"
#include "trace.h"

static void log_sink(trainer *t, const tr_event *ev) { tr_log_event(&t->log, ev); }

static void trace_sink(trainer *t, const tr_event *ev)
{
    if (t->trace) tr_trace_event(t->trace, ev);
}

/* tr_run_set_event_hook's function (the embedding API's queue). */
static void hook_sink(trainer *t, const tr_event *ev)
{
    if (t->on_event) t->on_event(t->event_ctx, ev);
}

void run_emit(trainer *t, const tr_event *ev)
{
    static void (*const sinks[])(trainer *, const tr_event *) = {log_sink, trace_sink, hook_sink, run_summary_event};
    for (size_t i = 0; i < sizeof sinks / sizeof *sinks; i++) sinks[i](t, ev);
}
