/* yaml_util.c -- strict YAML helpers shared by config.c and model_spec.c (see yaml_util.h): documents, scalars,
 * nodes. The typed fields over them are yaml_schema.c; the did-you-mean behind tr_yunknown is suggest.c. */
#include "yaml_util.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "suggest.h"

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

int tr_yparse_uint(const char *s, uint64_t *out)
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

/* ============================================================================================ unknown names */

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

bool tr_yis_tagged(const yaml_node_t *node)
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
        if (!k || k->type != YAML_SCALAR_NODE || tr_yis_tagged(k)) {
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

