/*
 * trainrun.c -- the embedding API (runtime/include/trainrun/trainrun.h) over the run (run.c), the checkpoint code
 * and the shim. Every entry point checks its arguments first, keeps its message in its handle, and returns a
 * status; the shim already keeps C++ exceptions on its side.
 */
#include "trainrun/trainrun.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "device.h"
#include "config.h"
#include "data.h"
#include "error.h"
#include "model_spec.h"
#include "run.h"
#include "trainer_core.h"
#include "trainrun_shim.h"

/* The runtime's internal codes (error.h) are returned through this API as they are: they must stay equal. */
_Static_assert((int)TR_OK == (int)TRAINRUN_OK && (int)TR_E_RUNTIME == (int)TRAINRUN_E_RUNTIME &&
                   (int)TR_E_CONFIG == (int)TRAINRUN_E_CONFIG && (int)TR_E_WATCHDOG == (int)TRAINRUN_E_WATCHDOG &&
                   (int)TR_E_SIGNAL == (int)TRAINRUN_E_STOPPED && (int)TR_E_PEER == (int)TRAINRUN_E_PEER &&
                   (int)TR_E_LOCKED == (int)TRAINRUN_E_LOCKED,
               "error.h's TR_* codes and trainrun.h's TRAINRUN_* codes must agree");

static const char k_null_handle[] = "NULL handle";

const char *trainrun_errstr(int status)
{
    switch (status) {
    case TRAINRUN_OK: return "success";
    case TRAINRUN_E_RUNTIME: return "runtime error";
    case TRAINRUN_E_CONFIG: return "configuration error";
    case TRAINRUN_E_WATCHDOG: return "stopped by the memory watchdog";
    case TRAINRUN_E_STOPPED: return "stopped on request";
    case TRAINRUN_E_INVALID: return "invalid argument";
    case TRAINRUN_E_NOMEM: return "out of memory";
    case TRAINRUN_E_NONFINITE: return "non-finite loss";
    case TRAINRUN_E_PEER: return "another rank of a distributed run failed";
    case TRAINRUN_E_BUSY: return "still in use";
    case TRAINRUN_E_LOCKED: return "the run directory is in use by another process";
    case TRAINRUN_DONE: return "done";
    default: return "unknown status";
    }
}

const char *trainrun_version(void) { return TR_VERSION; }

static int invalid(tr_error *err, const char *msg) { return tr_error_set(err, TRAINRUN_E_INVALID, "%s", msg); }

/* Check a caller's batch view and turn it into the shim's: x FLOAT32 (x) or INT64 (x_ids); y INT64 (class indices)
 * or FLOAT32 (target), or NULL when need_y is 0. TRAINRUN_OK or TRAINRUN_E_INVALID. */
static int batch_view_in(const trainrun_batch *v, trs_batch *b, int need_y, tr_error *err)
{
    if (!v) return invalid(err, "batch: NULL");
    if (!v->x || (need_y && !v->y)) return tr_error_set(err, TRAINRUN_E_INVALID, "batch: %s is NULL", !v->x ? "x" : "y");
    if (v->x_dtype != TRAINRUN_FLOAT32 && v->x_dtype != TRAINRUN_INT64)
        return tr_error_set(err, TRAINRUN_E_INVALID, "batch: x_dtype %d: the input must be TRAINRUN_FLOAT32 (%d) or "
                            "TRAINRUN_INT64 (%d) token ids", v->x_dtype, TRAINRUN_FLOAT32, TRAINRUN_INT64);
    if (v->y && v->y_dtype != TRAINRUN_INT64 && v->y_dtype != TRAINRUN_FLOAT32)
        return tr_error_set(err, TRAINRUN_E_INVALID, "batch: y_dtype %d: targets must be TRAINRUN_INT64 (%d) class "
                            "indices or TRAINRUN_FLOAT32 (%d) values", v->y_dtype, TRAINRUN_INT64, TRAINRUN_FLOAT32);
    if (v->ndim < 2 || v->ndim > 4)
        return tr_error_set(err, TRAINRUN_E_INVALID, "batch: ndim %d: x must be [N, D], [N, T, D] or [N, C, H, W] "
                            "(2 to 4)", v->ndim);
    memset(b, 0, sizeof *b);
    b->ndim = v->ndim;
    if (v->x_dtype == TRAINRUN_FLOAT32) b->x = v->x;
    else b->x_ids = v->x;
    if (v->y && v->y_dtype == TRAINRUN_INT64) b->y = v->y;
    else if (v->y) b->target = v->y;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 1 || v->shape[i] > ((int64_t)1 << 40))
            return tr_error_set(err, TRAINRUN_E_INVALID, "batch: shape[%d] = %lld is out of range", i,
                                (long long)v->shape[i]);
        b->shape[i] = v->shape[i];
    }
    return TRAINRUN_OK;
}

