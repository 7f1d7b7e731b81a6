/*
 * yaml_schema.h -- typed fields over the strict YAML of yaml_util.h: one descriptor per key (tr_yf_field) -- type,
 * offset into a struct, default, range, doc -- with table-driven parsing (YAML 1.2 core-schema scalars, explicit
 * tags refused), range checks, defaults and YAML / Markdown output. The config (config.c) and the model spec
 * (model_spec.c) are each one table of these.
 */
#ifndef TR_YAML_SCHEMA_H
#define TR_YAML_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "yaml_util.h"

/** Storage type of a field. */
typedef enum tr_yf_type {
    TR_YF_INT = 0,      /**< C int                                                                    */
    TR_YF_INT64,        /**< int64_t                                                                  */
    TR_YF_UINT64,       /**< uint64_t                                                                 */
    TR_YF_FLOAT,        /**< double; an int is accepted                                               */
    TR_YF_BOOL,         /**< bool                                                                     */
    TR_YF_BOOL_INT,     /**< int holding 0 / 1, read as a boolean                                     */
    TR_YF_STRING,       /**< char[size]; any scalar's text; null means ""                            */
    TR_YF_ENUM,         /**< C enum (int-sized), one of enum_names (index = value)                   */
    TR_YF_FLOAT_LIST,   /**< double[size] with an int count at aux_offset; a scalar is a 1-entry list */
    TR_YF_INT64_PAIR    /**< int64_t at offset and at aux_offset: n (both) or [a, b]                 */
} tr_yf_type;

/** Allowed range (for lists: of each entry). Unset bounds are not checked. Floats must also be finite. */
typedef struct tr_yf_range {
    bool has_min, min_excl, has_max, max_excl;
    double min, max;
} tr_yf_range;

/** Initializers of a tr_yf_range for the schema tables: any value, [a, inf), (a, inf), [a, b], [a, b), (a, b),
 *  (a, b]. */
#define TR_YF_ANY {0}
#define TR_YF_GE(a) {.has_min = true, .min = (a)}
#define TR_YF_GT(a) {.has_min = true, .min_excl = true, .min = (a)}
#define TR_YF_CC(a, b) {.has_min = true, .min = (a), .has_max = true, .max = (b)}
#define TR_YF_CO(a, b) {.has_min = true, .min = (a), .has_max = true, .max = (b), .max_excl = true}
#define TR_YF_OO(a, b) {.has_min = true, .min = (a), .min_excl = true, .has_max = true, .max = (b), .max_excl = true}
#define TR_YF_OC(a, b) {.has_min = true, .min = (a), .min_excl = true, .has_max = true, .max = (b)}

/** One typed key: where it lives in a struct, its default, range and doc. */
typedef struct tr_yf_field {
    const char *name;               /**< key path ("optim.lr") or option name ("out")                 */
    tr_yf_type type;
    size_t offset;                  /**< offsetof the value in the target struct                      */
    size_t size;                    /**< TR_YF_STRING: buffer size; TR_YF_FLOAT_LIST: capacity        */
    size_t aux_offset;              /**< TR_YF_FLOAT_LIST: int count; TR_YF_INT64_PAIR: second value  */
    const char *const *enum_names;  /**< TR_YF_ENUM: NULL-terminated names, index = enum value        */
    tr_yf_range range;
    bool required;                  /**< must be given (model spec options)                           */
    int64_t def_int;                /**< default of integer, bool and enum fields                     */
    double def_float;               /**< default of TR_YF_FLOAT                                       */
    const char *def_str;            /**< default of TR_YF_STRING                                      */
    const double *def_list;         /**< default of TR_YF_FLOAT_LIST (def_n entries)                  */
    int def_n;
    const char *doc;                /**< one-line description                                         */
    /** TR_YF_STRING: the value's own syntax (may be NULL): returns 0 to accept `text`, else nonzero with the
     *  reason in why[n], reported at the value ("FILE:LINE:COL: path: why") and by tr_yf_check. */
    int (*check_string)(const char *text, char *why, size_t n);
} tr_yf_field;

/** Store the field's default into `base` (the struct the offsets point into). */
void tr_yf_set_default(const tr_yf_field *f, void *base);

/**
 * Parse `node` (NULL = null) as field `f` into `base`, checking type and range; `path` names it in messages.
 * Nothing is stored on error. Returns TR_OK or TR_E_CONFIG (via tr_yerr).
 */
int tr_yf_parse(const tr_yctx *ctx, yaml_document_t *doc, const tr_yf_field *f, yaml_node_t *node,
                const char *path, void *base);

/**
 * Check the value stored in `base` against the field's range (and, for enums, its names). On failure fills err
 * with TR_E_CONFIG and "PATH: VALUE is out of range (must be ...)". Returns TR_OK or TR_E_CONFIG.
 */
int tr_yf_check(const tr_yf_field *f, const void *base, const char *path, tr_error *err);

/** Write the field's value from `base` as YAML flow text (floats via tr_yfmt_float, strings double-quoted). */
void tr_yf_write_value(const tr_yf_field *f, const void *base, FILE *out);

/** Write the field's default as YAML flow text. */
void tr_yf_write_default(const tr_yf_field *f, FILE *out);

/** Type in words for references: "int", "uint64", "float", "bool", "string", "enum", "float list", ... */
const char *tr_yf_type_name(const tr_yf_field *f);

/** Range in words into buf: "> 0", ">= 1", "[0, 1)", "(0, 1]", "[0, 1024]", or "" when unbounded. */
void tr_yf_range_text(const tr_yf_range *r, char *buf, size_t n);

#endif
