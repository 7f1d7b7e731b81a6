/*
 * monitor.c -- monitored metrics by name, and the top-k set's membership (monitor.h). The decisions on them are
 * core/selection.c.
 */
#include "monitor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char *const k_metrics[] = {"loss", "accuracy", "top_k_accuracy", "micro_f1", "macro_f1", "mse", "mae"};
#define N_METRICS (sizeof k_metrics / sizeof *k_metrics)

const char *tr_monitor_metric_name(tr_monitor_metric m)
{
    return (size_t)m < N_METRICS ? k_metrics[m] : "?";
}

int tr_monitor_parse(const char *name, tr_monitor *out, char *why, size_t n)
{
    tr_monitor m = {0};
    const char *rest = name;
    if (strncmp(rest, "val_", 4) == 0) rest += 4;
    else if (strncmp(rest, "test_", 5) == 0) rest += 5, m.test = 1;
    else rest = NULL;
    if (rest && strncmp(rest, "ema_", 4) == 0) rest += 4, m.ema = 1;
    size_t i = 0;
    while (rest && i < N_METRICS && strcmp(rest, k_metrics[i]) != 0) i++;
    if (!rest || i == N_METRICS) {
        snprintf(why, n, "'%s' is not a metric: expected <split>[_ema]_<metric> with split val or test and metric "
                 "loss, accuracy, top_k_accuracy, micro_f1, macro_f1, mse or mae (e.g. val_loss, val_ema_accuracy)",
                 name);
        return -1;
    }
    m.metric = (tr_monitor_metric)i;
    if (out) *out = m;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ top-k */

int tr_topk_has(const tr_topk *t, int64_t step)
{
    for (int i = 0; i < t->n; i++)
        if (t->step[i] == step) return 1;
    return 0;
}
