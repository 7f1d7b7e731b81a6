/*
 * drift.c -- how far two traces of the same config are apart: the per-tensor digests a trace records at the end
 * ("param" records, trace.h), and the drift report `trainrun verify` prints when a run does not reproduce a
 * recording bit for bit (typically: recorded with one PyTorch version, run with another).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "splitmix.h"
#include "trace.h"

void tr_param_digest_compute(tr_param_digest *d, const char *name, const void *bytes, size_t nbytes, int64_t n,
                             int is_f32)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->numel = n;
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *p = bytes;
    for (size_t left = nbytes; left > 0;) { /* zlib's length is a uInt */
        const uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
        crc = crc32(crc, p, chunk);
        p += chunk;
        left -= chunk;
    }
    d->crc32 = (uint32_t)crc;
    double sq = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = is_f32 ? (double)((const float *)bytes)[i] : (double)((const int64_t *)bytes)[i];
        sq += x * x;
        const uint64_t h = tr_splitmix64((uint64_t)i); /* trace.h: the sign bits of the sketch */
        for (int j = 0; j < TR_SKETCH_DIM; j++) d->sketch[j] += (h >> j) & 1 ? -x : x;
    }
    d->l2 = sqrt(sq);
}

int tr_param_digests(trs_model *model, tr_param_digest **out, int64_t *n, tr_error *err)
{
    *out = NULL;
    *n = 0;
    int64_t count = 0;
    if (trs_model_state_describe(model, NULL, 0, &count) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "state_dict: %s", trs_last_error());
    trs_state_desc *desc = calloc((size_t)(count ? count : 1), sizeof *desc);
    void **bufs = calloc((size_t)(count ? count : 1), sizeof *bufs);
    size_t *sizes = calloc((size_t)(count ? count : 1), sizeof *sizes);
    tr_param_digest *d = calloc((size_t)(count ? count : 1), sizeof *d);
    int rc = (desc && bufs && sizes && d) ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "state_dict digests: out of memory");
    if (!rc && trs_model_state_describe(model, desc, count, &count) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "state_dict: %s", trs_last_error());
    for (int64_t i = 0; !rc && i < count; i++) {
        sizes[i] = desc[i].nbytes;
        if (!(bufs[i] = malloc(sizes[i] ? sizes[i] : 1)))
            rc = tr_error_set(err, TR_E_RUNTIME, "state_dict digests: out of memory");
    }
    if (!rc && trs_model_state_read_all(model, bufs, sizes, count) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "state_dict: %s", trs_last_error());
    for (int64_t i = 0; !rc && i < count; i++) {
        const trs_dtype t = desc[i].dtype;
        const size_t esize = t == TRS_DTYPE_FLOAT32 ? 4 : t == TRS_DTYPE_INT64 ? 8 : 0;
        if (!esize) {
            rc = tr_error_set(err, TR_E_RUNTIME, "state_dict entry %s: dtype not float32 or int64", desc[i].name);
            break;
        }
        tr_param_digest_compute(&d[i], desc[i].name, bufs[i], sizes[i], (int64_t)(sizes[i] / esize),
                                t == TRS_DTYPE_FLOAT32);
    }
    for (int64_t i = 0; bufs && i < count; i++) free(bufs[i]);
    free(bufs);
    free(sizes);
    free(desc);
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    *n = count;
    return TR_OK;
}

/* |a - b| / |b|, 0 when equal, |a - b| when b is 0, inf when either is not finite and they differ. */
static double rel_diff(double a, double b)
{
    if (memcmp(&a, &b, sizeof a) == 0) return 0;
    if (!isfinite(a) || !isfinite(b)) return INFINITY;
    const double d = fabs(a - b);
    return b != 0 ? d / fabs(b) : d;
}

/* Steps shown in the loss table: 1, 2, 5, 10, 20, 50, ... (and the last). */
static int shown_step(int64_t k)
{
    while (k >= 10 && k % 10 == 0) k /= 10;
    return k == 1 || k == 2 || k == 5;
}

static const char *or_unknown(const char *s) { return s && s[0] ? s : "?"; }

