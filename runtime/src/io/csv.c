/* csv.c -- numeric CSV tables (see csv.h). */
#include "csv.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Read a whole (possibly gzip-compressed) file into a NUL-terminated buffer. */
static int slurp(const char *path, char **text, size_t *len, tr_error *err)
{
    gzFile f = gzopen(path, "rb");
    if (!f) { /* a path that names nothing readable is the user's input (2); anything else the machine's */
        const int e = errno ? errno : ENOENT;
        const int user = e == ENOENT || e == ENOTDIR || e == EACCES || e == EISDIR || e == ENAMETOOLONG;
        return tr_error_set(err, user ? TR_E_CONFIG : TR_E_RUNTIME, "%s: cannot open: %s", path, strerror(e));
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            gzclose(f);
            return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
        }
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
            continue;
        }
        const int got = gzread(f, buf + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
        if (got < 0) {
            int code = 0;
            const char *msg = gzerror(f, &code);
            char m[256];
            snprintf(m, sizeof m, "%s", msg ? msg : "read error");
            free(buf);
            gzclose(f);
            return tr_error_set(err, TR_E_RUNTIME, "%s: cannot read (byte %zu): %s", path, n, m);
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    gzclose(f);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return TR_OK;
}

void tr_csv_table_free(tr_csv_table *t)
{
    free(t->v);
    free(t->line);
    memset(t, 0, sizeof *t);
}

/* Room for element n of the array whose pointer is at `arrp` (*cap elements of `size` bytes), as tr_csv_read grows
 * its values and its line numbers: the array doubled when n == *cap. TR_OK, or TR_E_RUNTIME "PATH: out of memory"
 * with the array and *cap as they were. The pointer is read and written through memcpy, so one helper serves
 * arrays of any element type. */
static int room_for_one(void *arrp, size_t *cap, size_t n, size_t size, const char *path, tr_error *err)
{
    if (n != *cap) return TR_OK;
    void *a;
    memcpy(&a, arrp, sizeof a);
    void *b = realloc(a, 2 * *cap * size);
    if (!b) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    memcpy(arrp, &b, sizeof b);
    *cap *= 2;
    return TR_OK;
}

int tr_csv_read(const char *path, int64_t header_lines, tr_csv_table *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    int rc = slurp(path, &text, &len, err);
    if (rc) return rc;
    size_t cap = 1024, ncap = 64;
    double *v = malloc(cap * sizeof *v);
    int64_t *lines = malloc(ncap * sizeof *lines);
    int64_t rows = 0, cols = -1, first_line = 0, lineno = 0;
    size_t nv = 0;
    char *p = text;
    while (!rc && *p) {
        char *eol = strchr(p, '\n');
        char *next = eol ? eol + 1 : p + strlen(p);
        if (eol) *eol = '\0';
        if (eol > p && eol[-1] == '\r') eol[-1] = '\0';
        lineno++;
        const char *q = p;
        while (*q == ' ' || *q == '\t') q++;
        if (lineno <= header_lines || *q == '\0') {
            p = next;
            continue;
        }
        const int commas = strchr(p, ',') != NULL;
        int64_t field = 0;
        const char *c = p;
        for (;;) {
            while (*c == ' ' || *c == '\t') c++;
            if (!commas && *c == '\0') break;
            field++;
            const char *cell = c;
            char *end = NULL;
            errno = 0;
            const double x = strtod(cell, &end);
            const char *after = end;
            while (after && (*after == ' ' || *after == '\t')) after++;
            const int whole = end != cell && (*after == '\0' || (commas ? *after == ',' : after != end));
            if (!whole || !isfinite(x)) {
                size_t w = commas ? strcspn(cell, ",") : strcspn(cell, " \t");
                while (w > 0 && (cell[w - 1] == ' ' || cell[w - 1] == '\t')) w--;
                char shown[256]; /* a binary file's bytes would drive the terminal: escaped */
                tr_escape_bytes(cell, w > 60 ? 60 : w, shown, sizeof shown);
                /* text in the first row read is most often a header the config does not skip */
                char hint[96] = "";
                if (rows == 0 && !whole)
                    snprintf(hint, sizeof hint, " (a header row? set data.header_lines: %lld to skip it)",
                             (long long)lineno);
                rc = tr_error_set(err, TR_E_CONFIG, "%s:%lld:%lld: field %lld: '%s' is not a %snumber%s", path,
                                  (long long)lineno, (long long)(cell - p + 1), (long long)field, shown,
                                  whole ? "finite " : "", hint);
                break;
            }
            if ((rc = room_for_one(&v, &cap, nv, sizeof *v, path, err))) break;
            v[nv++] = x;
            c = after;
            if (commas) {
                if (*c == '\0') break;
                c++; /* the comma */
            }
        }
        if (rc) break;
        if (cols < 0) {
            cols = field;
            first_line = lineno;
        } else if (field != cols) {
            rc = tr_error_set(err, TR_E_CONFIG, "%s:%lld: %lld fields; the first row (line %lld) has %lld", path,
                              (long long)lineno, (long long)field, (long long)first_line, (long long)cols);
            break;
        }
        if ((rc = room_for_one(&lines, &ncap, (size_t)rows, sizeof *lines, path, err))) break;
        lines[rows++] = lineno;
        p = next;
    }
    free(text);
    if (!rc && rows == 0)
        rc = tr_error_set(err, TR_E_CONFIG, "%s: no data rows (after %lld header lines)", path, (long long)header_lines);
    if (rc) {
        free(v);
        free(lines);
        return rc;
    }
    out->v = v;
    out->line = lines;
    out->rows = rows;
    out->cols = cols;
    return TR_OK;
}

int tr_csv_columns(const char *spec, int64_t ncols, const char *key, int64_t **out, int64_t *n, tr_error *err)
{
    *out = NULL;
    *n = 0;
    int64_t *cols = malloc((size_t)(ncols > 0 ? ncols : 1) * 4 * sizeof *cols);
    int64_t cnt = 0, cap = (ncols > 0 ? ncols : 1) * 4;
    if (!cols) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", key);
    const char *p = spec;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        long long a = strtoll(p, &end, 10), b;
        if (end == p) goto syntax;
        p = end;
        b = a;
        if (*p == '-' && p[1] != '\0') { /* a range a-b (b may be negative: "0--2") */
            const char *q = p + 1;
            b = strtoll(q, &end, 10);
            if (end == q) goto syntax;
            p = end;
        }
        while (*p == ' ') p++;
        if (*p && *p != ',') goto syntax;
        const long long ra = a < 0 ? ncols + a : a, rb = b < 0 ? ncols + b : b;
        if (ra < 0 || ra >= ncols || rb < 0 || rb >= ncols) {
            free(cols);
            return tr_error_set(err, TR_E_CONFIG, "%s: '%s': column %lld is outside the table's %lld columns (0 to %lld)",
                                key, spec, ra < 0 || ra >= ncols ? a : b, (long long)ncols, (long long)ncols - 1);
        }
        for (long long c = ra; ra <= rb ? c <= rb : c >= rb; c += ra <= rb ? 1 : -1) {
            if (cnt == cap) {
                free(cols);
                return tr_error_set(err, TR_E_CONFIG, "%s: '%s': too many columns", key, spec);
            }
            cols[cnt++] = c;
        }
    }
    if (cnt == 0) {
        free(cols);
        return tr_error_set(err, TR_E_CONFIG, "%s: '%s' names no column", key, spec);
    }
    *out = cols;
    *n = cnt;
    return TR_OK;
syntax:
    free(cols);
    return tr_error_set(err, TR_E_CONFIG, "%s: '%s': expected column numbers and ranges like \"0-29\" or \"0,2,-1\"",
                        key, spec);
}

