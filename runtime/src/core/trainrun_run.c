/*
 * trainrun_run.c -- the embedding API's runs (trainrun.h, runs): a whole training run as configured, driven a
 * step at a time over run.c, with its events queued for the caller.
 */
#include "trainrun_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

/* ================================================================================================ runs */

/* An event as queued during a step, with its strings copied (the run's are gone after the step). */
typedef struct queued_event {
    trainrun_event ev;
    char split[16], reason[16], path[TR_PATH_MAX + 64];
} queued_event;

struct trainrun_run {
    tr_config cfg;
    tr_error err;
    tr_run_state *state;        /* NULL until the first step                               */
    trainrun_data *data[4];     /* by trainrun_split                                       */
    trainrun_event_fn fn;
    void *ctx;
    tr_api_log log;             /* trainrun_run_set_log's function                         */
    tr_clock clock;             /* trainrun_run_set_clock's clock (zero: the monotonic clock) */
    queued_event *events;       /* the last step's events                                  */
    size_t n_events, cap_events, next_event;
    int nomem_events;           /* an event could not be queued                            */
    int ended;                  /* no more steps: end_rc says how                          */
    int end_rc;                 /* TRAINRUN_DONE or the error                              */
    int status;                 /* TRAINRUN_OK, _E_STOPPED or _E_WATCHDOG once ended with DONE */
    volatile sig_atomic_t stop;
};

static int run_open(const char *path, const char *yaml, const char *const *overrides, int n, trainrun_run **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    trainrun_run *r = calloc(1, sizeof *r);
    if (!(*out = r)) return TRAINRUN_E_NOMEM;
    const int rc = tr_api_load_config(&r->cfg, path, yaml, overrides, n, &r->err);
    if (rc) {
        r->ended = 1;
        r->end_rc = rc;
    }
    return rc;
}

int trainrun_run_open(const char *config_path, const char *const *overrides, int n_overrides, trainrun_run **out)
{
    if (!config_path && out) *out = NULL;
    if (!config_path) return TRAINRUN_E_INVALID;
    return run_open(config_path, NULL, overrides, n_overrides, out);
}

int trainrun_run_open_yaml(const char *yaml, const char *const *overrides, int n_overrides, trainrun_run **out)
{
    if (!yaml && out) *out = NULL;
    if (!yaml) return TRAINRUN_E_INVALID;
    return run_open(NULL, yaml, overrides, n_overrides, out);
}

int trainrun_run_set_data(trainrun_run *run, int split, trainrun_data *data)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!data) return tr_api_invalid(&run->err, "set_data: data is NULL");
    if (split != TRAINRUN_TRAIN && split != TRAINRUN_VAL && split != TRAINRUN_TEST)
        return tr_error_set(&run->err, TRAINRUN_E_INVALID, "set_data: split %d is not TRAINRUN_TRAIN, _VAL or _TEST",
                            split);
    if (data->fn && split != TRAINRUN_TRAIN)
        return tr_api_invalid(&run->err, "set_data: a batch callback supplies training data only");
    if (!data->fn && data->ds.n == 0) return tr_api_invalid(&run->err, "set_data: the data source failed to open");
    if (run->state || run->ended) return tr_api_invalid(&run->err, "set_data: the run has already started");
    if (run->data[split]) atomic_fetch_sub(&run->data[split]->users, 1);
    atomic_fetch_add(&data->users, 1);
    run->data[split] = data;
    return TRAINRUN_OK;
}

int trainrun_run_set_callback(trainrun_run *run, trainrun_event_fn fn, void *ctx)
{
    if (!run) return TRAINRUN_E_INVALID;
    run->fn = fn;
    run->ctx = ctx;
    return TRAINRUN_OK;
}

int trainrun_run_set_log(trainrun_run *run, trainrun_log_fn fn, void *ctx)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (run->state || run->ended) return tr_api_invalid(&run->err, "set_log: the run has already started");
    run->log = (tr_api_log){.set = 1, .fn = fn, .ctx = ctx};
    return TRAINRUN_OK;
}

int trainrun_run_set_clock(trainrun_run *run, trainrun_clock_fn now, void *ctx)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (run->state || run->ended) return tr_api_invalid(&run->err, "set_clock: the run has already started");
    run->clock = (tr_clock){.now = now, .ctx = now ? ctx : NULL};
    return TRAINRUN_OK;
}

/* The run's event hook (called under the libtorch lock): copy the event the API reports (tr_api_event_of) into the
 * queue, with its strings. */
