/*
 * trainrun.c -- the embedding API (runtime/include/trainrun/trainrun.h): what its parts share -- the status strings,
 * the version, the checks of a caller's batch view, config loading, the growth records (trainrun_internal.h). The
 * parts: trainrun_data.c (data sources), trainrun_run.c (runs over run.c), trainrun_trainer.c (trainers over the
 * trainer core and the checkpoint code). Every entry point checks its arguments first, keeps its message in its
 * handle, and returns a status; the shim already keeps C++ exceptions on its side.
 */
#include "trainrun_internal.h"

#include "event.h"

#include <string.h>

/* The runtime's internal codes (error.h) are returned through this API as they are: they must stay equal. */
_Static_assert((int)TR_OK == (int)TRAINRUN_OK && (int)TR_E_RUNTIME == (int)TRAINRUN_E_RUNTIME &&
                   (int)TR_E_CONFIG == (int)TRAINRUN_E_CONFIG && (int)TR_E_WATCHDOG == (int)TRAINRUN_E_WATCHDOG &&
                   (int)TR_E_SIGNAL == (int)TRAINRUN_E_STOPPED && (int)TR_E_PEER == (int)TRAINRUN_E_PEER &&
                   (int)TR_E_LOCKED == (int)TRAINRUN_E_LOCKED,
               "error.h's TR_* codes and trainrun.h's TRAINRUN_* codes must agree");

const char tr_api_null_handle[] = "NULL handle";

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

int tr_api_invalid(tr_error *err, const char *msg) { return tr_error_set(err, TRAINRUN_E_INVALID, "%s", msg); }

/* Check a caller's batch view and turn it into the shim's: x FLOAT32 (x) or INT64 (x_ids); y INT64 (class indices)
 * or FLOAT32 (target), or NULL when need_y is 0. TRAINRUN_OK or TRAINRUN_E_INVALID. */
int tr_api_batch_view_in(const trainrun_batch *v, trs_batch *b, int need_y, tr_error *err)
{
    if (!v) return tr_api_invalid(err, "batch: NULL");
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
int tr_api_batch_from_view(const trainrun_batch *v, trs_batch *b, tr_error *err)
{
    const int rc = tr_api_batch_view_in(v, b, 1, err);
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

/* An evaluation's figures as the API reports them. */
trainrun_eval_result tr_api_eval_result(const tr_eval_figures *f)
{
    return (trainrun_eval_result){.step = f->step, .samples = f->samples, .loss = f->loss, .accuracy = f->accuracy,
                                  .top_k_accuracy = f->top_k_accuracy, .micro_f1 = f->micro_f1,
                                  .macro_f1 = f->macro_f1, .mse = f->mse, .mae = f->mae};
}

/* ================================================================================================ config */

int tr_api_load_config(tr_config *cfg, const char *path, const char *yaml, const char *const *overrides, int n,
                       tr_error *err)
{
    if (!path && !yaml) return tr_api_invalid(err, "the config is NULL");
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

/* ================================================================================================ growth */

/* Growth records into the caller's plain structs. */
void tr_api_copy_growth(const tr_mem_growth *g, size_t n, trainrun_memory_growth *out, size_t cap)
{
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = (trainrun_memory_growth){.phase = trs_memory_phase_name(g[i].phase), .block_bytes = g[i].size,
                                          .blocks = g[i].blocks, .bytes = g[i].bytes,
                                          .bytes_per_step = g[i].bytes_per_step,
                                          .blocks_per_step = g[i].blocks_per_step};
}

int tr_api_event_of(const tr_event *e, trainrun_event *out)
{
    static const int watchdog[] = {[TR_WD_EV_NONE] = 0, [TR_WD_EV_BASELINE] = TRAINRUN_WATCHDOG_BASELINE,
                                   [TR_WD_EV_WARN] = TRAINRUN_WATCHDOG_WARN,
                                   [TR_WD_EV_LIMIT] = TRAINRUN_WATCHDOG_LIMIT};
    const tr_watchdog_report *w = &e->watchdog;
    switch (e->kind) {
    case TR_EV_STEP:
        *out = (trainrun_event){.kind = TRAINRUN_EVENT_STEP, .step = e->step, .epoch = e->epoch, .loss = e->loss,
                                .lr = e->lr, .grad_norm = e->grad_norm, .samples = e->samples, .correct = e->correct,
                                .accuracy = e->targets ? (double)e->correct / (double)e->targets : 0.0};
        return TRAINRUN_EVENT_STEP;
    case TR_EV_EVAL:
        if (!e->reported) return 0;
        *out = (trainrun_event){.kind = TRAINRUN_EVENT_EVAL, .step = e->step, .epoch = e->epoch, .loss = e->loss,
                                .correct = e->correct, .samples = e->samples, .accuracy = e->accuracy,
                                .seconds = e->seconds, .split = e->split};
        return TRAINRUN_EVENT_EVAL;
    case TR_EV_CHECKPOINT:
        *out = (trainrun_event){.kind = TRAINRUN_EVENT_CHECKPOINT, .step = e->step, .epoch = e->epoch,
                                .bytes = e->bytes, .seconds = e->seconds, .reason = e->reason, .path = e->path};
        return TRAINRUN_EVENT_CHECKPOINT;
    case TR_EV_WATCHDOG:
        *out = (trainrun_event){.kind = TRAINRUN_EVENT_WATCHDOG, .step = e->step, .epoch = e->epoch,
                                .watchdog = watchdog[w->event], .allocated_bytes = w->current,
                                .baseline_bytes = w->baseline, .limit_bytes = w->limit,
                                .growth_per_step = w->growth_per_step, .steps_left = w->steps_left,
                                .reserved_bytes = w->reserved, .rss_bytes = w->rss};
        return TRAINRUN_EVENT_WATCHDOG;
    default: return 0;
    }
}

/* The log's lines to the caller's function, their kinds as trainrun.h names them; NULL function: dropped. */
static void api_log_line(void *ctx, tr_log_kind kind, const char *line)
{
    const tr_api_log *l = ctx;
    if (l->fn) l->fn(l->ctx, kind == TR_LOG_PROGRESS ? TRAINRUN_LOG_PROGRESS : TRAINRUN_LOG_MESSAGE, line);
}

tr_log_sink tr_api_log_sink(const tr_api_log *l)
{
    return (tr_log_sink){.set = l->set, .fn = l->set ? api_log_line : NULL, .ctx = (void *)l};
}
