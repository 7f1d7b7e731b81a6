/* yaml_schema.c -- typed fields (yaml_schema.h): one descriptor per key, parsed, range-checked, defaulted and
 * written from one table. */
#include "yaml_schema.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "suggest.h"

/** True when v lies in r (and is finite). */
static bool in_range(const tr_yf_range *r, double v)
{
    if (!isfinite(v))
        return false;
    if (r->has_min && (r->min_excl ? !(v > r->min) : !(v >= r->min)))
        return false;
    if (r->has_max && (r->max_excl ? !(v < r->max) : !(v <= r->max)))
        return false;
    return true;
}

/** A range bound as text: integers without a fraction, other values as shortest floats. */
static void bound_text(double v, char *buf, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, n, "%.0f", v);
    else
        tr_yfmt_float(v, buf, n);
}

void tr_yf_range_text(const tr_yf_range *r, char *buf, size_t n)
{
    char lo[64], hi[64];
    bound_text(r->min, lo, sizeof lo);
    bound_text(r->max, hi, sizeof hi);
    if (r->has_min && r->has_max)
        snprintf(buf, n, "%s%s, %s%s", r->min_excl ? "(" : "[", lo, hi, r->max_excl ? ")" : "]");
    else if (r->has_min)
        snprintf(buf, n, "%s %s", r->min_excl ? ">" : ">=", lo);
    else if (r->has_max)
        snprintf(buf, n, "%s %s", r->max_excl ? "<" : "<=", hi);
    else
        buf[0] = '\0';
}

/**
 * The rule part of an out-of-range message into buf: "> 0", "in [0, 1)", plus " and finite" (or just "finite")
 * when the offending value is not finite.
 */
static void rule_text(const tr_yf_range *r, bool nonfinite, char *buf, size_t n)
{
    char rt[128];
    tr_yf_range_text(r, rt, sizeof rt);
    const char *in = (rt[0] == '[' || rt[0] == '(') ? "in " : "";
    if (nonfinite)
        snprintf(buf, n, "%s%s%sfinite", in, rt, rt[0] ? " and " : "");
    else
        snprintf(buf, n, "%s%s", in, rt);
}

/** "TEXT is out of range (must be RULE)" at node; `nonfinite` when the value is an infinity or NaN. */
static int range_error(const tr_yctx *ctx, const yaml_node_t *node, const char *path, const char *text,
                       const tr_yf_range *r, bool nonfinite)
{
    char rule[160];
    rule_text(r, nonfinite, rule, sizeof rule);
    if (rule[0])
        return tr_yerr(ctx, node, path, "%s is out of range (must be %s)", text, rule);
    return tr_yerr(ctx, node, path, "%s is out of range", text);
}

/** Report "expected WHAT, got ..." for node. */
static int type_error(const tr_yctx *ctx, const yaml_node_t *node, const char *path, const char *what)
{
    char got[160];
    tr_ydescribe(node, got, sizeof got);
    return tr_yerr(ctx, node, path, "expected %s, got %s", what, got);
}

/** Parse an integer node with range checks into *out. */
static int parse_int_node(const tr_yctx *ctx, const yaml_node_t *node, const char *path, const tr_yf_range *r,
                          int64_t *out)
{
    if (tr_yscalar_kind(node) != TR_YS_INT || node->type != YAML_SCALAR_NODE)
        return type_error(ctx, node, path, "an integer");
    const char *text = tr_ytext(node);
    int64_t v;
    if (tr_yparse_int(text, &v) != 0)
        return tr_yerr(ctx, node, path, "%s does not fit in a 64-bit integer", text);
    if (!in_range(r, (double)v))
        return range_error(ctx, node, path, text, r, false);
    *out = v;
    return TR_OK;
}