static void queue_event(void *ctx, const tr_event *e)
{
    trainrun_run *r = ctx;
    trainrun_event ev;
    if (!tr_api_event_of(e, &ev)) return;
    if (r->n_events == r->cap_events) {
        const size_t cap = r->cap_events ? 2 * r->cap_events : 8;
        queued_event *q = realloc(r->events, cap * sizeof *q);
        if (!q) {
            r->nomem_events = 1;
            return;
        }
        r->events = q;
        r->cap_events = cap;
    }
    queued_event *q = &r->events[r->n_events++];
    memset(q, 0, sizeof *q);
    if (ev.split) snprintf(q->split, sizeof q->split, "%s", ev.split);
    if (ev.reason) snprintf(q->reason, sizeof q->reason, "%s", ev.reason);
    if (ev.path) snprintf(q->path, sizeof q->path, "%s", ev.path);
    ev.split = ev.reason = ev.path = NULL; /* event_of points them at the copies */
    q->ev = ev;
}

/* Point an event's strings at its queue entry's copies. */
static trainrun_event event_of(queued_event *q)
{
    trainrun_event ev = q->ev;
    if (q->split[0]) ev.split = q->split;
    if (q->reason[0]) ev.reason = q->reason;
    if (q->path[0]) ev.path = q->path;
    return ev;
}

/* Events go to the callback, outside the lock, once the step is over; without one they wait for next_event. */
static void deliver_events(trainrun_run *r)
{
    if (!r->fn) return;
    while (r->next_event < r->n_events) {
        const trainrun_event ev = event_of(&r->events[r->next_event++]);
        r->fn(r->ctx, &ev);
    }
}

/* Adapts the caller's batch callback to the run's: checks the view it fills. */
static int callback_batch(void *ctx, int64_t step, int64_t batch_size, trs_batch *b, tr_error *err)
{
    const trainrun_data *d = ctx;
    trainrun_batch v;
    memset(&v, 0, sizeof v);
    if (d->fn(d->ctx, step, batch_size, &v) != 0)
        return tr_error_set(err, TR_E_RUNTIME, "step %lld: the batch callback failed", (long long)step + 1);
    if (tr_api_batch_from_view(&v, b, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return tr_error_set(err, TR_E_RUNTIME, "step %lld: the batch callback's %s", (long long)step + 1, msg);
    }
    if (b->ndim == 3)
        return tr_error_set(err, TR_E_RUNTIME, "step %lld: the batch callback gave a batch of ndim 3; a callback's "
                            "batches are [N, D] or [N, C, H, W]", (long long)step + 1);
    const int64_t per = b->ndim == 2 ? b->shape[1] : b->shape[1] * b->shape[2] * b->shape[3];
    const int shape_ok = b->ndim == 2 ? per == d->c * d->h * d->w
                                      : b->shape[1] == d->c && b->shape[2] == d->h && b->shape[3] == d->w;
    if (!shape_ok || b->shape[0] > batch_size)
        return tr_error_set(err, TR_E_RUNTIME, "step %lld: the batch callback gave %lld samples of %lld features; "
                            "expected at most %lld of [%lld, %lld, %lld]", (long long)step + 1,
                            (long long)b->shape[0], (long long)per, (long long)batch_size, (long long)d->c,
                            (long long)d->h, (long long)d->w);
    return TR_OK;
}

/* The first step: the run's set-up, on the caller's data if any. */
static int run_start(trainrun_run *r)
{
    tr_run_data data;
    memset(&data, 0, sizeof data);
    data.log = tr_api_log_sink(&r->log);
    data.clock = r->clock;
    data.stop = &r->stop; /* trainrun_run_stop: seen wherever the run checks for a stop, the rendezvous included */
    const trainrun_data *train = r->data[TRAINRUN_TRAIN];
    if (train) {
        if (train->fn) {
            data.next_batch = callback_batch;
            data.ctx = (void *)train;
            data.c = train->c;
            data.h = train->h;
            data.w = train->w;
        } else {
            data.train = &train->ds;
            data.train_from_files = train->from_files; /* open_data's files: their black pixel pads */
        }
        if (r->data[TRAINRUN_VAL]) data.val = &r->data[TRAINRUN_VAL]->ds;
        if (r->data[TRAINRUN_TEST]) data.test = &r->data[TRAINRUN_TEST]->ds;
    } else if (r->data[TRAINRUN_VAL] || r->data[TRAINRUN_TEST]) {
        return tr_api_invalid(&r->err, "validation or test data without training data: set TRAINRUN_TRAIN too");
    }
    const int rc = tr_run_open(&r->cfg, &data, &r->state, &r->err);
    if (!r->state) return TRAINRUN_E_NOMEM;
    tr_run_set_event_hook(r->state, queue_event, r);
    return rc;
}

/* The run has ended with rc (the loop's status or an error): the summary is complete and summary.json written
 * from here on, so that trainrun_run_summary reports an error's end too (its run directory, rank). */
static int run_end(trainrun_run *r, int rc)
{
    r->ended = 1;
    tr_run_end(r->state, rc, &r->err);
    if (rc == TR_OK || rc == TR_E_SIGNAL || rc == TR_E_WATCHDOG) {
        r->status = rc == TR_E_SIGNAL ? TRAINRUN_E_STOPPED : rc;
        rc = TRAINRUN_DONE;
    }
    return r->end_rc = rc;
}

/* One step, or the end (tr_run_finish). A first step after a resume that failed and set its checkpoint aside
 * starts the run again from the next older checkpoint, as `trainrun CONFIG` does (tr_run_restart_due). */
static int step_or_end(trainrun_run *r)
{
    for (;;) {
        int rc = r->state ? TR_OK : run_start(r);
        if (!r->state) return run_end(r, rc);
        if (!rc) rc = tr_run_step(r->state, &r->err);
        if (rc == TR_OK) return TRAINRUN_OK;
        if (rc == TR_RUN_DONE) rc = tr_run_finish(r->state, &r->err);
        if (!tr_run_restart_due(r->state, rc, &r->err)) return run_end(r, rc);
        tr_run_close(r->state, rc, &r->err, NULL);
        r->state = NULL;
        memset(&r->err, 0, sizeof r->err);
    }
}

int trainrun_run_step(trainrun_run *run)
{
    if (!run) return TRAINRUN_E_INVALID;
    run->n_events = run->next_event = 0;
    if (run->ended) return run->end_rc;
    const int rc = step_or_end(run);
    if (run->nomem_events) {
        run->nomem_events = 0;
        tr_error_set(&run->err, TRAINRUN_E_NOMEM, "out of memory queueing events: some were dropped");
    }
    deliver_events(run);
    return rc;
}

int trainrun_run_next_event(trainrun_run *run, trainrun_event *event)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!event) return tr_api_invalid(&run->err, "next_event: event is NULL");
    if (run->next_event >= run->n_events) return TRAINRUN_DONE;
    *event = event_of(&run->events[run->next_event++]);
    return TRAINRUN_OK;
}

