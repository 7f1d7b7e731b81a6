#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io.h"
#include "json_out.h"

tr_task tr_task_of_loss(trs_loss_kind loss)
{
    switch (loss) {
    case TRS_LOSS_BCE_WITH_LOGITS: return TR_TASK_MULTI_LABEL;
    case TRS_LOSS_MSE:
    case TRS_LOSS_SMOOTH_L1: return TR_TASK_REGRESSION;
    case TRS_LOSS_CROSS_ENTROPY:
    default: return TR_TASK_CLASSIFY;
    }
}

int tr_metrics_init(tr_metrics *m, tr_task task, int64_t k, tr_error *err)
{
    memset(m, 0, sizeof *m);
    m->task = task;
    m->k = k;
    m->batch.num_classes = k;
    const size_t kk = (size_t)k * (size_t)k, k1 = (size_t)k;
    if (task == TR_TASK_CLASSIFY) {
        m->confusion = calloc(kk, sizeof *m->confusion);
        m->batch.confusion = calloc(kk, sizeof *m->batch.confusion);
        if (!m->confusion || !m->batch.confusion) goto nomem;
    } else if (task == TR_TASK_MULTI_LABEL) {
        m->tp = calloc(k1, sizeof *m->tp);
        m->fp = calloc(k1, sizeof *m->fp);
        m->fn = calloc(k1, sizeof *m->fn);
        m->batch.tp = calloc(k1, sizeof *m->batch.tp);
        m->batch.fp = calloc(k1, sizeof *m->batch.fp);
        m->batch.fn = calloc(k1, sizeof *m->batch.fn);
        if (!m->tp || !m->fp || !m->fn || !m->batch.tp || !m->batch.fp || !m->batch.fn) goto nomem;
    }
    return TR_OK;
nomem:
    tr_metrics_free(m);
    return tr_error_set(err, TR_E_RUNTIME, "metrics: out of memory for %lld classes", (long long)k);
}

void tr_metrics_set_lm(tr_metrics *m, const char *bits_name)
{
    m->bits_name = bits_name;
    free(m->confusion);
    free(m->batch.confusion);
    m->confusion = m->batch.confusion = NULL;
}

double tr_nats_to_bits(double nats) { return nats / log(2.0); }
double tr_perplexity(double nats) { return exp(nats); }

void tr_metrics_reset(tr_metrics *m)
{
    m->loss_sum = m->sse = m->sae = 0.0;
    m->samples = m->correct = m->topk_correct = m->elements = m->targets = 0;
    const size_t k1 = (size_t)m->k;
    if (m->confusion) memset(m->confusion, 0, k1 * k1 * sizeof *m->confusion);
    if (m->tp) memset(m->tp, 0, k1 * sizeof *m->tp);
    if (m->fp) memset(m->fp, 0, k1 * sizeof *m->fp);
    if (m->fn) memset(m->fn, 0, k1 * sizeof *m->fn);
}

void tr_metrics_add(tr_metrics *m, const trs_step_result *r)
{
    m->loss_sum += r->loss * (double)r->samples;
    m->samples += r->samples;
    m->correct += r->correct;
    m->targets += r->targets;
    m->topk_correct += r->topk_correct;
    m->sse += r->sse;
    m->sae += r->sae;
    m->elements += r->elements;
    if (m->confusion)
        for (int64_t i = 0; i < m->k * m->k; i++) m->confusion[i] += m->batch.confusion[i];
    if (m->tp)
        for (int64_t i = 0; i < m->k; i++) {
            m->tp[i] += m->batch.tp[i];
            m->fp[i] += m->batch.fp[i];
            m->fn[i] += m->batch.fn[i];
        }
}

