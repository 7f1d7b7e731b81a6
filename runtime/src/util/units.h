/*
 * units.h -- byte counts for people: "512 B", "1.50 KiB", "23.4 MiB" (IEC binary prefixes, powers of 1024).
 * Pure C, no other trainrun header: the console log, the command line's summary and `trainrun check` print them.
 */
#ifndef TR_UNITS_H
#define TR_UNITS_H

#include <stddef.h>

/**
 * `bytes` (may be negative: a shrink) into out[n] as "N B" below 1 KiB, else with the largest prefix up to TiB that
 * keeps the number >= 1: two decimals below 10 ("1.50 KiB"), one above ("23.4 MiB"). Truncated to n - 1 characters.
 */
void tr_format_bytes(double bytes, char *out, size_t n);

#endif