/* The columns a data set was read from (csv_load), which the test table without targets is read by
 * (csv_unlabeled). */
typedef struct csv_layout {
    int64_t cols;    /* the features table's column count */
    int separate;    /* the targets had a table of their own */
    int64_t *fc, nf; /* feature columns, 0-based, of the features table */
    int64_t *tc, nt; /* target columns of the targets table */
} csv_layout;

static void csv_layout_free(csv_layout *l)
{
    free(l->fc);
    free(l->tc);
    memset(l, 0, sizeof *l);
}

/* The end of a csv table's load into `out` (csv_load, csv_unlabeled): after an error (rc) what was allocated is
 * freed and rc returned; else out is n rows of nf features, each a [nf, 1, 1] sample, and TR_OK. */
static int csv_dataset_done(int rc, tr_dataset *out, int64_t n, int64_t nf)
{
    if (!rc) {
        out->n = n;
        out->c = nf;
        out->h = out->w = 1;
    } else {
        tr_dataset_free(out);
    }
    return rc;
}

/* tr_csv_load; `pre` (may be NULL): the features table, already read (taken over: freed here); `lay` (may be
 * NULL): receives the columns used (the caller frees it with csv_layout_free). */
static int csv_load(const char *features_path, const char *targets_path, int64_t header_lines,
                    const char *feature_columns, const char *target_columns, tr_target_kind target, tr_dataset *out,
                    tr_csv_table *pre, csv_layout *lay, tr_error *err)
{
    memset(out, 0, sizeof *out);
    const int separate = targets_path && targets_path[0] && strcmp(targets_path, features_path) != 0;
    tr_csv_table ft = {0}, tt = {0};
    int64_t *fc = NULL, *tc = NULL, nf = 0, nt = 0;
    int rc = TR_OK;
    if (pre) {
        ft = *pre;
        memset(pre, 0, sizeof *pre);
    } else {
        rc = tr_csv_read(features_path, header_lines, &ft, err);
    }
    const tr_csv_table *T = &ft;
    const char *tpath = features_path;
    if (!rc && separate) {
        rc = tr_csv_read(targets_path, header_lines, &tt, err);
        T = &tt;
        tpath = targets_path;
        if (!rc && tt.rows != ft.rows)
            rc = tr_error_set(err, TR_E_CONFIG, "%s has %lld rows but %s has %lld; targets go row for row",
                              targets_path, (long long)tt.rows, features_path, (long long)ft.rows);
    }
    if (!rc) rc = tr_csv_columns(target_columns, T->cols, "data.target_columns", &tc, &nt, err);
    if (!rc && feature_columns && feature_columns[0]) {
        rc = tr_csv_columns(feature_columns, ft.cols, "data.feature_columns", &fc, &nf, err);
    } else if (!rc) {
        fc = malloc((size_t)ft.cols * sizeof *fc);
        if (!fc) rc = tr_error_set(err, TR_E_RUNTIME, "out of memory");
        for (int64_t c = 0; !rc && c < ft.cols; c++) {
            int is_target = 0;
            for (int64_t j = 0; !separate && j < nt; j++) is_target |= tc[j] == c;
            if (!is_target) fc[nf++] = c;
        }
        if (!rc && nf == 0) rc = tr_error_set(err, TR_E_CONFIG, "data.feature_columns: no column is left for features");
    }
    if (!rc && target == TR_TARGET_CLASS && nt != 1)
        rc = tr_error_set(err, TR_E_CONFIG, "data.target_columns: class targets take one column, got %lld",
                          (long long)nt);
    const int64_t n = ft.rows;
    if (!rc) {
        out->x = malloc((size_t)n * (size_t)nf * sizeof *out->x);
        out->y = calloc((size_t)n, sizeof *out->y);
        if (target != TR_TARGET_CLASS) out->t = malloc((size_t)n * (size_t)nt * sizeof *out->t);
        if (!out->x || !out->y || (target != TR_TARGET_CLASS && !out->t))
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %lld rows", features_path, (long long)n);
    }
    int64_t max_class = -1;
    for (int64_t i = 0; !rc && i < n; i++) {
        for (int64_t j = 0; j < nf; j++) out->x[i * nf + j] = (float)ft.v[i * ft.cols + fc[j]];
        for (int64_t j = 0; j < nt && !rc; j++) {
            const double v = T->v[i * T->cols + tc[j]];
            if (target == TR_TARGET_CLASS) {
                if (v < 0 || v != floor(v) || v > 1e9)
                    rc = tr_error_set(err, TR_E_CONFIG, "%s:%lld: field %lld: %g is not a class index (an integer >= 0)",
                                      tpath, (long long)T->line[i], (long long)tc[j] + 1, v);
                else {
                    out->y[i] = (int64_t)v;
                    if (out->y[i] > max_class) max_class = out->y[i];
                }
            } else if (target == TR_TARGET_MULTI_HOT && v != 0.0 && v != 1.0) {
                rc = tr_error_set(err, TR_E_CONFIG, "%s:%lld: field %lld: %g is not a multi-hot value (0 or 1)", tpath,
                                  (long long)T->line[i], (long long)tc[j] + 1, v);
            } else {
                out->t[i * nt + j] = (float)v;
            }
        }
    }
    if (!rc && lay) {
        *lay = (csv_layout){.cols = ft.cols, .separate = separate, .fc = fc, .nf = nf, .tc = tc, .nt = nt};
        fc = tc = NULL;
    }
    free(fc);
    free(tc);
    tr_csv_table_free(&ft);
    tr_csv_table_free(&tt);
    if ((rc = csv_dataset_done(rc, out, n, nf))) return rc;
    if (target == TR_TARGET_CLASS) {
        out->num_classes = max_class + 1;
    } else {
        out->t_cols = nt;
        out->num_classes = nt;
    }
    return TR_OK;
}

