/* fuzz_util.h -- helpers shared by the libFuzzer harnesses: the input as a file (the readers take paths) or as a
 * NUL-terminated string (the YAML and JSON readers take text). */
#ifndef TR_FUZZ_UTIL_H
#define TR_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A per-process file under /dev/shm (memory; /tmp when absent) holding data[size]; its path in a static buffer. */
static inline const char *fuzz_file(const char *tag, const uint8_t *data, size_t size)
{
    static char path[8][256];
    static int next;
    char *p = path[next++ & 7];
    snprintf(p, 256, "%s/trainrun-fuzz-%s-%ld", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", tag,
             (long)getpid());
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return p;
}

/* data[size] as a malloc'd NUL-terminated string (bytes after an embedded NUL are not seen by the readers). */
static inline char *fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
