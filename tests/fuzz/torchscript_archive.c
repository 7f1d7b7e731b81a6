/*
 * torchscript_archive.c -- fuzz the TorchScript archive loading path (trs_model_load_torchscript: the shim's own
 * checks, then libtorch's zip reader, unpickler and TorchScript compiler, then the dry forward) with mutated
 * archives, each loaded in a child process so that a crash, a hang or a memory blow-up is seen and kept instead of
 * ending the fuzzer. libtorch is not instrumented, so this is not coverage-guided: it mutates the seed archives at
 * random, structure-aware (it knows the zip layout torch.jit.save writes and where the pickles and the code are).
 *
 *   torchscript_archive [--seconds N | --execs N] [--seed S] [--out DIR] [--timeout S] SEED.pt ...
 *
 * Every seed is first loaded as it is (earlier findings' inputs kept as seeds are replayed so), then each input
 * is 1-4 mutations of a random seed: (a) raw bytes anywhere in the file (bit flips, interesting
 * values, a byte range deleted, duplicated or truncated away) -- the zip structure itself; (b) one entry's content
 * (data.pkl, constants.pkl, code/ *.py, their .debug_pkl, version, a tensor's data: bit flips, pickle opcodes and
 * TorchScript tokens inserted, ranges cut or repeated) with the zip rebuilt valid around it (sizes, CRC-32,
 * offsets), so the mutation reaches the unpickler or the compiler; (c) the entry list (an entry dropped, doubled
 * or renamed). A forked child loads it (with RLIMIT_AS of 4 GiB: an allocation past it is std::bad_alloc, which
 * the shim reports as TRS_E_NOMEM) and exits 0 (loaded), 1 (refused with a message), 3 (out of memory); a signal
 * is a crash and more than --timeout seconds (default 10) a hang. Crashes and hangs are saved as
 * DIR/{crash,hang}-SIG-N.pt with the child's last message line in DIR/{crash,hang}-SIG-N.txt (default DIR: the
 * current directory). The last line reports executions and outcomes:
 *   "torchscript_archive: 123456 execs in 600 s (205/s): 1200 loaded, 120000 refused, 3 out of memory,
 *    0 crashes, 0 hangs (seed 7)"
 * Exit 0 when nothing crashed or hung, 1 otherwise (the inputs are kept). The random seed is printed (--seed
 * repeats a run).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "trainrun_shim.h"

/* ---------------------------------------------------------------------------------------------- randomness */

