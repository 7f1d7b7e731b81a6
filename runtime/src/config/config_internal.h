/*
 * config_internal.h -- the schema table config.c is driven by (config_schema.c). Not for callers outside
 * config.c: theirs is config.h.
 */
#ifndef TR_CONFIG_INTERNAL_H
#define TR_CONFIG_INTERNAL_H

#include <stddef.h>

#include "config.h"
#include "yaml_schema.h"

/** A bound on the schema's rows, for arrays of key names (config_schema.c asserts the table fits). */
#define TR_CONFIG_MAX_KEYS 512

/** The schema: one row per key, in the order of config files and of the reference; tr_config_schema_n rows. */
extern const tr_yf_field tr_config_schema[];
extern const size_t tr_config_schema_n;

/** Enum names, index = enum value (NULL-terminated): data.format, train.loss, eval.weights. */
extern const char *const tr_config_formats[];
extern const char *const tr_config_losses[];
extern const char *const tr_config_weights[];

#endif