int trainrun_run_wait(trainrun_run *run)
{
    if (!run) return TRAINRUN_E_INVALID;
    int rc;
    while ((rc = trainrun_run_step(run)) == TRAINRUN_OK) {
    }
    return rc == TRAINRUN_DONE ? run->status : rc;
}

int trainrun_run_stop(trainrun_run *run)
{
    if (!run) return TRAINRUN_E_INVALID;
    run->stop = 1;
    return TRAINRUN_OK;
}

int trainrun_run_evaluate(trainrun_run *run, int split, trainrun_eval_result *out)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!out) return tr_api_invalid(&run->err, "evaluate: out is NULL");
    if (split != TRAINRUN_VAL && split != TRAINRUN_TEST)
        return tr_error_set(&run->err, TRAINRUN_E_INVALID,
                            "evaluate: split %d is not TRAINRUN_VAL (2) or "
                            "TRAINRUN_TEST (3)",
                            split);
    if (run->ended) return tr_api_invalid(&run->err, "evaluate: the run has ended");
    run->n_events = run->next_event = 0;
    int rc = TR_OK;
    if (!run->state && (rc = run_start(run))) return run_end(run, rc);
    memset(&run->err, 0, sizeof run->err);
    tr_eval_figures f;
    memset(&f, 0, sizeof f);
    rc = tr_run_evaluate(run->state, split == TRAINRUN_TEST, &f, &run->err);
    deliver_events(run);
    if (rc) return rc;
    *out = tr_api_eval_result(&f);
    return TRAINRUN_OK;
}

