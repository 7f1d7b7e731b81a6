/*
 * units.c -- byte counts for people (units.h).
 */
#include "units.h"

#include <stdio.h>

void tr_format_bytes(double b, char *out, size_t n)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    const double sign = b < 0 ? -1.0 : 1.0;
    b *= sign;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(out, n, "%.0f B", sign * b);
    else snprintf(out, n, "%.*f %s", b < 10 ? 2 : 1, sign * b, units[u]);
}
