#include "error.h"

#include <stdio.h>
#include <string.h>

/* Control bytes in a message (from a binary file read as text, a hostile override) would drive the terminal
 * that prints it: each becomes \xNN. Newlines and tabs stay (multi-line messages use them). */
static void escape_controls(char *msg, size_t cap)
{
    size_t n = strlen(msg), bad = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)msg[i];
        bad += (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f;
    }
    if (!bad) return;
    char tmp[sizeof ((tr_error *)0)->msg];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < sizeof tmp; i++) {
        const unsigned char c = (unsigned char)msg[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) o += (size_t)snprintf(tmp + o, 5, "\\x%02x", c);
        else tmp[o++] = (char)c;
    }
    tmp[o] = '\0';
    snprintf(msg, cap, "%s", tmp);
}

int tr_error_set(tr_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        escape_controls(err->msg, sizeof err->msg);
        err->code = code;
    }
    return code;
}

size_t tr_escape_bytes(const char *s, size_t n, char *out, size_t out_size)
{
    size_t o = 0;
    if (out_size == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const int esc = c < 0x20 || c >= 0x7f || c == '\\';
        if (o + (esc ? 4 : 1) >= out_size) break;
        if (esc) o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    out[o] = '\0';
    return o;
}