int tr_csv_load(const char *features_path, const char *targets_path, int64_t header_lines,
                const char *feature_columns, const char *target_columns, tr_target_kind target, tr_dataset *out,
                tr_error *err)
{
    return csv_load(features_path, targets_path, header_lines, feature_columns, target_columns, target, out, NULL,
                    NULL, err);
}

/* The column count of a table like the training features table with the target columns taken out: the
 * training table's less its (distinct) target columns, or all of them when the targets had their own table. */
static int64_t csv_unlabeled_cols(const csv_layout *lay)
{
    if (lay->separate) return lay->cols;
    int64_t n = lay->cols;
    for (int64_t j = 0; j < lay->nt; j++) {
        int dup = 0;
        for (int64_t i = 0; i < j; i++) dup |= lay->tc[i] == lay->tc[j];
        n -= !dup;
    }
    return n;
}

/* A test table without targets (inputs alone: out->unlabeled = 1, y all zeros, no t): feature column f of the
 * training table is column f - (target columns before f) here (the same column when the targets had their own
 * table). Errors: TR_E_CONFIG when a feature column is also a target column (it is not in this table). */
static int csv_unlabeled(const char *path, tr_csv_table *tab, const csv_layout *lay, tr_dataset *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    int64_t *col = malloc((size_t)(lay->nf > 0 ? lay->nf : 1) * sizeof *col);
    if (!col) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    int rc = TR_OK;
    for (int64_t j = 0; !rc && j < lay->nf; j++) {
        int64_t before = 0;
        for (int64_t i = 0; !lay->separate && i < lay->nt; i++) {
            if (lay->tc[i] == lay->fc[j])
                rc = tr_error_set(err, TR_E_CONFIG, "%s: %lld columns, no target columns; but training's feature "
                                  "column %lld is also a target column (data.feature_columns)", path,
                                  (long long)tab->cols, (long long)lay->fc[j]);
            int dup = 0;
            for (int64_t k = 0; k < i; k++) dup |= lay->tc[k] == lay->tc[i];
            before += !dup && lay->tc[i] < lay->fc[j];
        }
        col[j] = lay->fc[j] - before;
    }
    const int64_t n = tab->rows, nf = lay->nf;
    if (!rc) {
        out->x = malloc((size_t)(n * nf) * sizeof *out->x);
        out->y = calloc((size_t)n, sizeof *out->y);
        if (!out->x || !out->y) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %lld rows", path,
                                                  (long long)n);
    }
    for (int64_t i = 0; !rc && i < n; i++)
        for (int64_t j = 0; j < nf; j++) out->x[i * nf + j] = (float)tab->v[i * tab->cols + col[j]];
    free(col);
    tr_csv_table_free(tab);
    if ((rc = csv_dataset_done(rc, out, n, nf))) return rc;
    out->unlabeled = 1;
    return TR_OK;
}