void tr_trace_drift_report(FILE *f, const tr_trace *got, const tr_trace *want)
{
    fprintf(f, "drift report: this run (%s, libtorch %s) vs the recording (%s, libtorch %s)\n",
            or_unknown(got->producer), or_unknown(got->libtorch), or_unknown(want->producer),
            or_unknown(want->libtorch));
    const int64_t n = got->n_steps < want->n_steps ? got->n_steps : want->n_steps;
    int64_t first = 0;
    for (int64_t k = 1; k <= n && !first; k++) {
        if (!got->have[k - 1] || !want->have[k - 1]) continue;
        const tr_trace_step *a = &got->steps[k - 1], *b = &want->steps[k - 1];
        if (memcmp(&a->loss, &b->loss, sizeof(double)) || memcmp(&a->lr, &b->lr, sizeof(double))) first = k;
    }
    if (got->n_steps != want->n_steps)
        fprintf(f, "  steps: %lld in this run, %lld recorded\n", (long long)got->n_steps, (long long)want->n_steps);
    if (!first) {
        fprintf(f, "  steps 1-%lld: every loss and lr bit-identical\n", (long long)n);
    } else {
        const tr_trace_step *a = &got->steps[first - 1], *b = &want->steps[first - 1];
        fprintf(f, "  first differing step: %lld (loss %.9g vs %.9g, lr %.9g vs %.9g)\n", (long long)first, a->loss,
                b->loss, a->lr, b->lr);
        fprintf(f, "  loss relative difference |a - b| / |b| by step:\n");
        fprintf(f, "    %10s  %12s  %12s  %10s  %10s\n", "step", "this run", "recorded", "rel diff", "max so far");
        double worst = 0;
        int64_t above[3] = {0, 0, 0}; /* the first step above 1e-6, 1e-3, 1e-1 */
        static const double k_levels[3] = {1e-6, 1e-3, 1e-1};
        for (int64_t k = 1; k <= n; k++) {
            if (!got->have[k - 1] || !want->have[k - 1]) continue;
            const tr_trace_step *sa = &got->steps[k - 1], *sb = &want->steps[k - 1];
            const double r = rel_diff(sa->loss, sb->loss);
            if (r > worst || isnan(r)) worst = r;
            for (int l = 0; l < 3; l++)
                if (!above[l] && !(r <= k_levels[l])) above[l] = k;
            if (shown_step(k) || k == n)
                fprintf(f, "    %10lld  %12.6g  %12.6g  %10.3g  %10.3g\n", (long long)k, sa->loss, sb->loss, r, worst);
        }
        fprintf(f, "  first step with a loss relative difference above");
        for (int l = 0; l < 3; l++) {
            if (above[l]) fprintf(f, "%s %g: %lld", l ? "," : "", k_levels[l], (long long)above[l]);
            else fprintf(f, "%s %g: none", l ? "," : "", k_levels[l]);
        }
        fputc('\n', f);
    }
    if (want->n_evals > 0 || got->n_evals > 0) {
        fprintf(f, "  evals (correct / samples, loss): this run | recorded\n");
        int64_t ge = 0;
        for (int64_t we = 0; we < want->n_evals; we++) {
            const tr_trace_eval *b = &want->evals[we];
            while (ge < got->n_evals && got->evals[ge].step < b->step) ge++;
            const tr_trace_eval *a = NULL;
            for (int64_t j = ge; j < got->n_evals && got->evals[j].step == b->step; j++)
                if (strcmp(got->evals[j].split, b->split) == 0) a = &got->evals[j];
            if (a)
                fprintf(f, "    %-5s after step %-7lld %lld / %lld, %.6g | %lld / %lld, %.6g%s\n", b->split,
                        (long long)b->step, (long long)a->correct, (long long)a->samples, a->loss,
                        (long long)b->correct, (long long)b->samples, b->loss,
                        a->correct == b->correct && a->samples == b->samples ? "" : "   (counts differ)");
            else
                fprintf(f, "    %-5s after step %-7lld (none) | %lld / %lld, %.6g\n", b->split, (long long)b->step,
                        (long long)b->correct, (long long)b->samples, b->loss);
        }
    }
    if (!got->n_params || !want->n_params) {
        fprintf(f, "  final parameters: %s has no per-tensor records; crc32 %08x vs %08x\n",
                !want->n_params ? "the recording" : "this run", (unsigned)got->params_crc32,
                (unsigned)want->params_crc32);
        return;
    }
    fprintf(f, "  final parameters per state_dict entry: | ||a|| - ||b|| | / ||b|| (exact) and ||a - b|| / ||b|| "
               "(estimated from a %d-dim sketch, typically within 20%%)\n",
            TR_SKETCH_DIM);
    fprintf(f, "    %-32s %10s  %10s  %10s\n", "name", "numel", "norm diff", "est diff");
    int64_t equal = 0;
    for (int64_t i = 0; i < want->n_params; i++) {
        const tr_param_digest *b = &want->params[i], *a = NULL;
        for (int64_t j = 0; j < got->n_params && !a; j++)
            if (strcmp(got->params[(i + j) % got->n_params].name, b->name) == 0) a = &got->params[(i + j) % got->n_params];
        if (!a) {
            fprintf(f, "    %-32s %10lld  (not in this run)\n", b->name, (long long)b->numel);
            continue;
        }
        if (a->numel != b->numel) {
            fprintf(f, "    %-32s %10lld  (this run has %lld elements)\n", b->name, (long long)b->numel,
                    (long long)a->numel);
            continue;
        }
        if (a->crc32 == b->crc32) {
            equal++;
            fprintf(f, "    %-32s %10lld  %10s  %10s\n", b->name, (long long)b->numel, "identical", "identical");
            continue;
        }
        double sq = 0;
        for (int j = 0; j < TR_SKETCH_DIM; j++) sq += (a->sketch[j] - b->sketch[j]) * (a->sketch[j] - b->sketch[j]);
        const double est = sqrt(sq / TR_SKETCH_DIM);
        const double scale = b->l2 > 0 ? b->l2 : 1;
        fprintf(f, "    %-32s %10lld  %10.3g  %10.3g\n", b->name, (long long)b->numel, fabs(a->l2 - b->l2) / scale,
                est / scale);
    }
    fprintf(f, "  %lld of %lld entries bit-identical\n", (long long)equal, (long long)want->n_params);
}
