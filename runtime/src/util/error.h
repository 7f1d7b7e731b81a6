/* error.h -- the runtime's error record: one fixed buffer, filled once by the failing call. */
#ifndef TR_ERROR_H
#define TR_ERROR_H

#include <stdarg.h>

/** Exit / status codes of the runtime and the CLI (documented in `trainrun --help` and the README). */
enum {
    TR_OK = 0,          /**< success                                                                     */
    TR_E_RUNTIME = 1,   /**< a fault of the machine: I/O, full disk, out of memory, libtorch failing    */
    TR_E_CONFIG = 2,    /**< the user's input: usage, the config, a data or model file it names          */
    TR_E_WATCHDOG = 3,  /**< stopped by the memory watchdog                                              */
    TR_E_SIGNAL = 4,    /**< interrupted by SIGINT/SIGTERM                                               */
    TR_E_PEER = 9,      /**< distributed run: another rank failed or hung (a collective failed or waited
                             longer than dist.timeout_seconds). 5 is `verify`/`check`'s "differs" (check.h);
                             6-8 and 10 are the embedding API's own (trainrun.h), which passes this one on as
                             TRAINRUN_E_PEER                                                                   */
    TR_E_LOCKED = 11    /**< the run directory is in use: another process holds its lock (run_lock.h); nothing
                             was written. The embedding API passes it on as TRAINRUN_E_LOCKED                  */
};

typedef struct tr_error {
    int code;          /**< one of the TR_* codes above; TR_OK when nothing failed */
    char msg[2048];    /**< human-readable message, "" when nothing failed         */
} tr_error;

/** Fill `err` (may be NULL) with `code` and a printf-style message; returns `code`. Control bytes in the result
 *  (but newline and tab) are written as \xNN, so a message never drives the terminal that prints it. */
int tr_error_set(tr_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/** Copy s[n] into out[out_size] (always NUL-terminated) with every byte outside printable ASCII, and '\\', as
 *  \xNN: for echoing untrusted bytes (a field of a binary file read as CSV) in a message. Returns the length. */
#include <stddef.h>
size_t tr_escape_bytes(const char *s, size_t n, char *out, size_t out_size);

#endif