void tr_metrics_free(tr_metrics *m)
{
    free(m->confusion);
    free(m->tp);
    free(m->fp);
    free(m->fn);
    free(m->batch.confusion);
    free(m->batch.tp);
    free(m->batch.fp);
    free(m->batch.fn);
    memset(m, 0, sizeof *m);
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

double tr_metrics_loss(const tr_metrics *m) { return ratio(m->loss_sum, (double)m->samples); }
/* Accuracy is over the targets counted (positions of [N, T] labels that are not -100); results that carry no
 * target count (filled by hand) fall back to samples. For [N] labels without -100 the two are equal. */
static double counted(const tr_metrics *m) { return (double)(m->targets > 0 ? m->targets : m->samples); }
double tr_metrics_accuracy(const tr_metrics *m) { return ratio((double)m->correct, counted(m)); }
double tr_metrics_topk_accuracy(const tr_metrics *m) { return ratio((double)m->topk_correct, counted(m)); }
double tr_metrics_mse(const tr_metrics *m) { return ratio(m->sse, (double)m->elements); }
double tr_metrics_mae(const tr_metrics *m) { return ratio(m->sae, (double)m->elements); }

double tr_metrics_micro_f1(const tr_metrics *m)
{
    if (!m->tp) return 0.0;
    int64_t tp = 0, fp = 0, fn = 0;
    for (int64_t i = 0; i < m->k; i++) {
        tp += m->tp[i];
        fp += m->fp[i];
        fn += m->fn[i];
    }
    return ratio(2.0 * (double)tp, (double)(2 * tp + fp + fn));
}

double tr_metrics_macro_f1(const tr_metrics *m)
{
    if (!m->tp || m->k == 0) return 0.0;
    double sum = 0.0;
    for (int64_t i = 0; i < m->k; i++) sum += ratio(2.0 * (double)m->tp[i], (double)(2 * m->tp[i] + m->fp[i] + m->fn[i]));
    return sum / (double)m->k;
}

static void write_array(FILE *f, const char *name, const int64_t *v, int64_t n)
{
    fprintf(f, ",\"%s\":[", name);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
    fputc(']', f);
}

void tr_metrics_write_json(const tr_metrics *m, int top_k, FILE *f)
{
    if (m->bits_name) {
        fprintf(f, ",\"%s\":", m->bits_name);
        tr_json_number(f, tr_nats_to_bits(tr_metrics_loss(m)));
        fputs(",\"perplexity\":", f);
        tr_json_number(f, tr_perplexity(tr_metrics_loss(m)));
        fprintf(f, ",\"tokens\":%lld", (long long)m->targets);
    }
    switch (m->task) {
    case TR_TASK_CLASSIFY:
        if (top_k > 0) {
            fprintf(f, ",\"top_k\":%d,\"top_k_accuracy\":", top_k);
            tr_json_number(f, tr_metrics_topk_accuracy(m));
        }
        break;
    case TR_TASK_MULTI_LABEL:
        fputs(",\"micro_f1\":", f);
        tr_json_number(f, tr_metrics_micro_f1(m));
        fputs(",\"macro_f1\":", f);
        tr_json_number(f, tr_metrics_macro_f1(m));
        write_array(f, "tp", m->tp, m->k);
        write_array(f, "fp", m->fp, m->k);
        write_array(f, "fn", m->fn, m->k);
        break;
    case TR_TASK_REGRESSION:
        fputs(",\"mse\":", f);
        tr_json_number(f, tr_metrics_mse(m));
        fputs(",\"mae\":", f);
        tr_json_number(f, tr_metrics_mae(m));
        fprintf(f, ",\"elements\":%lld", (long long)m->elements);
        break;
    }
}

/* The confusion matrix as CSV: a header row "true\\pred,0,1,...", then one row per true class. */
static int write_confusion_fn(const void *arg, FILE *f)
{
    const tr_metrics *m = arg;
    fputs("true\\pred", f);
    for (int64_t j = 0; j < m->k; j++) fprintf(f, ",%lld", (long long)j);
    fputc('\n', f);
    for (int64_t i = 0; i < m->k; i++) {
        fprintf(f, "%lld", (long long)i);
        for (int64_t j = 0; j < m->k; j++) fprintf(f, ",%lld", (long long)m->confusion[i * m->k + j]);
        fputc('\n', f);
    }
    return TR_OK;
}

int tr_metrics_write_confusion(const tr_metrics *m, const char *path, tr_error *err)
{
    if (!m->confusion) return tr_error_set(err, TR_E_RUNTIME, "%s: no confusion matrix for this task", path);
    return tr_io_write_atomic_with(path, write_confusion_fn, m, err); /* temp, fsync, rename: never half a file */
}

tr_eval_figures tr_metrics_figures(const tr_metrics *m, int64_t step)
{
    return (tr_eval_figures){.has = 1, .loss = tr_metrics_loss(m), .accuracy = tr_metrics_accuracy(m),
                             .top_k_accuracy = tr_metrics_topk_accuracy(m), .micro_f1 = tr_metrics_micro_f1(m),
                             .macro_f1 = tr_metrics_macro_f1(m), .mse = tr_metrics_mse(m), .mae = tr_metrics_mae(m),
                             .samples = m->samples, .step = step};
}