static uint64_t g_rng;
static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---------------------------------------------------------------------------------------------- buffers */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void reserve(buf *b, size_t n)
{
    if (n <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
}
static void put(buf *b, const void *d, size_t n)
{
    if (!n) return; /* an empty entry: b->p may still be NULL, and memcpy's arguments must not be */
    reserve(b, b->n + n);
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put16(buf *b, unsigned v) { put(b, (unsigned char[]){v & 255, (v >> 8) & 255}, 2); }
static void put32(buf *b, uint32_t v)
{
    put(b, (unsigned char[]){v & 255, (v >> 8) & 255, (v >> 16) & 255, v >> 24}, 4);
}
static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const unsigned char *p) { return get16(p) | get16(p + 2) << 16; }

/* ---------------------------------------------------------------------------------------------- zip */

typedef struct entry {
    char name[256];
    buf data; /* uncompressed */
} entry;

typedef struct archive {
    entry *e;
    int n;
} archive;

/* The entries of a zip (stored or deflated), by its central directory: 0, or -1 when it is not one we can read. */
static int zip_read(const unsigned char *z, size_t n, archive *out)
{
    memset(out, 0, sizeof *out);
    size_t eocd = n >= 22 ? n - 22 : 0;
    while (eocd > 0 && get32(z + eocd) != 0x06054b50) eocd--;
    if (n < 22 || get32(z + eocd) != 0x06054b50) return -1;
    const uint32_t count = get16(z + eocd + 10), cd = get32(z + eocd + 16);
    out->e = calloc(count ? count : 1, sizeof *out->e);
    size_t at = cd;
    for (uint32_t i = 0; i < count; i++) {
        if (at + 46 > n || get32(z + at) != 0x02014b50) return -1;
        const uint32_t method = get16(z + at + 10), csize = get32(z + at + 20), usize = get32(z + at + 24);
        const uint32_t nlen = get16(z + at + 28), xlen = get16(z + at + 30), clen = get16(z + at + 32);
        const uint32_t local = get32(z + at + 42);
        if (nlen >= sizeof out->e[0].name || at + 46 + nlen > n || local + 30 > n) return -1;
        entry *e = &out->e[out->n++];
        memcpy(e->name, z + at + 46, nlen);
        const size_t data = local + 30 + get16(z + local + 26) + get16(z + local + 28);
        if (data + csize > n) return -1;
        if (method == 0) {
            put(&e->data, z + data, csize);
        } else if (method == 8) {
            reserve(&e->data, usize + 1);
            z_stream s = {0};
            inflateInit2(&s, -15);
            s.next_in = (unsigned char *)z + data;
            s.avail_in = csize;
            s.next_out = e->data.p;
            s.avail_out = usize;
            const int rc = inflate(&s, Z_FINISH);
            e->data.n = s.total_out;
            inflateEnd(&s);
            if (rc != Z_STREAM_END) return -1;
        } else {
            return -1;
        }
        at += 46 + nlen + xlen + clen;
    }
    return 0;
}

static void archive_free(archive *a)
{
    for (int i = 0; i < a->n; i++) free(a->e[i].data.p);
    free(a->e);
    memset(a, 0, sizeof *a);
}

static void archive_copy(const archive *src, archive *dst)
{
    dst->n = src->n;
    dst->e = calloc((size_t)src->n + 2, sizeof *dst->e);
    for (int i = 0; i < src->n; i++) {
        memcpy(dst->e[i].name, src->e[i].name, sizeof dst->e[i].name);
        put(&dst->e[i].data, src->e[i].data.p, src->e[i].data.n);
    }
}

/* A valid zip of the entries: stored, or deflated (code and debug pickles, as torch.jit.save writes them) when
 * `compress`; local headers 64-byte aligned as PyTorch's writer aligns them. */
static void zip_write(const archive *a, int compress, buf *z)
{
    z->n = 0;
    buf cd = {0};
    for (int i = 0; i < a->n; i++) {
        const entry *e = &a->e[i];
        const int def = compress && (strstr(e->name, "/code/") != NULL);
        buf packed = {0};
        if (def) {
            reserve(&packed, compressBound(e->data.n) + 64);
            z_stream s = {0};
            deflateInit2(&s, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
            s.next_in = e->data.p;
            s.avail_in = (uInt)e->data.n;
            s.next_out = packed.p;
            s.avail_out = (uInt)packed.cap;
            deflate(&s, Z_FINISH);
            packed.n = s.total_out;
            deflateEnd(&s);
        } else {
            put(&packed, e->data.p, e->data.n);
        }
        const uint32_t crc = (uint32_t)crc32(0, e->data.p, (uInt)e->data.n);
        const uint32_t off = (uint32_t)z->n, nlen = (uint32_t)strlen(e->name);
        const size_t pad = (64 - (z->n + 30 + nlen + 4) % 64) % 64;
        put32(z, 0x04034b50), put16(z, 20), put16(z, 0), put16(z, def ? 8 : 0), put16(z, 0), put16(z, 0x21);
        put32(z, crc), put32(z, (uint32_t)packed.n), put32(z, (uint32_t)e->data.n), put16(z, nlen);
        put16(z, (unsigned)(pad + 4));
        put(z, e->name, nlen);
        put16(z, 0x4646), put16(z, (unsigned)pad); /* PyTorch's "FF" padding extra field */
        reserve(z, z->n + pad);
        memset(z->p + z->n, 'Z', pad);
        z->n += pad;
        put(z, packed.p, packed.n);
        put32(&cd, 0x02014b50), put16(&cd, 20), put16(&cd, 20), put16(&cd, 0), put16(&cd, def ? 8 : 0);
        put16(&cd, 0), put16(&cd, 0x21), put32(&cd, crc), put32(&cd, (uint32_t)packed.n);
        put32(&cd, (uint32_t)e->data.n), put16(&cd, nlen), put16(&cd, 0), put16(&cd, 0), put16(&cd, 0);
        put16(&cd, 0), put32(&cd, 0), put32(&cd, off);
        put(&cd, e->name, nlen);
        free(packed.p);
    }
    const uint32_t cd_off = (uint32_t)z->n;
    put(z, cd.p, cd.n);
    put32(z, 0x06054b50), put16(z, 0), put16(z, 0), put16(z, (unsigned)a->n), put16(z, (unsigned)a->n);
    put32(z, (uint32_t)cd.n), put32(z, cd_off), put16(z, 0);
    free(cd.p);
}

/* ---------------------------------------------------------------------------------------------- mutations */

/* Pickle protocol-2 opcodes (those torch's unpickler knows and some it does not) and TorchScript fragments. */
static const char *const k_tokens[] = {
    "\x80\x02",
    "(",
    ")",
    "t",
    "\x85",
    "\x86",
    "\x87",
    "]",
    "}",
    "e",
    "a",
    "s",
    "u",
    "q\xff",
    "r\xff\xff\xff\xff",
    "h\x00",
    "j\xff\xff\xff\xff",
    "K\xff",
    "M\xff\xff",
    "J\xff\xff\xff\x7f",
    "J\x00\x00\x00\x80",
    "X\xff\xff\xff\x7f",
    "X\x05\x00\x00\x00",
    "c",
    "ctorch._utils\n_rebuild_tensor_v2\n",
    "ctorch\nFloatStorage\n",
    "R",
    "b",
    "N",
    "\x88",
    "\x89",
    "G\x7f\xf0\x00\x00\x00\x00\x00\x00",
    "P",
    "Q",
    "0",
    "2",
    "1",
    "\x8a\x08",
    "\x8a\xff",
    ".",
    "(K\x01K\x02t",
    "BINPERSID",
    "\x94",
    "\x95\xff\xff\xff\xff\xff\xff\xff\x7f",
    "def forward(self, x):\n",
    "return x\n",
    "self.",
    "torch.",
    "ops.aten.",
    "Tensor",
    "List[Tensor]",
    "Optional[",
    "while True:\n    pass\n",
    "__torch__.",
    "(",
    ")",
    ":",
    "\n    ",
    "1e308",
    "-9223372036854775808",
    "9999999999999999999999",
    "\"\"\"",
    "#",
    "\\",
    "\x00",
    "\xff",
    "import ",
    "class ",
    "__parameters__ = [",
    "], ",
    "  ",
    "99999",
    "[0]",
    "*",
    "lambda",
};

static void flip_bits(buf *b)
{
    if (!b->n) return;
    for (size_t k = 1 + below(8); k--;) b->p[below(b->n)] ^= (unsigned char)(1u << below(8));
}

static void set_interesting(buf *b)
{
    static const uint32_t vals[] = {0,      1,          0x7f,        0x80,        0xff, 0x7fff,  0x8000,
                                    0xffff, 0x7fffffff, 0x80000000u, 0xffffffffu, 64,   0x100000};
    if (b->n < 4) return;
    const size_t at = below(b->n - 3);
    const uint32_t v = vals[below(sizeof vals / sizeof *vals)];
    const int width = (int)(1u << below(3));
    for (int i = 0; i < width && at + (size_t)i < b->n; i++) b->p[at + (size_t)i] = (unsigned char)(v >> (8 * i));
}

static void insert_bytes(buf *b, const void *d, size_t n, size_t at)
{
    reserve(b, b->n + n);
    memmove(b->p + at + n, b->p + at, b->n - at);
    memcpy(b->p + at, d, n);
    b->n += n;
}

static void cut_range(buf *b)
{
    if (b->n < 2) return;
    const size_t at = below(b->n), len = 1 + below(b->n - at < 64 ? b->n - at : 64);
    memmove(b->p + at, b->p + at + len, b->n - at - len);
    b->n -= len;
}

static void repeat_range(buf *b)
{
    if (!b->n || b->n > (1u << 22)) return;
    const size_t at = below(b->n), len = 1 + below(b->n - at < 64 ? b->n - at : 64);
    unsigned char tmp[64];
    memcpy(tmp, b->p + at, len);
    for (size_t k = 1 + below(3); k--;) insert_bytes(b, tmp, len, at);
}

static void insert_token(buf *b)
{
    const char *t = k_tokens[below(sizeof k_tokens / sizeof *k_tokens)];
    size_t n = strlen(t);
    if (!n) n = 1; /* "\x00" */
    insert_bytes(b, t, n, below(b->n + 1));
}

static void mutate_bytes(buf *b)
{
    switch (below(7)) {
    case 0: flip_bits(b); break;
    case 1: set_interesting(b); break;
    case 2: cut_range(b); break;
    case 3: repeat_range(b); break;
    case 4: insert_token(b); break;
    case 5:
        if (b->n) b->n = below(b->n);
        break; /* truncate */
    default:
        if (b->n) b->p[below(b->n)] = (unsigned char)rnd();
        break;
    }
}

/* An entry to mutate: the pickles and the code most of the time (that is where the parsers are). */
static int pick_entry(const archive *a)
{
    for (int tries = 0; tries < 8; tries++) {
        const int i = (int)below((size_t)a->n);
        const char *nm = a->e[i].name;
        const int parsed = strstr(nm, ".pkl") || strstr(nm, "/code/") || strstr(nm, "version");
        if (parsed || below(4) == 0) return i;
    }
    return (int)below((size_t)a->n);
}

static void mutate(const archive *seed, const buf *raw, buf *out)
{
    const int kind = (int)below(10);
    if (kind < 3) { /* (a) raw bytes of the file */
        out->n = 0;
        put(out, raw->p, raw->n);
        for (size_t k = 1 + below(4); k--;) mutate_bytes(out);
        return;
    }
    archive a;
    archive_copy(seed, &a);
    if (kind < 9) { /* (b) an entry's content, in a valid zip */
        for (size_t k = 1 + below(4); k--;) mutate_bytes(&a.e[pick_entry(&a)].data);
    } else if (a.n > 0) { /* (c) the entry list */
        const int i = pick_entry(&a);
        switch (below(3)) {
        case 0:
            free(a.e[i].data.p);
            memmove(&a.e[i], &a.e[i + 1], (size_t)(a.n - i - 1) * sizeof *a.e);
            a.n--;
            break;
        case 1: { /* a second entry of i's name, with the content of entry j */
            const size_t j = below((size_t)a.n);
            memcpy(a.e[a.n].name, a.e[i].name, sizeof a.e[0].name);
            memset(&a.e[a.n].data, 0, sizeof a.e[0].data);
            put(&a.e[a.n].data, a.e[j].data.p, a.e[j].data.n);
            a.n++;
            break;
        }
        default: {
            char *nm = a.e[i].name;
            const size_t len = strlen(nm);
            if (len) nm[below(len)] = "/._a\x00"[below(5)];
            break;
        }
        }
    }
    zip_write(&a, (int)below(2), out);
    archive_free(&a);
}

/* ---------------------------------------------------------------------------------------------- children */

typedef struct seed {
    const char *path;
    buf raw;
    archive zip;
    int64_t shape[3];
    int ndim;
} seed;

/* The per-sample shape a seed's forward takes: token ids [16] for the language model, else images [1, 28, 28]. */
static void seed_shape(seed *s)
{
    if (strstr(s->path, "gpt")) s->shape[0] = 16, s->ndim = 1;
    else s->shape[0] = 1, s->shape[1] = 28, s->shape[2] = 28, s->ndim = 3;
}

static const char *g_file;

#ifdef TRAINRUN_SANITIZE
/* Under AddressSanitizer RLIMIT_AS cannot be used (ASan's shadow memory alone reserves terabytes of address
 * space, so its first mmap would fail): the same 4 GiB bound is ASan's per-allocation limit instead, and with
 * allocator_may_return_null (tests/sanitize.sh) an allocation past it returns NULL, which libtorch's CPU
 * allocator reports as out of memory, as it does past RLIMIT_AS. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=4096"; }
#endif

/* In the child: load the file; 0 loaded, 1 refused, 3 out of memory. The message goes to stderr (one line). */
static int child_load(const seed *s)
{
#ifndef TRAINRUN_SANITIZE
    struct rlimit rl = {(rlim_t)4 << 30, (rlim_t)4 << 30};
    setrlimit(RLIMIT_AS, &rl);
#endif
    trs_model *m = NULL;
    const trs_status st = trs_model_load_torchscript(g_file, s->shape, s->ndim, &m);
    if (st == TRS_OK) {
        trs_model_free(m);
        return 0;
    }
    const char *msg = trs_last_error();
    fprintf(stderr, "%.*s\n", (int)strcspn(msg, "\n"), msg);
    return st == TRS_E_NOMEM ? 3 : 1;
}

enum { LOADED, REFUSED, NOMEM, CRASH, HANG, N_OUTCOMES };

/* Run one input in a fork: its outcome; the child's last stderr line into msg[n]. */
static int run_child(const seed *s, double timeout, int *sig, char *msg, size_t n)
{
    int pipefd[2];
    if (pipe(pipefd) != 0) abort();
    const pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        _exit(child_load(s));
    }
    close(pipefd[1]);
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
    size_t got = 0;
    int status = 0, done = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *sig = 0;
    while (!done) {
        char chunk[4096];
        ssize_t r;
        while ((r = read(pipefd[0], chunk, sizeof chunk)) > 0) { /* keep the tail */
            for (ssize_t i = 0; i < r; i++) {
                if (got + 1 >= n) memmove(msg, msg + n / 2, got -= n / 2);
                msg[got++] = chunk[i];
            }
        }
        const pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            done = 1;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 > timeout) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            close(pipefd[0]);
            msg[got] = '\0';
            *sig = SIGKILL;
            return HANG;
        }
        nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
    }
    ssize_t r;
    char chunk[4096];
    while ((r = read(pipefd[0], chunk, sizeof chunk)) > 0)
        for (ssize_t i = 0; i < r && got + 1 < n; i++) msg[got++] = chunk[i];
    close(pipefd[0]);
    msg[got] = '\0';
    if (WIFSIGNALED(status)) {
        *sig = WTERMSIG(status);
        return CRASH;
    }
    const int code = WEXITSTATUS(status);
    return code == 0 ? LOADED : code == 3 ? NOMEM : code == 1 ? REFUSED : CRASH;
}

