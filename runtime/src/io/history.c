/*
 * history.c -- metrics.jsonl read back (untrusted: every line parsed with cJSON and checked), the resume rule
 * applied, and metrics.csv written from it (history.h).
 */
#include "history.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

#define MAX_LINE (64 * 1024)

static void put(tr_hist_record *r, const char *name, const cJSON *v)
{
    if (r->n >= TR_HIST_MAX_FIELDS || !v) return;
    if (!cJSON_IsNumber(v) && !cJSON_IsNull(v)) return;
    snprintf(r->f[r->n].name, TR_HIST_NAME, "%s", name);
    r->f[r->n].value = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    r->n++;
}

int tr_history_parse_line(const char *line, tr_hist_record *out)
{
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON *epoch = cJSON_GetObjectItemCaseSensitive(o, "epoch");
    if (!cJSON_IsString(type) || !cJSON_IsNumber(step) || !(step->valuedouble >= 0) ||
        step->valuedouble > 9007199254740992.0 || step->valuedouble != floor(step->valuedouble)) {
        cJSON_Delete(o);
        return 0;
    }
    out->step = (int64_t)step->valuedouble;
    out->epoch = cJSON_IsNumber(epoch) && epoch->valuedouble >= 0 && epoch->valuedouble < 9e15
                     ? (int64_t)epoch->valuedouble : -1;
    const char *t = type->valuestring;
    if (strcmp(t, "train") == 0) {
        out->type = TR_HIST_TRAIN;
        out->partial = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "partial"));
        put(out, "train_loss", cJSON_GetObjectItemCaseSensitive(o, "loss"));
        put(out, "train_accuracy", cJSON_GetObjectItemCaseSensitive(o, "accuracy"));
        put(out, "lr", cJSON_GetObjectItemCaseSensitive(o, "lr"));
        put(out, "samples_per_s", cJSON_GetObjectItemCaseSensitive(o, "samples_per_s"));
        put(out, "time_s", cJSON_GetObjectItemCaseSensitive(o, "time_s"));
    } else if (strcmp(t, "eval") == 0) {
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "weights");
        if (cJSON_IsString(split) && (strcmp(split->valuestring, "val") == 0 || strcmp(split->valuestring, "test") == 0)) {
            out->type = TR_HIST_EVAL;
            const int ema = cJSON_IsString(w) && strcmp(w->valuestring, "ema") == 0;
            static const char *const keys[] = {"loss", "accuracy", "top_k_accuracy", "micro_f1", "macro_f1", "mse", "mae"};
            for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
                char name[TR_HIST_NAME];
                snprintf(name, sizeof name, "%s%s_%s", split->valuestring, ema ? "_ema" : "", keys[i]);
                put(out, name, cJSON_GetObjectItemCaseSensitive(o, keys[i]));
            }
        }
    } else if (strcmp(t, "resume") == 0) {
        out->type = TR_HIST_RESUME;
    }
    if (out->type == TR_HIST_TRAIN || out->type == TR_HIST_EVAL) {
        static const char *const mem[] = {"allocated", "peak", "reserved", "rss"};
        for (size_t i = 0; i < sizeof mem / sizeof *mem; i++) put(out, mem[i], cJSON_GetObjectItemCaseSensitive(o, mem[i]));
    }
    cJSON_Delete(o);
    return 1;
}

int tr_history_add(tr_history *h, const tr_hist_record *rec, tr_error *err)
{
    if (rec->type == TR_HIST_RESUME) { /* the rule: drop what this resume superseded */
        size_t k = 0;
        for (size_t i = 0; i < h->n; i++) {
            const tr_hist_record *r = &h->r[i];
            if (r->step > rec->step || (r->type == TR_HIST_TRAIN && r->partial)) continue;
            if (k != i) h->r[k] = *r;
            k++;
        }
        h->n = k;
    }
    if (h->n == h->cap) {
        const size_t cap = h->cap ? 2 * h->cap : 256;
        tr_hist_record *r = realloc(h->r, cap * sizeof *r);
        if (!r) return tr_error_set(err, TR_E_RUNTIME, "metrics history: out of memory");
        h->r = r;
        h->cap = cap;
    }
    h->r[h->n++] = *rec;
    return TR_OK;
}

int tr_history_load(tr_history *h, const char *path, tr_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = TR_OK;
    tr_hist_record rec;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        if (len > MAX_LINE || !tr_history_parse_line(line, &rec)) {
            if (len > 1) h->skipped++;
            continue;
        }
        rc = tr_history_add(h, &rec, err);
    }
    if (!rc && ferror(f)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: read error", path);
    free(line);
    fclose(f);
    return rc;
}

void tr_history_free(tr_history *h)
{
    free(h->r);
    memset(h, 0, sizeof *h);
}