/** Parse a float node (ints accepted) with range checks into *out. */
static int parse_float_node(const tr_yctx *ctx, const yaml_node_t *node, const char *path, const tr_yf_range *r,
                            double *out)
{
    tr_ys_kind k = tr_yscalar_kind(node);
    if ((k != TR_YS_FLOAT && k != TR_YS_INT) || node->type != YAML_SCALAR_NODE)
        return type_error(ctx, node, path, "a float");
    const char *text = tr_ytext(node);
    double v;
    if (tr_yparse_float(text, &v) != 0)
        return tr_yerr(ctx, node, path, "%s does not fit in a double", text);
    if (!in_range(r, v))
        return range_error(ctx, node, path, text, r, !isfinite(v));
    *out = v;
    return TR_OK;
}

/** Parse a boolean node (true/false in the core schema's spellings) into *out. */
static int parse_bool_node(const tr_yctx *ctx, const yaml_node_t *node, const char *path, bool *out)
{
    if (tr_yscalar_kind(node) != TR_YS_BOOL || node->type != YAML_SCALAR_NODE)
        return type_error(ctx, node, path, "a boolean (true/false)");
    *out = tr_ytext(node)[0] == 't' || tr_ytext(node)[0] == 'T';
    return TR_OK;
}

/** An explicit tag (!!str, !custom) is refused: the schema's types decide. TR_OK or TR_E_CONFIG. */
static int check_untagged(const tr_yctx *ctx, const yaml_node_t *node, const char *path)
{
    if (!tr_yis_tagged(node)) return TR_OK;
    return tr_yerr(ctx, node, path, "explicit YAML tags are not supported (got '%s')", (const char *)node->tag);
}

/** The first n items of the list `node` at `path` as numbers with range checks: into dbl[n] (floats, ints
 * accepted) or, with dbl NULL, into i64[n] (integers). A message names the item as path[i]. TR_OK or
 * TR_E_CONFIG. */
static int parse_number_list(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *node, const char *path, size_t n,
                             const tr_yf_range *r, double *dbl, int64_t *i64)
{
    for (size_t i = 0; i < n; i++) {
        char ipath[600];
        tr_ypath_index(ipath, sizeof ipath, path, i);
        yaml_node_t *it = tr_yseq_item(doc, node, i);
        if (check_untagged(ctx, it, ipath) != TR_OK) return TR_E_CONFIG;
        const int rc = dbl ? parse_float_node(ctx, it, ipath, r, &dbl[i]) : parse_int_node(ctx, it, ipath, r, &i64[i]);
        if (rc != TR_OK) return TR_E_CONFIG;
    }
    return TR_OK;
}

/** Build "a, b, c" from a NULL-terminated name list. */
static size_t enum_list(const char *const *names, char *buf, size_t n)
{
    size_t count = 0;
    while (names[count])
        count++;
    tr_join(names, count, buf, n);
    return count;
}

