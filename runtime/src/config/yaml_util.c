/* yaml_util.c -- strict YAML helpers shared by config.c and model_spec.c (see yaml_util.h). */
#include "yaml_util.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TR_YSTR_TAG "tag:yaml.org,2002:str"
#define TR_YSEQ_TAG "tag:yaml.org,2002:seq"
#define TR_YMAP_TAG "tag:yaml.org,2002:map"

/* ============================================================================================ errors */

/** Format the location prefix ("NAME:LINE:COL", "NAME" or ctx->where) into buf. */
static void yloc(const tr_yctx *ctx, const yaml_mark_t *mark, char *buf, size_t n)
{
    const char *name = ctx->name ? ctx->name : "<string>";
    if (ctx->where)
        snprintf(buf, n, "%s", ctx->where);
    else if (mark)
        snprintf(buf, n, "%s:%zu:%zu", name, mark->line + 1, mark->column + 1);
    else
        snprintf(buf, n, "%s", name);
}

/** Common body of tr_yerr / tr_yerr_mark. */
__attribute__((format(printf, 4, 0)))
static int yerr_v(const tr_yctx *ctx, const yaml_mark_t *mark, const char *path, const char *fmt, va_list ap)
{
    char loc[1100];
    char msg[1536];
    yloc(ctx, mark, loc, sizeof loc);
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (path && *path)
        return tr_error_set(ctx->err, TR_E_CONFIG, "%s: %s: %s", loc, path, msg);
    return tr_error_set(ctx->err, TR_E_CONFIG, "%s: %s", loc, msg);
}

int tr_yerr(const tr_yctx *ctx, const yaml_node_t *at, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = yerr_v(ctx, at ? &at->start_mark : NULL, path, fmt, ap);
    va_end(ap);
    return rc;
}

int tr_yerr_mark(const tr_yctx *ctx, yaml_mark_t mark, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = yerr_v(ctx, &mark, path, fmt, ap);
    va_end(ap);
    return rc;
}

/* ============================================================================================ documents */

/** Line/column (0-based) of byte `offset` in text, for libyaml reader errors that only give an offset. */
static yaml_mark_t mark_of_offset(const char *text, size_t len, size_t offset)
{
    yaml_mark_t m = {0, 0, 0};
    if (offset > len)
        offset = len;
    for (size_t i = 0; i < offset; i++) {
        if (text[i] == '\n') {
            m.line++;
            m.column = 0;
        } else {
            m.column++;
        }
    }
    m.index = offset;
    return m;
}

/** Report a libyaml parser failure at its problem mark. */
static int syntax_error(const tr_yctx *ctx, const char *path, const yaml_parser_t *p, const char *text, size_t len)
{
    const char *problem = p->problem ? p->problem : "unknown error";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return tr_yerr(ctx, NULL, path, "out of memory while parsing YAML");
    case YAML_READER_ERROR:
        if (p->problem_value != -1)
            return tr_yerr_mark(ctx, mark_of_offset(text, len, p->problem_offset), path,
                                "YAML syntax error: %s (byte 0x%02x)", problem, (unsigned)p->problem_value & 0xffu);
        return tr_yerr_mark(ctx, mark_of_offset(text, len, p->problem_offset), path, "YAML syntax error: %s",
                            problem);
    default:
        /* libyaml's words for a tab ("found character that cannot start any token") do not say it is one */
        if (text && p->problem_mark.index < len && text[p->problem_mark.index] == '\t')
            return tr_yerr_mark(ctx, p->problem_mark, path,
                                "YAML syntax error: a tab character; YAML indents with "
                                "spaces only (replace the tab with spaces)");
        if (p->context)
            return tr_yerr_mark(ctx, p->problem_mark, path, "YAML syntax error: %s (%s at line %zu)", problem,
                                p->context, p->context_mark.line + 1);
        return tr_yerr_mark(ctx, p->problem_mark, path, "YAML syntax error: %s", problem);
    }
}

/*
 * Limits checked on the event stream before the document is composed, in one linear pass that stops at the first
 * excess: a document's size, its nesting depth and its node count (aliases count: each one is walked like the
 * node it names, so a "billion laughs" document is refused, not expanded). Syntax errors are left to the load,
 * which reports them with their position.
 */