int tr_hist_get(const tr_hist_record *rec, const char *name, double *v)
{
    for (int i = 0; i < rec->n; i++)
        if (strcmp(rec->f[i].name, name) == 0) {
            *v = rec->f[i].value;
            return 1;
        }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ CSV */

static int is_row(const tr_hist_record *r) { return r->type == TR_HIST_TRAIN || r->type == TR_HIST_EVAL; }

/* The columns of `h`'s rows in first-seen order, "step" and "epoch" first (malloc'd names). */
static int csv_columns(const tr_history *h, char ***cols_out, size_t *n_out)
{
    size_t cap = 2 + TR_HIST_MAX_FIELDS, n = 0;
    char **cols = malloc(cap * sizeof *cols);
    if (!cols) return TR_E_RUNTIME;
    cols[n++] = strdup("step");
    cols[n++] = strdup("epoch");
    for (size_t i = 0; i < h->n; i++) {
        if (!is_row(&h->r[i])) continue;
        for (int j = 0; j < h->r[i].n; j++) {
            const char *name = h->r[i].f[j].name;
            size_t k = 0;
            while (k < n && strcmp(cols[k], name) != 0) k++;
            if (k < n) continue;
            if (n == cap) {
                char **bigger = realloc(cols, 2 * cap * sizeof *cols);
                if (!bigger) break;
                cols = bigger;
                cap *= 2;
            }
            cols[n++] = strdup(name);
        }
    }
    for (size_t k = 0; k < n; k++)
        if (!cols[k]) {
            for (size_t j = 0; j < n; j++) free(cols[j]);
            free(cols);
            return TR_E_RUNTIME;
        }
    *cols_out = cols;
    *n_out = n;
    return TR_OK;
}

static void free_cols(char **cols, size_t n)
{
    for (size_t i = 0; i < n; i++) free(cols[i]);
    free(cols);
}

/* The shortest of %.15g, %.16g, %.17g that reads back as v (cJSON's rule): exact, and readable. */
static void print_number(FILE *f, double v)
{
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

static void write_row(FILE *f, const tr_hist_record *r, char *const *cols, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (k) fputc(',', f);
        double v;
        if (k == 0) fprintf(f, "%lld", (long long)r->step);
        else if (k == 1 && r->epoch >= 0) fprintf(f, "%lld", (long long)r->epoch);
        else if (k > 1 && tr_hist_get(r, cols[k], &v) && isfinite(v)) print_number(f, v);
    }
    fputc('\n', f);
}

static void write_header(FILE *f, char *const *cols, size_t n)
{
    for (size_t k = 0; k < n; k++) fprintf(f, "%s%s", k ? "," : "", cols[k]);
    fputc('\n', f);
}

int tr_history_write_csv(const tr_history *h, FILE *f)
{
    char **cols;
    size_t n;
    if (csv_columns(h, &cols, &n)) return TR_E_RUNTIME;
    write_header(f, cols, n);
    for (size_t i = 0; i < h->n; i++)
        if (is_row(&h->r[i])) write_row(f, &h->r[i], cols, n);
    free_cols(cols, n);
    return ferror(f) ? TR_E_RUNTIME : TR_OK;
}

void tr_csv_sink_open(tr_csv_sink *s, const char *run_dir, void (*warn)(void *ctx, const char *msg), void *ctx)
{
    memset(s, 0, sizeof *s);
    snprintf(s->jsonl, sizeof s->jsonl, "%s/metrics.jsonl", run_dir);
    snprintf(s->csv, sizeof s->csv, "%s/metrics.csv", run_dir);
    s->warn = warn;
    s->warn_ctx = ctx;
}

static void sink_fail(tr_csv_sink *s, const char *msg)
{
    if (!s->failed && s->warn) {
        char line[1400];
        snprintf(line, sizeof line, "metrics.csv is no longer written: %s", msg);
        s->warn(s->warn_ctx, line);
    }
    s->failed = 1;
    if (s->f) fclose(s->f);
    s->f = NULL;
}

/* metrics.csv from metrics.jsonl as it now stands, replaced atomically; then open for appending. */
static void sink_rewrite(tr_csv_sink *s)
{
    tr_csv_sink_close(s); /* the old file and columns go; the sink is reopened below */
    tr_history h = {0};
    tr_error err = {0};
    if (tr_history_load(&h, s->jsonl, &err)) {
        tr_history_free(&h);
        sink_fail(s, err.msg);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    int rc = mem ? tr_history_write_csv(&h, mem) : TR_E_RUNTIME;
    if (mem && fclose(mem) != 0) rc = TR_E_RUNTIME;
    if (!rc) rc = csv_columns(&h, &s->cols, &s->n_cols);
    tr_history_free(&h);
    if (rc) {
        free(buf);
        sink_fail(s, "out of memory");
        return;
    }
    rc = tr_io_write_file_atomic(s->csv, buf, len, &err);
    free(buf);
    if (rc) {
        sink_fail(s, err.msg);
        return;
    }
    s->f = fopen(s->csv, "a");
    if (!s->f) sink_fail(s, strerror(errno));
}

void tr_csv_sink_record(tr_csv_sink *s, const char *line)
{
    if (s->failed || !s->jsonl[0]) return;
    tr_hist_record r;
    if (!tr_history_parse_line(line, &r)) return;
    if (r.type == TR_HIST_RESUME) {
        sink_rewrite(s);
        return;
    }
    if (!is_row(&r)) return;
    int fits = s->f != NULL;
    for (int j = 0; fits && j < r.n; j++) {
        size_t k = 0;
        while (k < s->n_cols && strcmp(s->cols[k], r.f[j].name) != 0) k++;
        fits = k < s->n_cols;
    }
    if (!fits) {
        sink_rewrite(s); /* the record is in metrics.jsonl already: the rewrite holds its row */
        return;
    }
    write_row(s->f, &r, s->cols, s->n_cols);
    if (fflush(s->f) != 0 || ferror(s->f)) sink_fail(s, "write error (disk full?)");
}

void tr_csv_sink_close(tr_csv_sink *s)
{
    if (s->f) fclose(s->f);
    s->f = NULL;
    free_cols(s->cols, s->n_cols);
    s->cols = NULL;
    s->n_cols = 0;
}