int tr_yf_parse(const tr_yctx *ctx, yaml_document_t *doc, const tr_yf_field *f, yaml_node_t *node,
                const char *path, void *base)
{
    unsigned char *b = base;
    if (check_untagged(ctx, node, path) != TR_OK) return TR_E_CONFIG;
    if (node && node->type == YAML_SCALAR_NODE && strlen(tr_ytext(node)) != node->data.scalar.length)
        return tr_yerr(ctx, node, path, "value contains a NUL character");

    switch (f->type) {
    case TR_YF_INT:
    case TR_YF_INT64: {
        int64_t v;
        if (parse_int_node(ctx, node, path, &f->range, &v) != TR_OK)
            return TR_E_CONFIG;
        if (f->type == TR_YF_INT) {
            if (v < INT_MIN || v > INT_MAX)
                return tr_yerr(ctx, node, path, "%s does not fit in an int", tr_ytext(node));
            int iv = (int)v;
            memcpy(b + f->offset, &iv, sizeof iv);
        } else {
            memcpy(b + f->offset, &v, sizeof v);
        }
        return TR_OK;
    }
    case TR_YF_UINT64: {
        if (tr_yscalar_kind(node) != TR_YS_INT || node->type != YAML_SCALAR_NODE)
            return type_error(ctx, node, path, "an integer");
        const char *text = tr_ytext(node);
        uint64_t v;
        if (text[0] == '-') {
            int64_t sv;
            if (tr_yparse_int(text, &sv) != 0 || !in_range(&f->range, (double)sv) || sv < 0) {
                tr_yf_range r = f->range;
                if (!r.has_min) {
                    r.has_min = true;
                    r.min = 0;
                }
                return range_error(ctx, node, path, text, &r, false);
            }
            v = (uint64_t)sv;
        } else {
            if (tr_yparse_uint(text, &v) != 0)
                return tr_yerr(ctx, node, path, "%s does not fit in a 64-bit unsigned integer", text);
            if (!in_range(&f->range, (double)v))
                return range_error(ctx, node, path, text, &f->range, false);
        }
        memcpy(b + f->offset, &v, sizeof v);
        return TR_OK;
    }
    case TR_YF_FLOAT: {
        double v;
        if (parse_float_node(ctx, node, path, &f->range, &v) != TR_OK)
            return TR_E_CONFIG;
        memcpy(b + f->offset, &v, sizeof v);
        return TR_OK;
    }
    case TR_YF_BOOL:
    case TR_YF_BOOL_INT: {
        bool v = false;
        if (parse_bool_node(ctx, node, path, &v) != TR_OK)
            return TR_E_CONFIG;
        if (f->type == TR_YF_BOOL) {
            memcpy(b + f->offset, &v, sizeof v);
        } else {
            int iv = v ? 1 : 0;
            memcpy(b + f->offset, &iv, sizeof iv);
        }
        return TR_OK;
    }
    case TR_YF_STRING: {
        if (node && node->type != YAML_SCALAR_NODE)
            return type_error(ctx, node, path, "a string");
        const char *text = tr_yis_null(node) ? "" : tr_ytext(node);
        size_t len = strlen(text);
        if (len >= f->size)
            return tr_yerr(ctx, node, path, "value is too long (%zu bytes, at most %zu)", len, f->size - 1);
        char why[256];
        if (f->check_string && f->check_string(text, why, sizeof why) != 0)
            return tr_yerr(ctx, node, path, "%s", why);
        memset(b + f->offset, 0, f->size);
        memcpy(b + f->offset, text, len);
        return TR_OK;
    }
    case TR_YF_ENUM: {
        char list[512];
        enum_list(f->enum_names, list, sizeof list);
        char what[600];
        snprintf(what, sizeof what, "one of %s", list);
        if (!node || node->type != YAML_SCALAR_NODE || tr_yis_null(node))
            return type_error(ctx, node, path, what);
        const char *text = tr_ytext(node);
        size_t count = 0;
        while (f->enum_names[count])
            count++;
        for (size_t i = 0; i < count; i++) {
            if (strcmp(text, f->enum_names[i]) == 0) {
                int v = (int)i;
                memcpy(b + f->offset, &v, sizeof v);
                return TR_OK;
            }
        }
        const char *best = tr_suggest(text, f->enum_names, count);
        if (best)
            return tr_yerr(ctx, node, path, "'%s' is not one of %s; did you mean '%s'?", text, list, best);
        return tr_yerr(ctx, node, path, "'%s' is not one of %s", text, list);
    }
    case TR_YF_FLOAT_LIST: {
        char what[96];
        snprintf(what, sizeof what, "a list of 1 to %zu floats", f->size);
        double vals[64] = {0};
        size_t n = 0;
        if (f->size > 64)
            return tr_yerr(ctx, node, path, "internal error: list capacity too large");
        if (node && node->type == YAML_SEQUENCE_NODE) {
            n = tr_yseq_size(node);
            if ((n == 0 && f->def_n != 0) || n > f->size) /* a list whose default is empty may be empty */
                return tr_yerr(ctx, node, path, "expected %s, got %zu entries", what, n);
            if (parse_number_list(ctx, doc, node, path, n, &f->range, vals, NULL) != TR_OK) return TR_E_CONFIG;
        } else {
            tr_ys_kind k = tr_yscalar_kind(node);
            if (!node || node->type != YAML_SCALAR_NODE || (k != TR_YS_FLOAT && k != TR_YS_INT))
                return type_error(ctx, node, path, what);
            if (parse_float_node(ctx, node, path, &f->range, &vals[0]) != TR_OK)
                return TR_E_CONFIG;
            n = 1;
        }
        memset(b + f->offset, 0, f->size * sizeof(double));
        memcpy(b + f->offset, vals, n * sizeof(double));
        int cnt = (int)n;
        memcpy(b + f->aux_offset, &cnt, sizeof cnt);
        return TR_OK;
    }
    case TR_YF_INT64_PAIR: {
        const char *what = "an integer or a list of 2 integers";
        int64_t v[2];
        if (node && node->type == YAML_SEQUENCE_NODE) {
            if (tr_yseq_size(node) != 2)
                return tr_yerr(ctx, node, path, "expected %s, got %zu entries", what, tr_yseq_size(node));
            if (parse_number_list(ctx, doc, node, path, 2, &f->range, NULL, v) != TR_OK) return TR_E_CONFIG;
        } else {
            if (tr_yscalar_kind(node) != TR_YS_INT || node->type != YAML_SCALAR_NODE)
                return type_error(ctx, node, path, what);
            if (parse_int_node(ctx, node, path, &f->range, &v[0]) != TR_OK)
                return TR_E_CONFIG;
            v[1] = v[0];
        }
        memcpy(b + f->offset, &v[0], sizeof v[0]);
        memcpy(b + f->aux_offset, &v[1], sizeof v[1]);
        return TR_OK;
    }
    }
    return tr_yerr(ctx, node, path, "internal error: unknown field type %d", (int)f->type);
}