static int check_limits(const tr_yctx *ctx, const char *path, const char *text, size_t len)
{
    if (len > TR_YAML_MAX_BYTES)
        return tr_yerr(ctx, NULL, path, "document of %zu bytes; at most %d are accepted", len, TR_YAML_MAX_BYTES);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return tr_yerr(ctx, NULL, path, "out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    size_t depth = 0, nodes = 0, aliases = 0;
    int rc = TR_OK;
    for (int done = 0; !done && !rc;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) break;
        const yaml_mark_t mark = ev.start_mark;
        switch (ev.type) {
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            nodes++;
            if (++depth > TR_YAML_MAX_DEPTH)
                rc = tr_yerr_mark(ctx, mark, path, "nested more than %d levels deep", TR_YAML_MAX_DEPTH);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT: depth--; break;
        case YAML_ALIAS_EVENT:
            if (++aliases > TR_YAML_MAX_ALIASES)
                rc = tr_yerr_mark(ctx, mark, path, "more than %d aliases", TR_YAML_MAX_ALIASES);
            nodes++;
            break;
        case YAML_SCALAR_EVENT: nodes++; break;
        case YAML_STREAM_END_EVENT: done = 1; break;
        default: break;
        }
        if (!rc && nodes > TR_YAML_MAX_NODES)
            rc = tr_yerr_mark(ctx, mark, path, "more than %d keys and values; a config or model spec has hundreds",
                              TR_YAML_MAX_NODES);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return rc;
}

int tr_ydoc_load(const tr_yctx *ctx, const char *path, const char *text, size_t len, yaml_document_t *doc)
{
    int lrc = check_limits(ctx, path, text, len);
    if (lrc) return lrc;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return tr_yerr(ctx, NULL, path, "out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, doc)) {
        int rc = syntax_error(ctx, path, &p, text, len);
        yaml_parser_delete(&p);
        return rc;
    }
    if (yaml_document_get_root_node(doc)) {
        yaml_document_t extra;
        if (!yaml_parser_load(&p, &extra)) {
            int rc = syntax_error(ctx, path, &p, text, len);
            yaml_document_delete(doc);
            yaml_parser_delete(&p);
            return rc;
        }
        yaml_node_t *root = yaml_document_get_root_node(&extra);
        if (root) {
            int rc = tr_yerr(ctx, root, path, "only one YAML document is allowed");
            yaml_document_delete(&extra);
            yaml_document_delete(doc);
            yaml_parser_delete(&p);
            return rc;
        }
        yaml_document_delete(&extra);
    }
    yaml_parser_delete(&p);
    return TR_OK;
}

int tr_read_text_file(const char *path, char **text, size_t *len, tr_error *err)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tr_error_set(err, TR_E_CONFIG, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return tr_error_set(err, TR_E_CONFIG, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= ((size_t)64 << 20)) {
                free(buf);
                fclose(f);
                return tr_error_set(err, TR_E_CONFIG, "%s: file too large (over 64 MiB)", path);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return tr_error_set(err, TR_E_CONFIG, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        free(buf);
        fclose(f);
        return tr_error_set(err, TR_E_CONFIG, "%s: read error: %s", path, strerror(e));
    }
    fclose(f);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return TR_OK;
}

/* ============================================================================================ scalars */

/** s[0..n) equals the NUL-terminated word w. */
static bool eqn(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(s, w, n) == 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool is_xdigit_c(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/** [-+]?[0-9]+ | 0o[0-7]+ | 0x[0-9a-fA-F]+ */
static bool match_int(const char *s, size_t n)
{
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
        for (size_t i = 2; i < n; i++)
            if (s[1] == 'x' ? !is_xdigit_c(s[i]) : !(s[i] >= '0' && s[i] <= '7'))
                return false;
        return true;
    }
    size_t i = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        i++;
    if (i == n)
        return false;
    for (; i < n; i++)
        if (!is_digit(s[i]))
            return false;
    return true;
}

/** [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? | [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN) */
static bool match_float(const char *s, size_t n)
{
    if (eqn(s, n, ".nan") || eqn(s, n, ".NaN") || eqn(s, n, ".NAN"))
        return true;
    size_t i = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        i++;
    if (eqn(s + i, n - i, ".inf") || eqn(s + i, n - i, ".Inf") || eqn(s + i, n - i, ".INF"))
        return true;
    size_t int_digits = 0, frac_digits = 0;
    while (i < n && is_digit(s[i])) {
        i++;
        int_digits++;
    }
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && is_digit(s[i])) {
            i++;
            frac_digits++;
        }
    }
    if (int_digits == 0 && frac_digits == 0)
        return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        size_t exp_digits = 0;
        while (i < n && is_digit(s[i])) {
            i++;
            exp_digits++;
        }
        if (exp_digits == 0)
            return false;
    }
    return i == n;
}