/* The view of a data source or a callback batch: FLOAT32 inputs (runs keep float features) and any targets. */
static int batch_from_view(const trainrun_batch *v, trs_batch *b, tr_error *err)
{
    const int rc = batch_view_in(v, b, 1, err);
    if (rc) return rc;
    if (v->x_dtype != TRAINRUN_FLOAT32)
        return tr_error_set(err, TRAINRUN_E_INVALID, "batch: x_dtype %d: a run's data are FLOAT32 features (%d); "
                            "token ids go through a trainer (trainrun_trainer_train_step)", v->x_dtype,
                            TRAINRUN_FLOAT32);
    if (v->y_dtype == TRAINRUN_FLOAT32)
        return tr_error_set(err, TRAINRUN_E_INVALID, "batch: y_dtype FLOAT32: float targets need their column count: "
                            "use trainrun_data_arrays_targets");
    return TRAINRUN_OK;
}

/* ================================================================================================ data */

struct trainrun_data {
    tr_error err;
    tr_dataset ds;              /* arrays: the copy                                      */
    trainrun_batch_fn fn;       /* callback                                              */
    void *ctx;
    int64_t c, h, w;            /* callback: per-sample shape                            */
    atomic_int users;           /* splits of open runs holding it (trainrun_run_set_data) */
};

int trainrun_data_arrays_targets(const trainrun_batch *all, int64_t target_cols, trainrun_data **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    trainrun_data *d = calloc(1, sizeof *d);
    if (!(*out = d)) return TRAINRUN_E_NOMEM;
    if (target_cols < 0)
        return tr_error_set(&d->err, TRAINRUN_E_INVALID, "target_cols %lld must be >= 0", (long long)target_cols);
    trs_batch b;
    int rc = batch_view_in(all, &b, 1, &d->err);
    if (rc) return rc;
    if (all->x_dtype != TRAINRUN_FLOAT32)
        return tr_error_set(&d->err, TRAINRUN_E_INVALID, "x_dtype %d: arrays hold FLOAT32 features (%d)",
                            all->x_dtype, TRAINRUN_FLOAT32);
    if ((target_cols == 0) != (all->y_dtype == TRAINRUN_INT64))
        return tr_error_set(&d->err, TRAINRUN_E_INVALID, "y_dtype %d with target_cols %lld: class indices are INT64 "
                            "with target_cols 0, float targets FLOAT32 with target_cols >= 1", all->y_dtype,
                            (long long)target_cols);
    const int64_t n = b.shape[0];
    d->ds.n = n;
    d->ds.c = b.shape[1];
    d->ds.h = b.ndim >= 3 ? b.shape[2] : 1;
    d->ds.w = b.ndim == 4 ? b.shape[3] : 1;
    const size_t feat = (size_t)(d->ds.c * d->ds.h * d->ds.w);
    d->ds.x = malloc((size_t)n * feat * sizeof *d->ds.x);
    d->ds.y = calloc((size_t)n, sizeof *d->ds.y);
    if (target_cols > 0) d->ds.t = malloc((size_t)n * (size_t)target_cols * sizeof *d->ds.t);
    if (!d->ds.x || !d->ds.y || (target_cols > 0 && !d->ds.t)) {
        tr_dataset_free(&d->ds);
        return tr_error_set(&d->err, TRAINRUN_E_NOMEM, "out of memory copying %lld samples", (long long)n);
    }
    memcpy(d->ds.x, all->x, (size_t)n * feat * sizeof *d->ds.x);
    if (target_cols > 0) {
        memcpy(d->ds.t, all->y, (size_t)n * (size_t)target_cols * sizeof *d->ds.t);
        for (int64_t i = 0; i < n * target_cols; i++)
            if (!isfinite(d->ds.t[i])) {
                rc = tr_error_set(&d->err, TRAINRUN_E_INVALID, "y[%lld][%lld] = %g: targets must be finite",
                                  (long long)(i / target_cols), (long long)(i % target_cols), d->ds.t[i]);
                tr_dataset_free(&d->ds);
                return rc;
            }
        d->ds.t_cols = target_cols;
        d->ds.num_classes = target_cols;
        return TRAINRUN_OK;
    }
    memcpy(d->ds.y, all->y, (size_t)n * sizeof *d->ds.y);
    for (int64_t i = 0; i < n; i++) {
        if (d->ds.y[i] < 0) {
            rc = tr_error_set(&d->err, TRAINRUN_E_INVALID, "y[%lld] = %lld: labels are class indices >= 0",
                              (long long)i, (long long)d->ds.y[i]);
            tr_dataset_free(&d->ds);
            return rc;
        }
        if (d->ds.y[i] + 1 > d->ds.num_classes) d->ds.num_classes = d->ds.y[i] + 1;
    }
    return TRAINRUN_OK;
}

