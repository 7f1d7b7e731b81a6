#include "trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tr_trace_write_header(FILE *f, const char *libtorch, int threads, int interop_threads, int deterministic)
{
    fprintf(f, "trainrun-trace 1\nmeta libtorch %s\nmeta threads %d\nmeta interop_threads %d\nmeta deterministic %d\n"
               "meta producer trainrun\n",
            libtorch, threads, interop_threads, deterministic);
    fflush(f);
}

void tr_trace_write_step(FILE *f, int64_t step, double loss, double lr)
{
    fprintf(f, "step %lld loss %a lr %a\n", (long long)step, loss, lr);
    fflush(f);
}

void tr_trace_write_eval(FILE *f, const char *split, int64_t step, int64_t correct, int64_t samples, double loss)
{
    fprintf(f, "eval %s %lld correct %lld samples %lld loss %a\n", split, (long long)step, (long long)correct,
            (long long)samples, loss);
    fflush(f);
}

void tr_trace_write_resume(FILE *f, int64_t step)
{
    fprintf(f, "resume %lld\n", (long long)step);
    fflush(f);
}

void tr_trace_write_config(FILE *f, const char *fingerprint, char *const *overrides, int n, const char *yaml)
{
    fprintf(f, "meta config_fingerprint %s\n", fingerprint);
    for (int i = 0; i < n; i++) fprintf(f, "override %s\n", overrides[i]);
    for (const char *p = yaml; p && *p;) {
        const size_t len = strcspn(p, "\n");
        fprintf(f, len ? "config %.*s\n" : "config\n", (int)len, p);
        p += len;
        if (*p == '\n') p++;
    }
    fflush(f);
}

void tr_trace_write_final(FILE *f, uint32_t crc, double abs_sum)
{
    fprintf(f, "final params_crc32 %08x params_abs_sum %a\n", (unsigned)crc, abs_sum);
    fflush(f);
}

void tr_trace_write_param(FILE *f, const tr_param_digest *d)
{
    fprintf(f, "param %s numel %lld crc32 %08x l2 %a sketch ", d->name, (long long)d->numel, (unsigned)d->crc32, d->l2);
    for (int j = 0; j < TR_SKETCH_DIM; j++) fprintf(f, j ? ",%a" : "%a", d->sketch[j]);
    fputc('\n', f);
    fflush(f);
}

/* "param NAME numel N crc32 HEX l2 HEX sketch HEX,HEX,..." into *d; -1 when malformed. */
static int parse_param(const char *line, tr_param_digest *d)
{
    char name[256], crc[16], l2[64];
    long long numel;
    int used = 0;
    if (sscanf(line, "param %255s numel %lld crc32 %15s l2 %63s sketch %n", name, &numel, crc, l2, &used) != 4 ||
        used == 0 || numel < 0)
        return -1;
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->numel = numel;
    char *end;
    d->crc32 = (uint32_t)strtoul(crc, &end, 16);
    if (*end) return -1;
    d->l2 = strtod(l2, &end);
    if (*end || !(d->l2 >= 0)) return -1;
    const char *p = line + used;
    for (int j = 0; j < TR_SKETCH_DIM; j++) {
        d->sketch[j] = strtod(p, &end);
        if (end == p) return -1;
        p = end;
        if (j + 1 < TR_SKETCH_DIM && *p++ != ',') return -1;
    }
    return (*p == '\n' || *p == '\0') ? 0 : -1;
}

void tr_trace_free(tr_trace *t)
{
    free(t->params);
    free(t->steps);
    free(t->have);
    free(t->evals);
    for (int i = 0; i < t->n_overrides; i++) free(t->overrides[i]);
    free(t->overrides);
    free(t->config_yaml);
    memset(t, 0, sizeof *t);
}

static int put_step(tr_trace *t, int64_t k, double loss, double lr, int64_t *cap)
{
    if (k > *cap) {
        int64_t nc = *cap ? *cap : 1024;
        while (nc < k) nc *= 2;
        tr_trace_step *s = realloc(t->steps, (size_t)nc * sizeof *s);
        if (!s) return -1;
        t->steps = s;
        unsigned char *h = realloc(t->have, (size_t)nc);
        if (!h) return -1;
        t->have = h;
        memset(t->have + *cap, 0, (size_t)(nc - *cap));
        *cap = nc;
    }
    t->steps[k - 1] = (tr_trace_step){k, loss, lr};
    t->have[k - 1] = 1;
    if (k > t->n_steps) t->n_steps = k;
    return 0;
}