void tr_yf_set_default(const tr_yf_field *f, void *base)
{
    unsigned char *b = base;
    switch (f->type) {
    case TR_YF_INT:
    case TR_YF_BOOL_INT:
    case TR_YF_ENUM: {
        int v = (int)f->def_int;
        memcpy(b + f->offset, &v, sizeof v);
        break;
    }
    case TR_YF_INT64: {
        int64_t v = f->def_int;
        memcpy(b + f->offset, &v, sizeof v);
        break;
    }
    case TR_YF_UINT64: {
        uint64_t v = (uint64_t)f->def_int;
        memcpy(b + f->offset, &v, sizeof v);
        break;
    }
    case TR_YF_FLOAT:
        memcpy(b + f->offset, &f->def_float, sizeof f->def_float);
        break;
    case TR_YF_BOOL: {
        bool v = f->def_int != 0;
        memcpy(b + f->offset, &v, sizeof v);
        break;
    }
    case TR_YF_STRING: {
        const char *s = f->def_str ? f->def_str : "";
        size_t len = strlen(s);
        if (len >= f->size)
            len = f->size - 1;
        memset(b + f->offset, 0, f->size);
        memcpy(b + f->offset, s, len);
        break;
    }
    case TR_YF_FLOAT_LIST: {
        int n = f->def_n < 0 ? 0 : ((size_t)f->def_n > f->size ? (int)f->size : f->def_n);
        memset(b + f->offset, 0, f->size * sizeof(double));
        if (n > 0)
            memcpy(b + f->offset, f->def_list, (size_t)n * sizeof(double));
        memcpy(b + f->aux_offset, &n, sizeof n);
        break;
    }
    case TR_YF_INT64_PAIR: {
        int64_t v = f->def_int;
        memcpy(b + f->offset, &v, sizeof v);
        memcpy(b + f->aux_offset, &v, sizeof v);
        break;
    }
    }
}

/** "PATH: VALUE is out of range (must be RULE)" without a location (validation of a struct). */
static int check_error(tr_error *err, const char *path, const char *value, const tr_yf_range *r, bool nonfinite)
{
    char rule[160];
    rule_text(r, nonfinite, rule, sizeof rule);
    return tr_error_set(err, TR_E_CONFIG, "%s: %s is out of range (must be %s)", path, value, rule);
}

