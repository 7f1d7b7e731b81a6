/*
 * yaml_util.h -- strict YAML helpers shared by the config loader (config.c) and the model spec loader
 * (model_spec.c).
 *
 *  - loading one document with libyaml's document API, syntax errors reported at libyaml's problem mark;
 *  - YAML 1.2 core-schema resolution of plain scalars (libyaml is YAML 1.1 and leaves scalars untyped):
 *    null (~, null, empty), booleans (true/false only), ints (decimal, 0x, 0o), floats (1e-3, 3., .5, .inf, .nan);
 *    quoted scalars are always strings;
 *  - mapping checks (non-scalar keys, duplicate keys naming both lines) and unknown names with a did-you-mean
 *    (suggest.h);
 *  - messages "FILE:LINE:COL: key.path: message" (1-based line and column), or "WHERE: key.path: message" when
 *    the text did not come from a file (command-line overrides).
 * Numbers are read and written with "C" locale semantics whatever the process locale is. The typed fields over
 * these (one descriptor per key, table-driven parsing, checks, defaults and output) are yaml_schema.h.
 */
#ifndef TR_YAML_UTIL_H
#define TR_YAML_UTIL_H

/* Limits on a YAML document (config, model spec, override), checked in one pass before it is composed. A config
 * is a few KiB with ~100 keys 3 levels deep; these are far above that and far below what would take time. */
#define TR_YAML_MAX_BYTES (4 << 20)  /**< bytes of one document                       */
#define TR_YAML_MAX_DEPTH 64         /**< nesting of mappings and sequences            */
#define TR_YAML_MAX_NODES 100000     /**< scalars, mappings, sequences and aliases     */
#define TR_YAML_MAX_ALIASES 1000     /**< aliases (*name)                              */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <yaml.h>

#include "error.h"

/* ------------------------------------------------------------------------------------------ context, errors */

/** Where messages point: a named text with line/column marks, or a fixed prefix (e.g. "override 'k=v'"). */
typedef struct tr_yctx {
    const char *name;    /**< file name (or stand-in) for "NAME:LINE:COL"                          */
    const char *where;   /**< when non-NULL, replaces "NAME:LINE:COL" in every message              */
    tr_error *err;       /**< filled by tr_yerr                                                     */
} tr_yctx;

/**
 * Fill ctx->err with TR_E_CONFIG and "NAME:LINE:COL: PATH: MESSAGE" (location from `at`'s start mark; just "NAME"
 * when `at` is NULL; ctx->where instead of both when set; "PATH: " omitted when path is NULL or ""). Returns
 * TR_E_CONFIG.
 */