tr_ys_kind tr_yplain_kind(const char *s, size_t n)
{
    if (n == 0 || eqn(s, n, "~") || eqn(s, n, "null") || eqn(s, n, "Null") || eqn(s, n, "NULL"))
        return TR_YS_NULL;
    if (eqn(s, n, "true") || eqn(s, n, "True") || eqn(s, n, "TRUE") || eqn(s, n, "false") || eqn(s, n, "False") ||
        eqn(s, n, "FALSE"))
        return TR_YS_BOOL;
    if (match_int(s, n))
        return TR_YS_INT;
    if (match_float(s, n))
        return TR_YS_FLOAT;
    return TR_YS_STR;
}

tr_ys_kind tr_yscalar_kind(const yaml_node_t *node)
{
    if (!node)
        return TR_YS_NULL;
    if (node->type != YAML_SCALAR_NODE)
        return TR_YS_STR;
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return TR_YS_STR;
    return tr_yplain_kind((const char *)node->data.scalar.value, node->data.scalar.length);
}

/** The base of a core-schema int s[n] that match_int accepted, and where strtol's digits start: "0x..." 16 and
 * "0o..." 8 (the prefix skipped; C's strtol reads no 0o), else 10 from the start. */
static int int_base(const char *s, size_t n, const char **digits)
{
    *digits = s;
    if (n <= 2 || s[0] != '0' || (s[1] != 'x' && s[1] != 'o')) return 10;
    *digits = s + 2;
    return s[1] == 'x' ? 16 : 8;
}

int tr_yparse_int(const char *s, int64_t *out)
{
    size_t n = strlen(s);
    if (!match_int(s, n))
        return -1;
    const char *p;
    const int base = int_base(s, n, &p);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, base);
    if (errno == ERANGE || end == p || *end != '\0')
        return -1;
    *out = (int64_t)v;
    return 0;
}

/** Parse an unsigned core-schema int (no '-') into *out; -1 when it does not fit in uint64. */
static int parse_uint(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    if (!match_int(s, n) || s[0] == '-')
        return -1;
    const char *p;
    const int base = int_base(s, n, &p);
    if (base == 10 && s[0] == '+') p = s + 1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(p, &end, base);
    if (errno == ERANGE || end == p || *end != '\0')
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/** The current locale's decimal point ("." in the "C" locale). */
static const char *decimal_point(void)
{
    const struct lconv *lc = localeconv();
    return (lc && lc->decimal_point && *lc->decimal_point) ? lc->decimal_point : ".";
}

/** strtod with "C" locale semantics: the text's '.' is swapped for the locale's decimal point if it differs. */
static int strtod_c(const char *s, double *out)
{
    const char *dp = decimal_point();
    char *end = NULL;
    double v;
    if (strcmp(dp, ".") == 0 || !strchr(s, '.')) {
        errno = 0;
        v = strtod(s, &end);
        if (end == s || *end != '\0')
            return -1;
    } else {
        size_t n = strlen(s), dpn = strlen(dp);
        char *tmp = malloc(n + dpn + 1);
        if (!tmp)
            return -1;
        const char *dot = strchr(s, '.');
        size_t pre = (size_t)(dot - s);
        memcpy(tmp, s, pre);
        memcpy(tmp + pre, dp, dpn);
        strcpy(tmp + pre + dpn, dot + 1);
        errno = 0;
        v = strtod(tmp, &end);
        bool ok = end != tmp && *end == '\0';
        free(tmp);
        if (!ok)
            return -1;
    }
    if (isinf(v))
        return -1; /* overflow: 1e999 is not representable */
    *out = v;
    return 0;
}

int tr_yparse_float(const char *s, double *out)
{
    size_t n = strlen(s);
    tr_ys_kind k = tr_yplain_kind(s, n);
    if (k == TR_YS_INT) {
        int64_t iv;
        if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
            if (tr_yparse_int(s, &iv) != 0)
                return -1;
            *out = (double)iv;
            return 0;
        }
        return strtod_c(s, out);
    }
    if (k != TR_YS_FLOAT)
        return -1;
    const char *p = s;
    bool neg = false;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (strcmp(p, ".nan") == 0 || strcmp(p, ".NaN") == 0 || strcmp(p, ".NAN") == 0) {
        *out = NAN;
        return 0;
    }
    if (strcmp(p, ".inf") == 0 || strcmp(p, ".Inf") == 0 || strcmp(p, ".INF") == 0) {
        *out = neg ? -INFINITY : INFINITY;
        return 0;
    }
    return strtod_c(s, out);
}

