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

/* tr_run_set_event_hook's function: the steps, the evaluations of the weights eval.weights reports, the
 * checkpoints and the watchdog's reports, as tr_run_events. */
static void hook_sink(trainer *t, const tr_event *ev)
{
    if (!t->on_event) return;
    tr_run_event e = {.step = ev->step, .epoch = ev->epoch};
    switch (ev->kind) {
    case TR_EV_STEP:
        e = (tr_run_event){.kind = TR_RUN_EV_STEP, .step = ev->step, .epoch = ev->epoch, .loss = ev->loss,
                           .lr = ev->lr, .grad_norm = ev->grad_norm, .samples = ev->samples, .correct = ev->correct,
                           .accuracy = ev->samples ? (double)ev->correct / (double)ev->samples : 0.0};
        break;
    case TR_EV_EVAL:
        if (!ev->reported) return;
        e = (tr_run_event){.kind = TR_RUN_EV_EVAL, .step = ev->step, .epoch = ev->epoch, .split = ev->split,
                           .loss = ev->loss, .correct = ev->correct, .samples = ev->samples,
                           .accuracy = ev->accuracy, .seconds = ev->seconds};
        break;
    case TR_EV_CHECKPOINT:
        e = (tr_run_event){.kind = TR_RUN_EV_CHECKPOINT, .step = ev->step, .epoch = ev->epoch, .reason = ev->reason,
                           .path = ev->path, .bytes = ev->bytes, .seconds = ev->seconds};
        break;
    case TR_EV_WATCHDOG:
        e = (tr_run_event){.kind = TR_RUN_EV_WATCHDOG, .step = ev->step, .epoch = ev->epoch,
                           .watchdog = ev->watchdog};
        break;
    default: return;
    }
    t->on_event(t->event_ctx, &e);
}

void run_emit(trainer *t, const tr_event *ev)
{
    static void (*const sinks[])(trainer *, const tr_event *) = {log_sink, trace_sink, hook_sink, run_summary_event};
    for (size_t i = 0; i < sizeof sinks / sizeof *sinks; i++) sinks[i](t, ev);
}