int trainrun_data_arrays(const trainrun_batch *all, trainrun_data **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    if (all && all->y_dtype == TRAINRUN_FLOAT32) {
        trainrun_data *d = calloc(1, sizeof *d);
        if (!(*out = d)) return TRAINRUN_E_NOMEM;
        return tr_error_set(&d->err, TRAINRUN_E_INVALID, "y_dtype FLOAT32: float targets need their column count: "
                            "use trainrun_data_arrays_targets");
    }
    return trainrun_data_arrays_targets(all, 0, out);
}

int trainrun_data_callback(trainrun_batch_fn fn, void *ctx, const int64_t *sample_shape, int sample_ndim,
                           trainrun_data **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    trainrun_data *d = calloc(1, sizeof *d);
    if (!(*out = d)) return TRAINRUN_E_NOMEM;
    if (!fn || !sample_shape) return tr_error_set(&d->err, TRAINRUN_E_INVALID, "%s is NULL", !fn ? "fn" : "sample_shape");
    if (sample_ndim != 1 && sample_ndim != 3)
        return tr_error_set(&d->err, TRAINRUN_E_INVALID, "sample_ndim %d: samples are [D] (1) or [C, H, W] (3)",
                            sample_ndim);
    for (int i = 0; i < sample_ndim; i++)
        if (sample_shape[i] < 1)
            return tr_error_set(&d->err, TRAINRUN_E_INVALID, "sample_shape[%d] = %lld must be >= 1", i,
                                (long long)sample_shape[i]);
    d->fn = fn;
    d->ctx = ctx;
    d->c = sample_shape[0];
    d->h = sample_ndim == 3 ? sample_shape[1] : 1;
    d->w = sample_ndim == 3 ? sample_shape[2] : 1;
    return TRAINRUN_OK;
}

const char *trainrun_data_errmsg(const trainrun_data *d) { return d ? d->err.msg : k_null_handle; }

int trainrun_data_close(trainrun_data *d)
{
    if (!d) return TRAINRUN_OK;
    const int users = atomic_load(&d->users);
    if (users > 0) /* as sqlite3_close with statements still open: nothing is freed, the caller closes them first */
        return tr_error_set(&d->err, TRAINRUN_E_BUSY,
                            "data_close: still in use by an open run (%d split%s); close the run first", users,
                            users == 1 ? "" : "s");
    tr_dataset_free(&d->ds);
    free(d);
    return TRAINRUN_OK;
}

/* ================================================================================================ config */

static int load_config(tr_config *cfg, const char *path, const char *yaml, const char *const *overrides, int n,
                       tr_error *err)
{
    if (!path && !yaml) return invalid(err, "the config is NULL");
    if (n < 0 || (n > 0 && !overrides))
        return tr_error_set(err, TRAINRUN_E_INVALID, "overrides: %d given but the array is NULL or the count < 0", n);
    for (int i = 0; i < n; i++)
        if (!overrides[i]) return tr_error_set(err, TRAINRUN_E_INVALID, "overrides[%d] is NULL", i);
    if (path) return tr_config_load_cli(cfg, path, (char *const *)overrides, n, err);
    tr_config_defaults(cfg);
    int rc = tr_config_load_string(cfg, yaml, "<yaml>", err);
    for (int i = 0; rc == TR_OK && i < n; i++) rc = tr_config_override(cfg, overrides[i], err);
    if (rc == TR_OK) rc = tr_config_validate(cfg, err);
    return rc;
}

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
    int log_set;                /* trainrun_run_set_log was called: lines go to log_fn (NULL: nowhere)  */
    trainrun_log_fn log_fn;
    void *log_ctx;
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
    const int rc = load_config(&r->cfg, path, yaml, overrides, n, &r->err);
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
    if (!data) return invalid(&run->err, "set_data: data is NULL");
    if (split != TRAINRUN_TRAIN && split != TRAINRUN_VAL && split != TRAINRUN_TEST)
        return tr_error_set(&run->err, TRAINRUN_E_INVALID, "set_data: split %d is not TRAINRUN_TRAIN, _VAL or _TEST",
                            split);
    if (data->fn && split != TRAINRUN_TRAIN)
        return invalid(&run->err, "set_data: a batch callback supplies training data only");
    if (!data->fn && data->ds.n == 0) return invalid(&run->err, "set_data: the data source failed to open");
    if (run->state || run->ended) return invalid(&run->err, "set_data: the run has already started");
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
    if (run->state || run->ended) return invalid(&run->err, "set_log: the run has already started");
    run->log_set = 1;
    run->log_fn = fn;
    run->log_ctx = ctx;
    return TRAINRUN_OK;
}