void tr_yfmt_float(double v, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, ".nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, "%s", v < 0 ? "-.inf" : ".inf");
        return;
    }
    char tmp[64];
    const char *dp = decimal_point();
    for (int prec = 1; prec <= 17; prec++) {
        char raw[64];
        snprintf(raw, sizeof raw, "%.*g", prec, v);
        /* back to "C": the locale's decimal point becomes '.' */
        const char *hit = strcmp(dp, ".") == 0 ? NULL : strstr(raw, dp);
        if (hit) {
            size_t pre = (size_t)(hit - raw);
            snprintf(tmp, sizeof tmp, "%.*s.%s", (int)pre, raw, hit + strlen(dp));
        } else {
            snprintf(tmp, sizeof tmp, "%s", raw);
        }
        double back;
        if (strtod_c(tmp, &back) == 0 && back == v)
            break;
    }
    /* make it look like a float to YAML 1.1 readers too: "1" -> "1.0", "1e-08" -> "1.0e-08" */
    char out[80];
    char *e = strchr(tmp, 'e');
    if (!strchr(tmp, '.')) {
        if (e)
            snprintf(out, sizeof out, "%.*s.0%s", (int)(e - tmp), tmp, e);
        else
            snprintf(out, sizeof out, "%s.0", tmp);
    } else {
        snprintf(out, sizeof out, "%s", tmp);
    }
    snprintf(buf, n, "%s", out);
}

void tr_ywrite_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\x%02x", (unsigned)*p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* ============================================================================================ did-you-mean */

size_t tr_levenshtein(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 255 || nb > 255)
        return na > nb ? na : nb;
    size_t row[256];
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

const char *tr_suggest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = tr_levenshtein(word, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    if (best && best_d * 3 <= strlen(word) + 1)
        return best;
    return NULL;
}