int tr_trace_read(const char *path, tr_trace *t, tr_error *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open", path);
    char line[4096];
    int64_t cap = 0, ecap = 0, lineno = 0;
    size_t config_len = 0;
    int rc = TR_OK, header = 0;
    while (rc == TR_OK && fgets(line, sizeof line, f)) {
        lineno++;
        const size_t ll = strlen(line);
        if (ll == sizeof line - 1 && line[ll - 1] != '\n') {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s:%lld: line longer than %zu bytes", path, (long long)lineno,
                              sizeof line - 2);
            break;
        }
        if (line[0] == '#' || line[0] == '\n') continue;
        long long k, c, n;
        char a[64], b[64], split[16];
        if (!header) {
            if (strcmp(line, "trainrun-trace 1\n") != 0 && strcmp(line, "trainrun-trace 1") != 0)
                rc = tr_error_set(err, TR_E_RUNTIME, "%s:%lld: not a trainrun trace (expected 'trainrun-trace 1')",
                                  path, (long long)lineno);
            header = 1;
        } else if (sscanf(line, "step %lld loss %63s lr %63s", &k, a, b) == 3) {
            char *ea, *eb;
            const double loss = strtod(a, &ea), lr = strtod(b, &eb);
            if (k < 1 || k > (1LL << 32) || *ea || *eb || put_step(t, k, loss, lr, &cap))
                rc = tr_error_set(err, TR_E_RUNTIME, "%s:%lld: bad step record", path, (long long)lineno);
        } else if (sscanf(line, "eval %15s %lld correct %lld samples %lld loss %63s", split, &k, &c, &n, a) == 5) {
            if (t->n_evals == ecap) {
                ecap = ecap ? 2 * ecap : 64;
                tr_trace_eval *e = realloc(t->evals, (size_t)ecap * sizeof *e);
                if (!e) {
                    rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
                    break;
                }
                t->evals = e;
            }
            tr_trace_eval *e = &t->evals[t->n_evals++];
            snprintf(e->split, sizeof e->split, "%s", split);
            e->step = k;
            e->correct = c;
            e->samples = n;
            e->loss = strtod(a, NULL);
        } else if (sscanf(line, "resume %lld", &k) == 1) {
            t->resumes++;
            /* evals recorded after step k by the killed process are superseded by the resumed ones */
            int64_t keep = 0;
            for (int64_t i = 0; i < t->n_evals; i++)
                if (t->evals[i].step <= k) t->evals[keep++] = t->evals[i];
            t->n_evals = keep;
        } else if (strncmp(line, "param ", 6) == 0) {
            tr_param_digest d;
            if (parse_param(line, &d)) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s:%lld: bad param record", path, (long long)lineno);
            } else {
                tr_param_digest *np = realloc(t->params, (size_t)(t->n_params + 1) * sizeof *np);
                if (!np) {
                    rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
                    break;
                }
                t->params = np;
                t->params[t->n_params++] = d;
            }
        } else if (sscanf(line, "final params_crc32 %63s params_abs_sum %63s", a, b) == 2) {
            t->has_final = 1;
            t->params_crc32 = (uint32_t)strtoul(a, NULL, 16);
            t->params_abs_sum = strtod(b, NULL);
        } else if (sscanf(line, "meta libtorch %31s", t->libtorch) == 1) {
        } else if (sscanf(line, "meta threads %d", &t->threads) == 1) {
        } else if (sscanf(line, "meta interop_threads %d", &t->interop_threads) == 1) {
        } else if (sscanf(line, "meta deterministic %d", &t->deterministic) == 1) {
        } else if (sscanf(line, "meta producer %31s", t->producer) == 1) {
        } else if (sscanf(line, "meta config_fingerprint %64s", t->config_fingerprint) == 1) {
        } else if (strncmp(line, "override ", 9) == 0) {
            char **o = realloc(t->overrides, (size_t)(t->n_overrides + 2) * sizeof *o);
            const size_t len = strcspn(line + 9, "\n");
            if (o) t->overrides = o;
            if (!o || !(o[t->n_overrides] = strndup(line + 9, len))) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
                break;
            }
            o[++t->n_overrides] = NULL;
        } else if (strncmp(line, "config", 6) == 0 && (line[6] == ' ' || line[6] == '\n' || line[6] == '\0')) {
            const char *text = line[6] == ' ' ? line + 7 : "\n";
            const size_t len = strlen(text);
            char *cy = realloc(t->config_yaml, config_len + len + 2);
            if (!cy) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
                break;
            }
            t->config_yaml = cy;
            memcpy(cy + config_len, text, len + 1);
            config_len += len;
            if (len == 0 || cy[config_len - 1] != '\n') cy[config_len++] = '\n', cy[config_len] = '\0';
        }
    }
    fclose(f);
    if (rc == TR_OK && !header) rc = tr_error_set(err, TR_E_RUNTIME, "%s: empty trace", path);
    if (rc) tr_trace_free(t);
    return rc;
}