/* An event of the run's event path (event.h) as this API reports it: the steps, the evaluations of the weights
 * eval.weights reports, the checkpoints and the watchdog's reports; 0 for the others. */
static int event_kind(const tr_event *e)
{
    switch (e->kind) {
    case TR_EV_STEP: return TRAINRUN_EVENT_STEP;
    case TR_EV_EVAL: return e->reported ? TRAINRUN_EVENT_EVAL : 0;
    case TR_EV_CHECKPOINT: return TRAINRUN_EVENT_CHECKPOINT;
    case TR_EV_WATCHDOG: return TRAINRUN_EVENT_WATCHDOG;
    default: return 0;
    }
}

/* The run's event hook (called under the libtorch lock): copy the event into the queue, with the fields its kind
 * names (trainrun.h) and the others 0. */
static void queue_event(void *ctx, const tr_event *e)
{
    trainrun_run *r = ctx;
    const int kind = event_kind(e);
    if (!kind) return;
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
    static const int watchdog[] = {[TR_WD_EV_NONE] = 0, [TR_WD_EV_BASELINE] = TRAINRUN_WATCHDOG_BASELINE,
                                   [TR_WD_EV_WARN] = TRAINRUN_WATCHDOG_WARN,
                                   [TR_WD_EV_LIMIT] = TRAINRUN_WATCHDOG_LIMIT};
    const tr_watchdog_report *w = &e->watchdog;
    switch (kind) {
    case TRAINRUN_EVENT_STEP:
        q->ev = (trainrun_event){.kind = kind, .step = e->step, .epoch = e->epoch, .loss = e->loss, .lr = e->lr,
                                 .grad_norm = e->grad_norm, .samples = e->samples, .correct = e->correct,
                                 .accuracy = e->samples ? (double)e->correct / (double)e->samples : 0.0};
        break;
    case TRAINRUN_EVENT_EVAL:
        q->ev = (trainrun_event){.kind = kind, .step = e->step, .epoch = e->epoch, .loss = e->loss,
                                 .correct = e->correct, .samples = e->samples, .accuracy = e->accuracy,
                                 .seconds = e->seconds};
        if (e->split) snprintf(q->split, sizeof q->split, "%s", e->split);
        break;
    case TRAINRUN_EVENT_CHECKPOINT:
        q->ev = (trainrun_event){.kind = kind, .step = e->step, .epoch = e->epoch, .bytes = e->bytes,
                                 .seconds = e->seconds};
        if (e->reason) snprintf(q->reason, sizeof q->reason, "%s", e->reason);
        if (e->path) snprintf(q->path, sizeof q->path, "%s", e->path);
        break;
    default: /* TRAINRUN_EVENT_WATCHDOG */
        q->ev = (trainrun_event){.kind = kind, .step = e->step, .epoch = e->epoch, .watchdog = watchdog[w->event],
                                 .allocated_bytes = w->current, .baseline_bytes = w->baseline, .limit_bytes = w->limit,
                                 .growth_per_step = w->growth_per_step, .steps_left = w->steps_left,
                                 .reserved_bytes = w->reserved, .rss_bytes = w->rss};
    }
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
    if (batch_from_view(&v, b, err)) {
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

/* The run's console lines, to the caller's log function (trainrun_run_set_log); NULL function: dropped. */
static void log_line(void *ctx, tr_log_kind kind, const char *line)
{
    const trainrun_run *r = ctx;
    if (r->log_fn) r->log_fn(r->log_ctx, kind == TR_LOG_PROGRESS ? TRAINRUN_LOG_PROGRESS : TRAINRUN_LOG_MESSAGE, line);
}

/* The first step: the run's set-up, on the caller's data if any. */
static int run_start(trainrun_run *r)
{
    tr_run_data data;
    memset(&data, 0, sizeof data);
    data.log = (tr_log_sink){.set = r->log_set, .fn = r->log_set ? log_line : NULL, .ctx = r};
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
        }
        if (r->data[TRAINRUN_VAL]) data.val = &r->data[TRAINRUN_VAL]->ds;
        if (r->data[TRAINRUN_TEST]) data.test = &r->data[TRAINRUN_TEST]->ds;
    } else if (r->data[TRAINRUN_VAL] || r->data[TRAINRUN_TEST]) {
        return invalid(&r->err, "validation or test data without training data: set TRAINRUN_TRAIN too");
    }
    const int rc = tr_run_open(&r->cfg, &data, &r->state, &r->err);
    if (!r->state) return TRAINRUN_E_NOMEM;
    tr_run_set_event_hook(r->state, queue_event, r);
    return rc;
}