static void write_file(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "torchscript_archive: cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double seconds = 60, timeout = 10;
    long long max_execs = -1;
    uint64_t seed_value = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    const char *out_dir = ".";
    seed seeds[64];
    int n_seeds = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--execs") && i + 1 < argc) max_execs = atoll(argv[++i]), seconds = 1e18;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed_value = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout = atof(argv[++i]);
        else if (argv[i][0] == '-' || n_seeds == 64) {
            fprintf(stderr, "usage: %s [--seconds N | --execs N] [--seed S] [--out DIR] [--timeout S] SEED.pt ...\n",
                    argv[0]);
            return 2;
        } else {
            seed *s = &seeds[n_seeds];
            memset(s, 0, sizeof *s);
            s->path = argv[i];
            FILE *f = fopen(argv[i], "rb");
            if (!f) {
                fprintf(stderr, "torchscript_archive: %s: %s\n", argv[i], strerror(errno));
                return 2;
            }
            char chunk[1 << 16];
            for (size_t r; (r = fread(chunk, 1, sizeof chunk, f)) > 0;) put(&s->raw, chunk, r);
            fclose(f);
            if (zip_read(s->raw.p, s->raw.n, &s->zip) != 0 || s->zip.n == 0) {
                fprintf(stderr, "torchscript_archive: %s: not a zip this fuzzer can read\n", argv[i]);
                return 2;
            }
            seed_shape(s);
            n_seeds++;
        }
    }
    if (!n_seeds) {
        fprintf(stderr, "torchscript_archive: no seed archives given\n");
        return 2;
    }
    g_rng = seed_value;
    printf("torchscript_archive: seed %llu, %d seed archives, %g s\n", (unsigned long long)seed_value, n_seeds,
           seconds);
    fflush(stdout);
    trs_set_threads(1, 1, 1);
    static char file[4096];
    snprintf(file, sizeof file, "%s/trainrun-fuzz-torchscript-%ld.pt",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (long)getpid());
    g_file = file;
    /* warm the parent up once (libtorch's op registry and JIT are ready in every fork) with the first seed */
    {
        trs_model *m = NULL;
        write_file(file, seeds[0].raw.p, seeds[0].raw.n);
        if (trs_model_load_torchscript(file, seeds[0].shape, seeds[0].ndim, &m) == TRS_OK) trs_model_free(m);
    }
    long long counts[N_OUTCOMES] = {0}, execs = 0;
    buf input = {0};
    char msg[2048];
    const double t0 = now_s();
    int findings = 0;
    while ((max_execs < 0 || execs < max_execs) && now_s() - t0 < seconds) {
        /* each seed once as it is first (the regression inputs of earlier findings among them), then mutations */
        const seed *s = &seeds[execs < n_seeds ? execs : (long long)below((size_t)n_seeds)];
        if (execs < n_seeds) {
            input.n = 0;
            put(&input, s->raw.p, s->raw.n);
        } else {
            mutate(&s->zip, &s->raw, &input);
        }
        write_file(file, input.p, input.n);
        int sig = 0;
        const int outcome = run_child(s, timeout, &sig, msg, sizeof msg);
        counts[outcome]++;
        execs++;
        if (outcome == CRASH || outcome == HANG) {
            char path[4200];
            const char *kind = outcome == CRASH ? "crash" : "hang";
            snprintf(path, sizeof path, "%s/%s-%d-%d.pt", out_dir, kind, sig, findings);
            write_file(path, input.p, input.n);
            snprintf(path, sizeof path, "%s/%s-%d-%d.txt", out_dir, kind, sig, findings);
            write_file(path, msg, strlen(msg));
            printf("torchscript_archive: %s (signal %d) on a mutation of %s: kept as %s/%s-%d-%d.pt; last message: "
                   "%.300s\n",
                   kind, sig, s->path, out_dir, kind, sig, findings, msg);
            fflush(stdout);
            findings++;
        }
    }
    unlink(file);
    const double dt = now_s() - t0;
    printf("torchscript_archive: %lld execs in %.0f s (%.0f/s): %lld loaded, %lld refused, %lld out of memory, %lld "
           "crashes, %lld hangs (seed %llu)\n",
           execs, dt, dt > 0 ? (double)execs / dt : 0.0, counts[LOADED], counts[REFUSED], counts[NOMEM], counts[CRASH],
           counts[HANG], (unsigned long long)seed_value);
    for (int i = 0; i < n_seeds; i++) {
        free(seeds[i].raw.p);
        archive_free(&seeds[i].zip);
    }
    free(input.p);
    return counts[CRASH] || counts[HANG] ? 1 : 0;
}