void tr_join(const char *const *items, size_t n, char *buf, size_t bufsize)
{
    size_t used = 0;
    if (bufsize == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < bufsize; i++) {
        int w = snprintf(buf + used, bufsize - used, "%s%s", i ? ", " : "", items[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

int tr_yunknown(const tr_yctx *ctx, const yaml_node_t *at, const char *path, const char *what, const char *word,
                const char *const *cands, size_t n, const char *prefix)
{
    const char *best = tr_suggest(word, cands, n);
    if (best)
        return tr_yerr(ctx, at, path, "unknown %s; did you mean '%s%s'?", what, prefix ? prefix : "", best);
    char list[1024];
    tr_join(cands, n, list, sizeof list);
    return tr_yerr(ctx, at, path, "unknown %s; valid %ss are %s", what, what, list);
}

/* ============================================================================================ nodes */

void tr_ydescribe(const yaml_node_t *node, char *buf, size_t n)
{
    if (!node || tr_yis_null(node)) {
        snprintf(buf, n, "null");
        return;
    }
    if (node->type == YAML_MAPPING_NODE) {
        snprintf(buf, n, "a mapping");
        return;
    }
    if (node->type == YAML_SEQUENCE_NODE) {
        snprintf(buf, n, "a sequence");
        return;
    }
    const char *s = (const char *)node->data.scalar.value;
    int len = node->data.scalar.length > 60 ? 57 : (int)node->data.scalar.length;
    const char *ell = node->data.scalar.length > 60 ? "..." : "";
    if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
        snprintf(buf, n, "'%.*s%s'", len, s, ell);
    else
        snprintf(buf, n, "\"%.*s%s\" (quoted, so a string)", len, s, ell);
}

void tr_ypath_join(char *out, size_t n, const char *prefix, const char *key)
{
    if (prefix && *prefix)
        snprintf(out, n, "%s.%s", prefix, key);
    else
        snprintf(out, n, "%s", key);
}

void tr_ypath_index(char *out, size_t n, const char *prefix, size_t index)
{
    snprintf(out, n, "%s[%zu]", prefix ? prefix : "", index);
}

size_t tr_ymap_size(const yaml_node_t *map)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return 0;
    return (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
}

size_t tr_yseq_size(const yaml_node_t *seq)
{
    if (!seq || seq->type != YAML_SEQUENCE_NODE)
        return 0;
    return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

yaml_node_t *tr_ymap_key(yaml_document_t *doc, yaml_node_t *map, size_t i)
{
    return yaml_document_get_node(doc, map->data.mapping.pairs.start[i].key);
}

yaml_node_t *tr_ymap_value(yaml_document_t *doc, yaml_node_t *map, size_t i)
{
    return yaml_document_get_node(doc, map->data.mapping.pairs.start[i].value);
}

yaml_node_t *tr_yseq_item(yaml_document_t *doc, yaml_node_t *seq, size_t i)
{
    return yaml_document_get_node(doc, seq->data.sequence.items.start[i]);
}

const char *tr_ytext(const yaml_node_t *node)
{
    if (!node || node->type != YAML_SCALAR_NODE)
        return "";
    return (const char *)node->data.scalar.value;
}

bool tr_yis_null(const yaml_node_t *node)
{
    return !node || (node->type == YAML_SCALAR_NODE && tr_yscalar_kind(node) == TR_YS_NULL);
}

/** A scalar/collection with an explicit tag other than the default one (e.g. `!!int 5`). */
static bool has_explicit_tag(const yaml_node_t *node)
{
    if (!node || !node->tag)
        return false;
    const char *tag = (const char *)node->tag;
    switch (node->type) {
    case YAML_SCALAR_NODE: return strcmp(tag, TR_YSTR_TAG) != 0;
    case YAML_SEQUENCE_NODE: return strcmp(tag, TR_YSEQ_TAG) != 0;
    case YAML_MAPPING_NODE: return strcmp(tag, TR_YMAP_TAG) != 0;
    default: return false;
    }
}

static size_t g_key_compares; /* tr_ymap_key_compares() */

size_t tr_ymap_key_compares(void) { return g_key_compares; }

/* FNV-1a over a key's bytes. */
static uint64_t key_hash(const yaml_node_t *k)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < k->data.scalar.length; i++) h = (h ^ k->data.scalar.value[i]) * 1099511628211ull;
    return h;
}

int tr_ymap_check(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *map, const char *prefix)
{
    size_t n = tr_ymap_size(map);
    /* Duplicates through a hash set of key indices (open addressing, at most half full): linear in the keys. */
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    size_t *slot = calloc(cap, sizeof *slot); /* key index + 1; 0 = empty */
    if (!slot) return tr_yerr(ctx, map, prefix, "out of memory checking %zu keys", n);
    int rc = TR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        yaml_node_t *k = tr_ymap_key(doc, map, i);
        char got[128];
        if (!k || k->type != YAML_SCALAR_NODE || has_explicit_tag(k)) {
            tr_ydescribe(k, got, sizeof got);
            rc = tr_yerr(ctx, k, prefix, "keys must be plain names, got %s", got);
            break;
        }
        if (k->data.scalar.length == 0 || tr_yis_null(k)) {
            rc = tr_yerr(ctx, k, prefix, "empty or null key");
            break;
        }
        if (strlen(tr_ytext(k)) != k->data.scalar.length) {
            rc = tr_yerr(ctx, k, prefix, "key contains a NUL character");
            break;
        }
        for (size_t h = (size_t)key_hash(k) & (cap - 1);; h = (h + 1) & (cap - 1)) {
            if (!slot[h]) {
                slot[h] = i + 1;
                break;
            }
            yaml_node_t *kj = tr_ymap_key(doc, map, slot[h] - 1);
            g_key_compares++;
            if (kj->data.scalar.length == k->data.scalar.length &&
                memcmp(kj->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0) {
                char path[512];
                tr_ypath_join(path, sizeof path, prefix, tr_ytext(k));
                rc = tr_yerr(ctx, k, path, "duplicate key (first set at line %zu)", kj->start_mark.line + 1);
                break;
            }
        }
    }
    free(slot);
    return rc;
}

/* ============================================================================================ typed fields */

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
    if (!has_explicit_tag(node)) return TR_OK;
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
            if (parse_uint(text, &v) != 0)
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