static int run_end(trainrun_run *r, int rc)
{
    r->ended = 1;
    if (rc == TR_OK || rc == TR_E_SIGNAL || rc == TR_E_WATCHDOG) {
        r->status = rc == TR_E_SIGNAL ? TRAINRUN_E_STOPPED : rc;
        rc = TRAINRUN_DONE;
    }
    return r->end_rc = rc;
}

int trainrun_run_step(trainrun_run *run)
{
    if (!run) return TRAINRUN_E_INVALID;
    run->n_events = run->next_event = 0;
    if (run->ended) return run->end_rc;
    int rc = TR_OK;
    if (!run->state && (rc = run_start(run))) return run_end(run, rc);
    if (run->stop) tr_run_request_stop(run->state);
    rc = tr_run_step(run->state, &run->err);
    if (rc == TR_RUN_DONE) rc = run_end(run, tr_run_finish(run->state, &run->err));
    else if (rc != TR_OK) rc = run_end(run, rc);
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
    if (!event) return invalid(&run->err, "next_event: event is NULL");
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
    if (!out) return invalid(&run->err, "evaluate: out is NULL");
    if (split != TRAINRUN_VAL && split != TRAINRUN_TEST)
        return tr_error_set(&run->err, TRAINRUN_E_INVALID,
                            "evaluate: split %d is not TRAINRUN_VAL (2) or "
                            "TRAINRUN_TEST (3)",
                            split);
    if (run->ended) return invalid(&run->err, "evaluate: the run has ended");
    run->n_events = run->next_event = 0;
    int rc = TR_OK;
    if (!run->state && (rc = run_start(run))) return run_end(run, rc);
    memset(&run->err, 0, sizeof run->err);
    tr_eval_figures f;
    memset(&f, 0, sizeof f);
    rc = tr_run_evaluate(run->state, split == TRAINRUN_TEST, &f, &run->err);
    deliver_events(run);
    if (rc) return rc;
    *out = (trainrun_eval_result){.step = f.step,
                                  .samples = f.samples,
                                  .loss = f.loss,
                                  .accuracy = f.accuracy,
                                  .top_k_accuracy = f.top_k_accuracy,
                                  .micro_f1 = f.micro_f1,
                                  .macro_f1 = f.macro_f1,
                                  .mse = f.mse,
                                  .mae = f.mae};
    return TRAINRUN_OK;
}

int trainrun_run_summary(trainrun_run *run, trainrun_summary *out)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!out) return invalid(&run->err, "summary: out is NULL");
    if (!run->ended || !run->state)
        return invalid(&run->err, "summary: the run has not ended (step it to TRAINRUN_DONE first)");
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
    return TRAINRUN_OK;
}

/* Growth records into the caller's plain structs. */
static void copy_growth(const tr_mem_growth *g, size_t n, trainrun_memory_growth *out, size_t cap)
{
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = (trainrun_memory_growth){.phase = trs_memory_phase_name(g[i].phase), .block_bytes = g[i].size,
                                          .blocks = g[i].blocks, .bytes = g[i].bytes,
                                          .bytes_per_step = g[i].bytes_per_step,
                                          .blocks_per_step = g[i].blocks_per_step};
}

int trainrun_run_memory_growth(trainrun_run *run, trainrun_memory_growth *out, size_t cap, size_t *count)
{
    if (!run) return TRAINRUN_E_INVALID;
    if (!count) return invalid(&run->err, "memory_growth: count is NULL");
    if (!out && cap > 0) return invalid(&run->err, "memory_growth: out is NULL with cap > 0");
    *count = 0;
    if (!run->state) return TRAINRUN_OK;
    tr_mem_growth *g = NULL;
    size_t n = 0;
    if (tr_run_memory_growth(run->state, &g, &n, &run->err))
        return tr_error_set(&run->err, TRAINRUN_E_NOMEM, "memory_growth: %s", run->err.msg);
    copy_growth(g, n, out, cap);
    free(g);
    *count = n;
    return TRAINRUN_OK;
}

const char *trainrun_run_errmsg(const trainrun_run *run) { return run ? run->err.msg : k_null_handle; }

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

/* ================================================================================================ trainers */

struct trainrun_trainer {
    tr_config cfg;
    tr_error err;
    tr_core core;               /* model, optimizer, step options, device, the trainer's own generator state
                                   (trainer_core.h, as a run holds them; a trainer keeps no EMA) */
    tr_ckpt_progress p;         /* p.step: optimizer steps taken; what a checkpoint carries   */
    tr_memsnap mem_base;        /* trainrun_trainer_memory_baseline's snapshot                */
};

/* The trainer's core (tr_core_open): model and optimizer under the libtorch lock, its generator state in
 * tr->core.rng. The device is refused first, before the model spec is read. */
