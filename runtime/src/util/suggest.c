/* suggest.c -- did-you-mean by Levenshtein distance (suggest.h). */
#include "suggest.h"

#include <stdio.h>
#include <string.h>

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
