/*
 * suggest.h -- did-you-mean for unknown names (config keys, enum values, model layer types): the nearest candidate
 * by Levenshtein distance when it is close enough, else the list of valid names.
 */
#ifndef TR_SUGGEST_H
#define TR_SUGGEST_H

#include <stddef.h>

/** Levenshtein edit distance between two NUL-terminated strings. */
size_t tr_levenshtein(const char *a, const char *b);

/**
 * The candidate nearest to `word` (first one on ties) if close enough -- distance d with 3*d <= strlen(word) + 1:
 * one edit for 2-4 letters, two for 5-7 -- else NULL.
 */
const char *tr_suggest(const char *word, const char *const *cands, size_t n);

/** Join `n` strings with ", " into buf (truncated to bufsize). */
void tr_join(const char *const *items, size_t n, char *buf, size_t bufsize);

#endif