static int trainer_build(trainrun_trainer *tr)
{
    char path[TR_PATH_MAX];
    const int torchscript = tr->cfg.model.torchscript[0] != '\0';
    tr_config_resolve_path(&tr->cfg, torchscript ? tr->cfg.model.torchscript : tr->cfg.model.spec, path);
    tr_model_spec spec;
    memset(&spec, 0, sizeof spec);
    /* a CUDA device on a CPU-only build: refused */
    int rc = tr_device_resolve(tr->cfg.device, &tr->core.device, &tr->err);
    if (rc) return rc;
    int64_t shape[TR_MAX_CHANNELS];
    int ndim = 0;
    if (torchscript) {
        /* No data set here: the caller's batches must have the shape the config gives. */
        ndim = tr->cfg.model.n_input_shape;
        for (int i = 0; i < ndim; i++) shape[i] = (int64_t)tr->cfg.model.input_shape[i];
        if (ndim == 0)
            return tr_error_set(&tr->err, TRAINRUN_E_CONFIG, "model.input_shape: a trainer of a TorchScript model "
                                "needs the per-sample input shape (e.g. model.input_shape=[1, 28, 28])");
    } else if ((rc = tr_model_spec_load(path, &spec, &tr->err))) {
        return rc;
    }
    rc = tr_core_open(&tr->core, &tr->cfg, torchscript ? NULL : &spec, path, torchscript ? shape : spec.input_shape,
                      torchscript ? ndim : spec.input_ndim, TRAINRUN_E_NOMEM, &tr->err);
    tr_model_spec_free(&spec);
    return rc;
}

static int trainer_open(const char *path, const char *yaml, const char *const *overrides, int n,
                        trainrun_trainer **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    trainrun_trainer *tr = calloc(1, sizeof *tr);
    if (!(*out = tr)) return TRAINRUN_E_NOMEM;
    int rc = load_config(&tr->cfg, path, yaml, overrides, n, &tr->err);
    if (!rc) rc = trainer_build(tr);
    return rc;
}

int trainrun_trainer_open(const char *config_path, const char *const *overrides, int n_overrides,
                          trainrun_trainer **out)
{
    if (!config_path && out) *out = NULL;
    if (!config_path) return TRAINRUN_E_INVALID;
    return trainer_open(config_path, NULL, overrides, n_overrides, out);
}

int trainrun_trainer_open_yaml(const char *yaml, const char *const *overrides, int n_overrides,
                               trainrun_trainer **out)
{
    if (!yaml && out) *out = NULL;
    if (!yaml) return TRAINRUN_E_INVALID;
    return trainer_open(NULL, yaml, overrides, n_overrides, out);
}

/* A call's message describes that call (as sqlite3_errmsg the most recent one): cleared as each call starts -- but
 * for a trainer that failed to open, whose message keeps saying why until it is closed. */
static void trainer_fresh_message(trainrun_trainer *tr)
{
    if (tr->core.model && tr->core.opt && tr->core.rng) memset(&tr->err, 0, sizeof tr->err);
}

/* NULL checks shared by every trainer call that runs libtorch. */
static int trainer_ready(trainrun_trainer *tr)
{
    if (!tr->core.model || !tr->core.opt || !tr->core.rng)
        return invalid(&tr->err, "the trainer failed to open: close it (its message says why)");
    return TRAINRUN_OK;
}

static int status_of(trs_status st)
{
    switch (st) {
    case TRS_OK: return TRAINRUN_OK;
    case TRS_E_INVALID: return TRAINRUN_E_INVALID;
    case TRS_E_NOMEM: return TRAINRUN_E_NOMEM;
    case TRS_E_NONFINITE: return TRAINRUN_E_NONFINITE;
    default: return TRAINRUN_E_RUNTIME;
    }
}

