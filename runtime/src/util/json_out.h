/*
 * json_out.h -- JSON values streamed by hand into a FILE, for records written a field at a time (metrics.jsonl's,
 * tr_metrics_write_json). Whole documents are built with cJSON instead (summary.json, best.json, manifests).
 */
#ifndef TR_JSON_OUT_H
#define TR_JSON_OUT_H

#include <stdio.h>

/** A JSON number printed with %.17g (it round-trips), or null for NaN and infinities (JSON has neither). */
void tr_json_number(FILE *f, double v);

/** A JSON string literal: '"' and '\\' escaped, bytes below 0x20 as \u00XX, every other byte as it is. */
void tr_json_string(FILE *f, const char *s);

#endif
