#include "error.h"

#include <stdio.h>
#include <string.h>

/* Copy s[n] into out[out_size] (NUL-terminated, stopping at the first byte that does not fit) with the bytes
 * `strict` names written as \xNN: strict, every byte outside printable ASCII and '\\'; else only the control
 * bytes but newline and tab (UTF-8 text and multi-line messages stay readable). Returns the length written. */
static int needs_escape(unsigned char c, int strict)
{
    return strict ? c < 0x20 || c >= 0x7f || c == '\\' : (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f;
}

static size_t escape_into(const char *s, size_t n, char *out, size_t out_size, int strict)
{
    size_t o = 0;
    if (out_size == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const int esc = needs_escape(c, strict);
        if (o + (esc ? 4 : 1) >= out_size) break;
        if (esc) o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    out[o] = '\0';
    return o;
}

/* Control bytes in a message (from a binary file read as text, a hostile override) would drive the terminal
 * that prints it: each becomes \xNN. Newlines and tabs stay (multi-line messages use them). */
static void escape_controls(char *msg, size_t cap)
{
    const size_t n = strlen(msg);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += needs_escape((unsigned char)msg[i], 0);
    if (!bad) return;
    char tmp[sizeof ((tr_error *)0)->msg];
    escape_into(msg, n, tmp, sizeof tmp, 0);
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
    return escape_into(s, n, out, out_size, 1);
}