static int trainer_step(trainrun_trainer *tr, const trainrun_batch *batch, trainrun_step_result *res, int train)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!res) return invalid(&tr->err, "res is NULL");
    int rc = trainer_ready(tr);
    trs_batch b;
    if (!rc) rc = batch_view_in(batch, &b, 1, &tr->err);
    if (rc) return rc;
    /* The targets' shape follows from the model's output [N, ...out]: class indices [N, ...out minus its class
     * dim], float targets [N, ...out]. */
    int64_t out_shape[TRS_MAX_DIMS];
    int out_ndim = 0;
    trs_model_output_shape(tr->core.model, out_shape, &out_ndim);
    if (out_ndim >= 1) {
        const int float_y = batch->y_dtype == TRAINRUN_FLOAT32, keep = float_y ? out_ndim : out_ndim - 1;
        b.y_ndim = 1 + keep;
        b.y_shape[0] = b.shape[0];
        for (int i = 0; i < keep; i++) b.y_shape[1 + i] = out_shape[i];
    }
    trs_step_result r;
    memset(&r, 0, sizeof r);
    if (tr_core_enter(&tr->core))
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "restoring the generator: %s", trs_last_error());
    trs_status st;
    if (train) tr_core_train_step(&tr->core, &b, &r, &st, &tr->err, "train step");
    else tr_core_eval_step(&tr->core, NULL, &b, &r, NULL, &st, &tr->err, "eval step");
    if (st == TRS_E_NONFINITE)
        tr_error_set(&tr->err, TRAINRUN_E_NONFINITE, "train step %lld: the loss is not finite: no step taken",
                     (long long)tr->p.step + 1);
    else if (st != TRS_OK)
        tr->err.code = status_of(st); /* the message is the core's; the status is this API's */
    tr_core_leave(&tr->core);
    if (st == TRS_OK || st == TRS_E_NONFINITE) {
        memset(res, 0, sizeof *res);
        res->loss = r.loss;
        res->samples = r.samples;
        res->correct = r.correct;
        res->accuracy = r.targets ? (double)r.correct / (double)r.targets : 0.0;
        res->grad_norm = r.grad_norm;
    }
    if (st == TRS_OK && train) tr->p.step++;
    return status_of(st);
}

int trainrun_trainer_train_step(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res)
{
    return trainer_step(trainer, batch, res, 1);
}

int trainrun_trainer_eval_step(trainrun_trainer *trainer, const trainrun_batch *batch, trainrun_step_result *res)
{
    return trainer_step(trainer, batch, res, 0);
}

int trainrun_trainer_predict(trainrun_trainer *tr, const trainrun_batch *batch, float *out, size_t out_count)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!out) return invalid(&tr->err, "predict: out is NULL");
    int rc = trainer_ready(tr);
    trs_batch b;
    if (!rc) rc = batch_view_in(batch, &b, 0, &tr->err);
    if (rc) return rc;
    b.y = NULL;
    b.target = NULL;
    tr_torch_enter(NULL, 0); /* eval mode draws nothing from the generator */
    const trs_status st = trs_predict(tr->core.model, NULL, &b, out, out_count, NULL, NULL);
    if (st != TRS_OK) tr_error_set(&tr->err, status_of(st), "predict: %s", trs_model_errmsg(tr->core.model));
    tr_torch_leave(NULL, 0);
    return status_of(st);
}

int trainrun_trainer_generate(trainrun_trainer *tr, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                              double temperature, int64_t top_k, uint64_t seed, int64_t *out)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!prompt || !out) return invalid(&tr->err, !prompt ? "generate: prompt is NULL" : "generate: out is NULL");
    int rc = trainer_ready(tr);
    if (rc) return rc;
    const trs_sample_options o = {.temperature = temperature, .top_k = top_k, .seed = seed};
    tr_torch_enter(NULL, 0); /* its own generator: the default one is not drawn from */
    const trs_status st = trs_generate(tr->core.model, NULL, prompt, n_prompt, n_new, &o, out);
    if (st != TRS_OK) tr_error_set(&tr->err, status_of(st), "generate: %s", trs_model_errmsg(tr->core.model));
    tr_torch_leave(NULL, 0);
    return status_of(st);
}

int trainrun_trainer_output_shape(trainrun_trainer *tr, int64_t *shape, int *ndim)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    int rc = trainer_ready(tr);
    if (rc) return rc;
    int64_t s[TRS_MAX_DIMS];
    int n = 0;
    trs_model_output_shape(tr->core.model, s, &n);
    if (ndim) *ndim = n;
    if (shape) memcpy(shape, s, (size_t)n * sizeof *s);
    return TRAINRUN_OK;
}

int trainrun_trainer_output_size(trainrun_trainer *tr, int64_t *count)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!count) return invalid(&tr->err, "output_size: count is NULL");
    int64_t s[TRS_MAX_DIMS];
    int n = 0;
    int rc = trainrun_trainer_output_shape(tr, s, &n);
    if (rc) return rc;
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    *count = p;
    return TRAINRUN_OK;
}

int trainrun_trainer_set_lr(trainrun_trainer *tr, double lr)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    int rc = trainer_ready(tr);
    if (rc) return rc;
    if (!(lr >= 0.0) || !isfinite(lr))
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "set_lr: lr %g must be finite and >= 0", lr);
    trs_status st;
    tr_torch_enter(NULL, 0);
    if (tr_core_set_lr(&tr->core, lr, &st, &tr->err, "set_lr")) tr->err.code = status_of(st);
    tr_torch_leave(NULL, 0);
    return status_of(st);
}