int trainrun_run_summary(trainrun_run *run, trainrun_summary *out)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!out) return tr_api_invalid(&run->err, "summary: out is NULL");
    if (!run->ended || !run->state)
        return tr_api_invalid(&run->err, "summary: the run has not ended (step it to TRAINRUN_DONE first)");
    const tr_summary *s = tr_run_summary(run->state);
    memset(out, 0, sizeof *out);
    out->status = run->end_rc == TRAINRUN_DONE ? run->status : run->end_rc;
    out->already_complete = s->already_complete;
    snprintf(out->run_dir, sizeof out->run_dir, "%s", s->run_dir);
    out->params = s->params;
    out->steps = s->steps;
    out->epochs = s->epochs;
    out->train_seconds = s->train_seconds;
    out->samples_per_s = s->samples_per_s;
    out->last_loss = s->last_loss;
    out->has_val = s->has_val;
    out->val_loss = s->val_loss;
    out->val_accuracy = s->val_accuracy;
    out->has_test = s->has_test;
    out->test_loss = s->test_loss;
    out->test_accuracy = s->test_accuracy;
    out->test_samples = s->test_samples;
    out->baseline_bytes = s->baseline_bytes;
    out->final_bytes = s->final_bytes;
    out->peak_bytes = s->peak_bytes;
    out->growth_per_step = s->growth_per_step;
    out->final_reserved_bytes = s->final_reserved_bytes;
    out->peak_reserved_bytes = s->peak_reserved_bytes;
    out->final_rss_bytes = s->final_rss_bytes;
    out->peak_rss_bytes = s->peak_rss_bytes;
    snprintf(out->device, sizeof out->device, "%s", s->device);
    out->epochs_completed = s->epochs_completed;
    out->baseline_step = s->baseline_step;
    out->warmup_steps = run->cfg.watchdog.warmup_steps;
    snprintf(out->eval_split, sizeof out->eval_split, "%s", run->cfg.eval.split == TR_EVAL_TEST ? "test" : "val");
    out->task = s->task;
    out->top_k = s->top_k;
    const tr_eval_figures *figs[] = {&s->val_live, &s->val_ema, &s->test_live, &s->test_ema};
    int *has[] = {&out->has_val_live, &out->has_val_ema, &out->has_test_live, &out->has_test_ema};
    trainrun_eval_result *res[] = {&out->val_live, &out->val_ema, &out->test_live, &out->test_ema};
    for (int i = 0; i < 4; i++) {
        *has[i] = figs[i]->has;
        if (figs[i]->has) *res[i] = tr_api_eval_result(figs[i]);
    }
    out->world_size = s->world_size;
    out->rank = s->rank;
    out->allreduce_seconds = s->allreduce_seconds;
    out->allreduce_share = s->allreduce_share;
    out->early_stopped = s->early_stopped;
    snprintf(out->stop_reason, sizeof out->stop_reason, "%s", s->stop_reason);
    out->best_step = s->best_step;
    out->best_score = s->best_score;
    snprintf(out->best_monitor, sizeof out->best_monitor, "%s", s->best_monitor);
    return TRAINRUN_OK;
}


int trainrun_run_memory_growth(trainrun_run *run, trainrun_memory_growth *out, size_t cap, size_t *count)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!count) return tr_api_invalid(&run->err, "memory_growth: count is NULL");
    if (!out && cap > 0) return tr_api_invalid(&run->err, "memory_growth: out is NULL with cap > 0");
    *count = 0;
    if (!run->state) return TRAINRUN_OK;
    tr_mem_growth *g = NULL;
    size_t n = 0;
    if (tr_run_memory_growth(run->state, &g, &n, &run->err))
        return tr_error_set(&run->err, TRAINRUN_E_NOMEM, "memory_growth: %s", run->err.msg);
    tr_api_copy_growth(g, n, out, cap);
    free(g);
    *count = n;
    return TRAINRUN_OK;
}

const char *trainrun_run_errmsg(const trainrun_run *run) { return run ? run->err.msg : tr_api_null_handle; }

int trainrun_run_close(trainrun_run *run)
{
    if (!run) return TRAINRUN_OK;
    /* A run closed before its end is reported as interrupted (summary.json), without a checkpoint. */
    const int rc = !run->ended ? TR_E_SIGNAL : run->end_rc == TRAINRUN_DONE ? TR_OK : run->end_rc;
    tr_run_close(run->state, rc, &run->err, NULL);
    for (size_t i = 0; i < sizeof run->data / sizeof *run->data; i++)
        if (run->data[i]) atomic_fetch_sub(&run->data[i]->users, 1);
    free(run->events);
    free(run);
    return TRAINRUN_OK;
}