/* A reader's error led by the config key that named its file: "data.train_csv: ./x.csv:3:5: ..." (the targets
 * table's key when the message is about that file; left as it is when it already leads with a key). */
static int csv_keyed(int rc, const char *fkey, const char *fpath, const char *tkey, const char *tpath, tr_error *err)
{
    if (!rc || !err || strncmp(err->msg, "data.", 5) == 0) return rc;
    const char *key = tpath && tpath[0] && strncmp(err->msg, tpath, strlen(tpath)) == 0 &&
                              strncmp(err->msg, fpath, strlen(fpath)) != 0
                          ? tkey
                          : fkey;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return tr_error_set(err, rc, "%s: %s", key, msg);
}


void tr_tabular_finish(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, int64_t features)
{
    if (cfg->data.standardize) {
        float *ox[] = {val->x, test->x};
        const int64_t on[] = {val->n, test->n};
        tr_standardize_columns(train->x, train->n, ox, on, 2, features);
        if (cfg->data.target == TR_TARGET_REGRESSION) {
            float *ot[] = {val->t, test->t};
            tr_standardize_columns(train->t, train->n, ot, on, 2, train->t_cols);
        }
    }
    if (val->num_classes < train->num_classes) val->num_classes = train->num_classes;
    if (test->num_classes < train->num_classes) test->num_classes = train->num_classes;
}

