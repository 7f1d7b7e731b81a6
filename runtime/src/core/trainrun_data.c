/*
 * trainrun_data.c -- the embedding API's data sources (trainrun.h, data): caller arrays copied into a data set,
 * or a batch callback; a run's splits hold them (trainrun_run_set_data).
 */
#include "trainrun_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================================================ data */

int trainrun_data_arrays_targets(const trainrun_batch *all, int64_t target_cols, trainrun_data **out)
{
    if (!out) return TRAINRUN_E_INVALID;
    trainrun_data *d = calloc(1, sizeof *d);
    if (!(*out = d)) return TRAINRUN_E_NOMEM;
    if (target_cols < 0)
        return tr_error_set(&d->err, TRAINRUN_E_INVALID, "target_cols %lld must be >= 0", (long long)target_cols);
    trs_batch b;
    int rc = tr_api_batch_view_in(all, &b, 1, &d->err);
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
    d->ndim = b.ndim;
    d->ds.c = b.shape[1];
    d->ds.h = b.ndim >= 3 ? b.shape[2] : 1;
    d->ds.w = b.ndim == 4 ? b.shape[3] : 1;
    for (int i = 1; i < b.ndim; i++) d->sample[i - 1] = b.shape[i];
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

const char *trainrun_data_errmsg(const trainrun_data *d) { return d ? d->err.msg : tr_api_null_handle; }

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