int tr_yf_check(const tr_yf_field *f, const void *base, const char *path, tr_error *err)
{
    const unsigned char *b = base;
    char text[64];
    switch (f->type) {
    case TR_YF_INT:
    case TR_YF_INT64:
    case TR_YF_UINT64:
    case TR_YF_INT64_PAIR: {
        int64_t v[2] = {0, 0};
        size_t n = 1;
        if (f->type == TR_YF_INT) {
            int iv;
            memcpy(&iv, b + f->offset, sizeof iv);
            v[0] = iv;
        } else if (f->type == TR_YF_UINT64) {
            uint64_t uv;
            memcpy(&uv, b + f->offset, sizeof uv);
            if (!in_range(&f->range, (double)uv)) {
                snprintf(text, sizeof text, "%" PRIu64, uv);
                return check_error(err, path, text, &f->range, false);
            }
            return TR_OK;
        } else {
            memcpy(&v[0], b + f->offset, sizeof v[0]);
            if (f->type == TR_YF_INT64_PAIR) {
                memcpy(&v[1], b + f->aux_offset, sizeof v[1]);
                n = 2;
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (!in_range(&f->range, (double)v[i])) {
                snprintf(text, sizeof text, "%" PRId64, v[i]);
                return check_error(err, path, text, &f->range, false);
            }
        }
        return TR_OK;
    }
    case TR_YF_FLOAT: {
        double v;
        memcpy(&v, b + f->offset, sizeof v);
        if (!in_range(&f->range, v)) {
            tr_yfmt_float(v, text, sizeof text);
            return check_error(err, path, text, &f->range, !isfinite(v));
        }
        return TR_OK;
    }
    case TR_YF_BOOL:
        return TR_OK;
    case TR_YF_BOOL_INT: {
        int v;
        memcpy(&v, b + f->offset, sizeof v);
        if (v != 0 && v != 1)
            return tr_error_set(err, TR_E_CONFIG, "%s: %d is not a boolean (0 or 1)", path, v);
        return TR_OK;
    }
    case TR_YF_STRING: {
        if (!memchr(b + f->offset, '\0', f->size))
            return tr_error_set(err, TR_E_CONFIG, "%s: string is not terminated within %zu bytes", path, f->size);
        char why[256];
        if (f->check_string && f->check_string((const char *)(b + f->offset), why, sizeof why) != 0)
            return tr_error_set(err, TR_E_CONFIG, "%s: %s", path, why);
        return TR_OK;
    }
    case TR_YF_ENUM: {
        int v;
        memcpy(&v, b + f->offset, sizeof v);
        int count = 0;
        while (f->enum_names[count])
            count++;
        if (v < 0 || v >= count)
            return tr_error_set(err, TR_E_CONFIG, "%s: %d is not a valid value", path, v);
        return TR_OK;
    }
    case TR_YF_FLOAT_LIST: {
        int n;
        memcpy(&n, b + f->aux_offset, sizeof n);
        if (n < (f->def_n == 0 ? 0 : 1) || (size_t)n > f->size)
            return tr_error_set(err, TR_E_CONFIG, "%s: has %d entries (must have 1 to %zu)", path, n, f->size);
        for (int i = 0; i < n; i++) {
            double v;
            memcpy(&v, b + f->offset + (size_t)i * sizeof(double), sizeof v);
            if (!in_range(&f->range, v)) {
                char ipath[600];
                tr_ypath_index(ipath, sizeof ipath, path, (size_t)i);
                tr_yfmt_float(v, text, sizeof text);
                return check_error(err, ipath, text, &f->range, !isfinite(v));
            }
        }
        return TR_OK;
    }
    }
    return tr_error_set(err, TR_E_CONFIG, "%s: internal error: unknown field type %d", path, (int)f->type);
}

/** Write a float list [a, b] from n doubles. */
static void write_float_list(FILE *out, const double *v, int n)
{
    char buf[64];
    fputc('[', out);
    for (int i = 0; i < n; i++) {
        tr_yfmt_float(v[i], buf, sizeof buf);
        fprintf(out, "%s%s", i ? ", " : "", buf);
    }
    fputc(']', out);
}

void tr_yf_write_value(const tr_yf_field *f, const void *base, FILE *out)
{
    const unsigned char *b = base;
    char buf[64];
    switch (f->type) {
    case TR_YF_INT:
    case TR_YF_BOOL_INT: {
        int v;
        memcpy(&v, b + f->offset, sizeof v);
        if (f->type == TR_YF_BOOL_INT)
            fputs(v ? "true" : "false", out);
        else
            fprintf(out, "%d", v);
        return;
    }
    case TR_YF_INT64: {
        int64_t v;
        memcpy(&v, b + f->offset, sizeof v);
        fprintf(out, "%" PRId64, v);
        return;
    }
    case TR_YF_UINT64: {
        uint64_t v;
        memcpy(&v, b + f->offset, sizeof v);
        fprintf(out, "%" PRIu64, v);
        return;
    }
    case TR_YF_FLOAT: {
        double v;
        memcpy(&v, b + f->offset, sizeof v);
        tr_yfmt_float(v, buf, sizeof buf);
        fputs(buf, out);
        return;
    }
    case TR_YF_BOOL: {
        bool v;
        memcpy(&v, b + f->offset, sizeof v);
        fputs(v ? "true" : "false", out);
        return;
    }
    case TR_YF_STRING: {
        char *s = malloc(f->size + 1);
        if (!s) {
            fputs("\"\"", out);
            return;
        }
        memcpy(s, b + f->offset, f->size);
        s[f->size] = '\0';
        tr_ywrite_quoted(out, s);
        free(s);
        return;
    }
    case TR_YF_ENUM: {
        int v, count = 0;
        memcpy(&v, b + f->offset, sizeof v);
        while (f->enum_names[count])
            count++;
        if (v >= 0 && v < count)
            fputs(f->enum_names[v], out);
        else
            fprintf(out, "%d", v);
        return;
    }
    case TR_YF_FLOAT_LIST: {
        int n;
        memcpy(&n, b + f->aux_offset, sizeof n);
        if (n < 0)
            n = 0;
        if ((size_t)n > f->size)
            n = (int)f->size;
        double v[64] = {0};
        if (f->size <= 64)
            memcpy(v, b + f->offset, (size_t)n * sizeof(double));
        write_float_list(out, v, f->size <= 64 ? n : 0);
        return;
    }
    case TR_YF_INT64_PAIR: {
        int64_t v0, v1;
        memcpy(&v0, b + f->offset, sizeof v0);
        memcpy(&v1, b + f->aux_offset, sizeof v1);
        fprintf(out, "[%" PRId64 ", %" PRId64 "]", v0, v1);
        return;
    }
    }
}

void tr_yf_write_default(const tr_yf_field *f, FILE *out)
{
    char buf[64];
    switch (f->type) {
    case TR_YF_INT:
    case TR_YF_INT64:
        fprintf(out, "%" PRId64, f->def_int);
        return;
    case TR_YF_UINT64:
        fprintf(out, "%" PRIu64, (uint64_t)f->def_int);
        return;
    case TR_YF_FLOAT:
        tr_yfmt_float(f->def_float, buf, sizeof buf);
        fputs(buf, out);
        return;
    case TR_YF_BOOL:
    case TR_YF_BOOL_INT:
        fputs(f->def_int ? "true" : "false", out);
        return;
    case TR_YF_STRING:
        tr_ywrite_quoted(out, f->def_str ? f->def_str : "");
        return;
    case TR_YF_ENUM:
        fputs(f->enum_names[f->def_int], out);
        return;
    case TR_YF_FLOAT_LIST:
        write_float_list(out, f->def_list, f->def_n);
        return;
    case TR_YF_INT64_PAIR:
        fprintf(out, "[%" PRId64 ", %" PRId64 "]", f->def_int, f->def_int);
        return;
    }
}

const char *tr_yf_type_name(const tr_yf_field *f)
{
    switch (f->type) {
    case TR_YF_INT:
    case TR_YF_INT64: return "int";
    case TR_YF_UINT64: return "uint64";
    case TR_YF_FLOAT: return "float";
    case TR_YF_BOOL:
    case TR_YF_BOOL_INT: return "bool";
    case TR_YF_STRING: return "string";
    case TR_YF_ENUM: return "enum";
    case TR_YF_FLOAT_LIST: return "float list";
    case TR_YF_INT64_PAIR: return "int or [int, int]";
    }
    return "?";
}