/* z-score columns of a [n, cols] float array with the mean and (population) std of `ref`'s rows. */
void tr_standardize_columns(float *ref, int64_t n_ref, float *const *others, const int64_t *n_others, int n_o,
                        int64_t cols)
{
    for (int64_t j = 0; j < cols; j++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n_ref; i++) mean += ref[i * cols + j];
        mean /= (double)(n_ref > 0 ? n_ref : 1);
        for (int64_t i = 0; i < n_ref; i++) var += (ref[i * cols + j] - mean) * (ref[i * cols + j] - mean);
        double sd = sqrt(var / (double)(n_ref > 0 ? n_ref : 1));
        if (!(sd > 0)) sd = 1.0; /* a constant column stays centred */
        for (int64_t i = 0; i < n_ref; i++) ref[i * cols + j] = (float)((ref[i * cols + j] - mean) / sd);
        for (int o = 0; o < n_o; o++)
            if (others[o])
                for (int64_t i = 0; i < n_others[o]; i++)
                    others[o][i * cols + j] = (float)((others[o][i * cols + j] - mean) / sd);
    }
}

int tr_csv_setup(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err)
{
    const tr_config *c = cfg;
    char fx[2 * TR_PATH_MAX], fy[2 * TR_PATH_MAX];
    tr_config_resolve_data_path(cfg, c->data.train_csv, fx, sizeof fx);
    fy[0] = '\0';
    if (c->data.train_targets[0]) tr_config_resolve_data_path(cfg, c->data.train_targets, fy, sizeof fy);
    csv_layout lay = {0};
    int rc = csv_keyed(csv_load(fx, fy, c->data.header_lines, c->data.feature_columns, c->data.target_columns,
                                c->data.target, train, NULL, &lay, err),
                       "data.train_csv", fx, "data.train_targets", fy, err);
    if (rc) return rc;
    if (c->data.train_subset > 0 && c->data.train_subset < train->n) train->n = c->data.train_subset;
    /* data.test_size rows are held out of training even when data.test_csv names the test set: a run's training
     * split (and its data.standardize statistics) stay the same when `trainrun predict` points data.test_csv at
     * new inputs */
    if (c->data.test_size > 0) {
        if ((rc = tr_dataset_carve(train, c->data.test_size, c->seed ^ 0x7e57c0de7e57c0deULL, test, "data.test_size",
                                   err))) {
            csv_layout_free(&lay);
            return rc;
        }
        if (!c->eval.test_at_end || c->data.test_csv[0]) tr_dataset_free(test);
    }
    if (c->eval.test_at_end && c->data.test_csv[0]) {
        tr_config_resolve_data_path(cfg, c->data.test_csv, fx, sizeof fx);
        fy[0] = '\0';
        if (c->data.test_targets[0]) tr_config_resolve_data_path(cfg, c->data.test_targets, fy, sizeof fy);
        /* no data.test_targets and a table with the training columns less the target columns: inputs alone */
        const int64_t ucols = csv_unlabeled_cols(&lay);
        tr_csv_table tab = {0};
        rc = fy[0] ? TR_OK : tr_csv_read(fx, c->data.header_lines, &tab, err);
        if (!rc && !fy[0] && tab.cols == ucols)
            rc = csv_unlabeled(fx, &tab, &lay, test, err);
        else if (!rc)
            rc = csv_load(fx, fy, c->data.header_lines, c->data.feature_columns, c->data.target_columns,
                          c->data.target, test, fy[0] ? NULL : &tab, NULL, err);
        tr_csv_table_free(&tab);
        csv_layout_free(&lay);
        if ((rc = csv_keyed(rc, "data.test_csv", fx, "data.test_targets", fy, err))) return rc;
        if (test->c != train->c || (!test->unlabeled && test->t_cols != train->t_cols))
            return tr_error_set(err, TR_E_CONFIG, "data.test_csv: %s: %lld features / %lld targets; training has "
                                "%lld / %lld (a test table without the targets, for trainrun predict: %lld columns)",
                                fx, (long long)test->c, (long long)test->t_cols, (long long)train->c,
                                (long long)train->t_cols, (long long)ucols);
    }
    csv_layout_free(&lay);
    if (c->data.val_size > 0 &&
        (rc = tr_dataset_carve(train, c->data.val_size, c->seed, val, "data.val_size", err)))
        return rc;
    tr_tabular_finish(c, train, val, test, train->c);
    return TR_OK;
}