/* 1 when a and b differ beyond rtol (rtol 0: any bit). */
static int differs(double a, double b, double rtol, double *rel)
{
    const double d = fabs(a - b), scale = fabs(b);
    *rel = scale > 0 ? d / scale : d;
    if (rtol <= 0) return memcmp(&a, &b, sizeof a) != 0;
    return !(d <= rtol * scale);
}

int tr_trace_compare(const tr_trace *got, const tr_trace *want, double rtol, int64_t from_step, char *msg, size_t n,
                     char *warn, size_t wn)
{
    msg[0] = '\0';
    warn[0] = '\0';
    if (strcmp(got->libtorch, want->libtorch) != 0 || got->threads != want->threads ||
        got->interop_threads != want->interop_threads || got->deterministic != want->deterministic)
        snprintf(warn, wn,
                 "recorded with libtorch %s, %d/%d threads, deterministic %d; now libtorch %s, %d/%d threads, "
                 "deterministic %d: bit-identity is not expected",
                 want->libtorch, want->threads, want->interop_threads, want->deterministic, got->libtorch,
                 got->threads, got->interop_threads, got->deterministic);
    if (got->n_steps != want->n_steps) {
        snprintf(msg, n, "%lld steps recorded, %lld now", (long long)want->n_steps, (long long)got->n_steps);
        return 1;
    }
    for (int64_t k = from_step < 1 ? 1 : from_step; k <= want->n_steps; k++) {
        if (!want->have[k - 1] || !got->have[k - 1]) {
            snprintf(msg, n, "step %lld: missing from the %s trace", (long long)k, want->have[k - 1] ? "new" : "recorded");
            return 1;
        }
        const tr_trace_step *a = &got->steps[k - 1], *b = &want->steps[k - 1];
        double rel;
        if (differs(a->loss, b->loss, rtol, &rel)) {
            snprintf(msg, n, "step %lld: loss %a vs recorded %a, relative difference %.3g", (long long)k, a->loss,
                     b->loss, rel);
            return 1;
        }
        if (differs(a->lr, b->lr, rtol, &rel)) {
            snprintf(msg, n, "step %lld: lr %a vs recorded %a, relative difference %.3g", (long long)k, a->lr, b->lr,
                     rel);
            return 1;
        }
    }
    if (rtol > 0) return 0;
    int64_t ge = 0, we = 0;
    for (; we < want->n_evals; we++) {
        const tr_trace_eval *b = &want->evals[we];
        if (b->step < from_step) continue;
        while (ge < got->n_evals && got->evals[ge].step < b->step) ge++;
        const tr_trace_eval *a = ge < got->n_evals ? &got->evals[ge] : NULL;
        double rel;
        if (!a || a->step != b->step || strcmp(a->split, b->split) || a->correct != b->correct ||
            a->samples != b->samples || differs(a->loss, b->loss, 0, &rel)) {
            snprintf(msg, n, "%s eval after step %lld: %lld/%lld correct, loss %a vs recorded %lld/%lld, %a", b->split,
                     (long long)b->step, a ? (long long)a->correct : -1LL, a ? (long long)a->samples : -1LL,
                     a ? a->loss : 0.0, (long long)b->correct, (long long)b->samples, b->loss);
            return 1;
        }
        ge++;
    }
    if (want->has_final && (!got->has_final || got->params_crc32 != want->params_crc32 ||
                            memcmp(&got->params_abs_sum, &want->params_abs_sum, sizeof(double)) != 0)) {
        snprintf(msg, n, "final parameters: crc32 %08x, sum|x| %a vs recorded %08x, %a", (unsigned)got->params_crc32,
                 got->params_abs_sum, (unsigned)want->params_crc32, want->params_abs_sum);
        return 1;
    }
    return 0;
}

void tr_trace_event(FILE *f, const tr_event *ev)
{
    switch (ev->kind) {
    case TR_EV_STEP: tr_trace_write_step(f, ev->step, ev->loss, ev->lr); break;
    case TR_EV_EVAL:
        if (strcmp(ev->weights, "live") == 0)
            tr_trace_write_eval(f, ev->split, ev->step, ev->correct, ev->samples, ev->loss);
        break;
    case TR_EV_TRAINED:
        tr_trace_write_final(f, ev->crc, ev->abs_sum);
        for (int64_t i = 0; i < ev->n_params; i++) tr_trace_write_param(f, &ev->params[i]);
        break;
    default: break;
    }
}