int trainrun_trainer_steps(trainrun_trainer *tr, int64_t *steps)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!steps) return invalid(&tr->err, "steps: steps is NULL");
    *steps = tr->p.step;
    return TRAINRUN_OK;
}

int trainrun_trainer_save(trainrun_trainer *tr, const char *dir, char *path_out, size_t path_size)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!dir) return invalid(&tr->err, "save: dir is NULL");
    int rc = trainer_ready(tr);
    if (rc) return rc;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "%s: cannot create directory: %s", dir, strerror(errno));
    char path[TR_PATH_MAX];
    if (tr_core_enter(&tr->core))
        return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "restoring the generator: %s", trs_last_error());
    trs_memory_empty_cache(NULL); /* a phase change: the cache goes back before the state is copied out */
    int phase = TRS_PHASE_OUTSIDE;
    trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &phase);
    rc = tr_checkpoint_save(dir, &tr->cfg, tr->core.model, tr->core.opt, NULL, &tr->p, "trainer", path, NULL, &tr->err);
    trs_memory_set_phase(phase, NULL);
    if (!rc) rc = tr_checkpoint_prune(dir, tr->cfg.checkpoint.keep_last, tr->p.step, NULL, &tr->err);
    tr_torch_leave(NULL, 0);
    if (!rc && path_out && path_size) snprintf(path_out, path_size, "%s", path);
    return rc;
}

int trainrun_trainer_load_weights(trainrun_trainer *tr, const char *path)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!path) return invalid(&tr->err, "load_weights: path is NULL");
    int rc = trainer_ready(tr);
    if (rc) return rc;
    tr_torch_enter(NULL, 0);
    rc = tr_checkpoint_load_weights(path, tr->core.model, false, NULL, NULL, &tr->err);
    tr_torch_leave(NULL, 0);
    return rc;
}

int trainrun_trainer_load(trainrun_trainer *tr, const char *path)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!path) return invalid(&tr->err, "load: path is NULL");
    int rc = trainer_ready(tr);
    if (rc) return rc;
    char ckpt[TR_PATH_MAX + 32], manifest[TR_PATH_MAX + 64];
    snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", path);
    struct stat st;
    if (stat(manifest, &st) == 0) {
        snprintf(ckpt, sizeof ckpt, "%s", path);
    } else {
        tr_torch_enter(NULL, 0);
        rc = tr_checkpoint_find_resumable(path, &tr->cfg, tr->core.model, tr->core.opt, NULL, NULL, ckpt, NULL, NULL,
                                          &tr->err);
        tr_torch_leave(NULL, 0);
        if (rc) return rc;
        if (!ckpt[0]) return tr_error_set(&tr->err, TRAINRUN_E_RUNTIME, "%s: no valid checkpoint", path);
    }
    if ((rc = tr_checkpoint_verify(ckpt, &tr->err))) return rc;
    tr_ckpt_progress p;
    memset(&p, 0, sizeof p);
    tr_torch_enter(NULL, 0);
    rc = tr_checkpoint_load(ckpt, &tr->cfg, tr->core.model, tr->core.opt, NULL, NULL, &p, NULL, NULL, &tr->err);
    tr_torch_leave(rc ? NULL : tr->core.rng, tr->core.rng_size); /* the checkpoint's generator becomes the trainer's */
    if (!rc) tr->p = p;
    return rc;
}

int trainrun_trainer_memory(trainrun_trainer *tr, trainrun_memory *out)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!out) return invalid(&tr->err, "memory: out is NULL");
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
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (tr_memsnap_take(&tr->mem_base, tr->p.step, &tr->err))
        return tr_error_set(&tr->err, TRAINRUN_E_NOMEM, "memory_baseline: %s", tr->err.msg);
    return TRAINRUN_OK;
}

int trainrun_trainer_memory_growth(trainrun_trainer *tr, trainrun_memory_growth *out, size_t cap, size_t *count)
{
    if (!tr) return TRAINRUN_E_INVALID;
    trainer_fresh_message(tr);
    if (!count) return invalid(&tr->err, "memory_growth: count is NULL");
    if (!out && cap > 0) return invalid(&tr->err, "memory_growth: out is NULL with cap > 0");
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
    copy_growth(g, n, out, cap);
    free(g);
    *count = n;
    return TRAINRUN_OK;
}

const char *trainrun_trainer_errmsg(const trainrun_trainer *tr) { return tr ? tr->err.msg : k_null_handle; }

int trainrun_trainer_close(trainrun_trainer *tr)
{
    if (!tr) return TRAINRUN_OK;
    tr_torch_enter(NULL, 0);
    tr_core_close(&tr->core);
    tr_torch_leave(NULL, 0);
    tr_memsnap_free(&tr->mem_base);
    free(tr);
    return TRAINRUN_OK;
}