int tr_yerr(const tr_yctx *ctx, const yaml_node_t *at, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Same as tr_yerr with an explicit libyaml mark (0-based; printed 1-based). */
int tr_yerr_mark(const tr_yctx *ctx, yaml_mark_t mark, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ------------------------------------------------------------------------------------------ documents */

/**
 * Parse `len` bytes of YAML text into `doc` (one document; a second one is an error). On success the caller must
 * yaml_document_delete(doc); the root may be NULL for an empty stream. Syntax errors are reported at libyaml's
 * problem mark as "NAME:LINE:COL: [PATH: ]YAML syntax error: problem (context)". Returns TR_OK or TR_E_CONFIG.
 */
int tr_ydoc_load(const tr_yctx *ctx, const char *path, const char *text, size_t len, yaml_document_t *doc);

/** Read a whole file into a NUL-terminated malloc'd buffer (*len bytes). TR_OK, or TR_E_CONFIG naming the file. */
int tr_read_text_file(const char *path, char **text, size_t *len, tr_error *err);

/* ------------------------------------------------------------------------------------------ scalars */

/** The YAML 1.2 core-schema type of a scalar. */
typedef enum tr_ys_kind {
    TR_YS_NULL = 0,  /**< ~, null, Null, NULL, empty plain scalar                      */
    TR_YS_BOOL,      /**< true/True/TRUE/false/False/FALSE                             */
    TR_YS_INT,       /**< [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+                         */
    TR_YS_FLOAT,     /**< [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, .inf, .nan */
    TR_YS_STR        /**< anything else, and every quoted or block scalar               */
} tr_ys_kind;

/** Resolve the core-schema type of a scalar node (NULL counts as null; non-scalars as strings). */
tr_ys_kind tr_yscalar_kind(const yaml_node_t *node);

/** Resolve plain scalar text (`len` bytes) by the core schema, as if unquoted. */
tr_ys_kind tr_yplain_kind(const char *text, size_t len);

/** Parse text resolved as TR_YS_INT into *out; returns 0, or -1 when it does not fit in int64. */
int tr_yparse_int(const char *text, int64_t *out);

/** Parse an unsigned core-schema int (no '-') into *out; -1 when it is not one or does not fit in uint64. */
int tr_yparse_uint(const char *text, uint64_t *out);

/** Parse text resolved as TR_YS_FLOAT or TR_YS_INT into *out with "C" locale rules; returns 0 or -1. */
int tr_yparse_float(const char *text, double *out);

/**
 * Format `v` the shortest way that reads back to the same double, always looking like a float to YAML 1.1 and
 * 1.2 readers: "1.0", "0.001", "1.0e-08", ".inf", "-.inf", ".nan". "C" locale whatever the process locale.
 */
void tr_yfmt_float(double v, char *buf, size_t n);

/** Write `s` as a YAML double-quoted string, escaping '"', '\\' and control characters. */
void tr_ywrite_quoted(FILE *f, const char *s);

/* ------------------------------------------------------------------------------------------ unknown names */

/**
 * Report an unknown name at `at`: "PATH: unknown WHAT; did you mean 'PREFIXbest'?", or when nothing is close
 * "PATH: unknown WHAT; valid WHATs are a, b, c". Returns TR_E_CONFIG.
 */
int tr_yunknown(const tr_yctx *ctx, const yaml_node_t *at, const char *path, const char *what, const char *word,
                const char *const *cands, size_t n, const char *prefix);

/* ------------------------------------------------------------------------------------------ nodes */

/** A node's type in words: "a mapping", "a sequence", "null", or the quoted scalar text, for "got ..." parts. */
void tr_ydescribe(const yaml_node_t *node, char *buf, size_t n);

/** Build "prefix.key" (or "key" when prefix is empty) into out. */
void tr_ypath_join(char *out, size_t n, const char *prefix, const char *key);

/** Build "prefix[index]" into out. */
void tr_ypath_index(char *out, size_t n, const char *prefix, size_t index);

/** Key comparisons tr_ymap_check has made in this process (its duplicate check is a hash set: about one per key;
 *  tests assert the work done, not a time). */
size_t tr_ymap_key_compares(void);

/**
 * Check a mapping: every key must be a non-empty plain/quoted scalar and appear once. Duplicates are reported at
 * the second key as "PREFIX.KEY: duplicate key (first set at line N)". Returns TR_OK or TR_E_CONFIG.
 */
int tr_ymap_check(const tr_yctx *ctx, yaml_document_t *doc, yaml_node_t *map, const char *prefix);

/** Number of pairs of a mapping / items of a sequence (0 for other nodes). */
size_t tr_ymap_size(const yaml_node_t *map);
size_t tr_yseq_size(const yaml_node_t *seq);

/** Key / value node of pair i of a mapping. */
yaml_node_t *tr_ymap_key(yaml_document_t *doc, yaml_node_t *map, size_t i);
yaml_node_t *tr_ymap_value(yaml_document_t *doc, yaml_node_t *map, size_t i);

/** Item i of a sequence. */
yaml_node_t *tr_yseq_item(yaml_document_t *doc, yaml_node_t *seq, size_t i);

/** Text of a scalar node (NUL-terminated by libyaml); "" for NULL or non-scalars. */
const char *tr_ytext(const yaml_node_t *node);

/** True for a null plain scalar (or NULL). */
bool tr_yis_null(const yaml_node_t *node);

/** True for a node with an explicit tag other than its kind's default one (e.g. `!!int 5`, `!custom`). */
bool tr_yis_tagged(const yaml_node_t *node);

#endif
