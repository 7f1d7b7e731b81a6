/*
 * image_cache.c -- data.cache: disk for image folders (image_folder.h): each set's decoded pixels kept in a file
 * across runs, its key, its checks, and its write once every sample has been decoded. image_folder.c calls
 * tr_image_disk_setup when it makes a set's cache and tr_image_disk_kept each time a sample is kept.
 */
#define _DEFAULT_SOURCE
#include "image_folder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "image.h"
#include "json_out.h"
#include "sys.h"

/* ------------------------------------------------------------------------------------------- data.cache: disk */

#define DISK_HEADER 64
static const char k_disk_magic[4] = {'T', 'R', 'D', 'C'};

enum { DISK_PENDING = 0, DISK_WRITTEN, DISK_FAILED };

/* One set's cache file (image_folder.h). Set up on the set-up thread; `filled`, `state` and `outcome` are shared
 * with the thread that decodes the last sample, which writes the file. */
typedef struct tr_image_disk {
    char dir[TR_PATH_MAX];
    char path[TR_PATH_MAX + 48];
    uint8_t key[16];            /* XXH3-128, canonical (big-endian) bytes; the file name is their hex      */
    char note[6 * TR_PATH_MAX]; /* what set-up found                                                        */
    int note_warn;
    int64_t read;           /* samples read from the file at set-up: n or 0                           */
    _Atomic int64_t filled; /* cache slots that turned ready (n when read from the file)               */
    _Atomic int state;      /* DISK_PENDING until the write has been tried; then `outcome` is final    */
    int64_t written;        /* samples written (n), valid once state is DISK_WRITTEN                   */
    char outcome[4 * TR_PATH_MAX];
    int reported; /* tr_image_disk_outcome's thread only                                     */
    _Atomic int active; /* 1: the file is to be written once every slot is ready (0 after a give-up) */
} tr_image_disk;

static void put_le32(uint8_t *b, uint32_t v)
{
    for (int k = 0; k < 4; k++) b[k] = (uint8_t)(v >> 8 * k);
}
static void put_le64(uint8_t *b, uint64_t v)
{
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)(v >> 8 * k);
}
static uint32_t get_le32(const uint8_t *b)
{
    uint32_t v = 0;
    for (int k = 3; k >= 0; k--) v = v << 8 | b[k];
    return v;
}
static uint64_t get_le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | b[k];
    return v;
}

static void key_u64(XXH3_state_t *st, uint64_t v)
{
    uint8_t b[8];
    put_le64(b, v);
    XXH3_128bits_update(st, b, sizeof b);
}
static void key_str(XXH3_state_t *st, const char *str)
{
    const size_t n = strlen(str);
    key_u64(st, n); /* length-prefixed: ("ab", "c") and ("a", "bc") differ */
    XXH3_128bits_update(st, str, n);
}
static uint64_t ns_of(struct timespec t) { return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec; }

/* The key of set `ds` (image_folder.h) into key[16]; 0, or -1 with why[size] saying what could not be read. */
static int disk_key(const tr_dataset *ds, uint8_t key[16], char *why, size_t size)
{
    const tr_image_set *s = ds->images;
    char real[PATH_MAX];
    if (!realpath(s->root, real)) return snprintf(why, size, "%s: %s", s->root, strerror(errno)), -1;
    XXH3_state_t *st = XXH3_createState();
    if (!st || XXH3_128bits_reset(st) != XXH_OK) {
        XXH3_freeState(st);
        return snprintf(why, size, "out of memory"), -1;
    }
    uint32_t png, jpeg;
    tr_image_decoder_versions(&png, &jpeg);
    const tr_image_opts *o = &s->opts;
    key_str(st, "trainrun decoded images");
    const uint64_t head[] = {TR_IMAGE_DISK_VERSION,
                             png,
                             jpeg,
                             (uint64_t)o->channels,
                             (uint64_t)o->h,
                             (uint64_t)o->w,
                             (uint64_t)o->resize_shorter,
                             (uint64_t)o->resize,
                             (uint64_t)o->max_pixels,
                             (uint64_t)s->n};
    for (size_t k = 0; k < sizeof head / sizeof *head; k++) key_u64(st, head[k]);
    key_str(st, real);
    int rc = 0;
    for (int64_t i = 0; i < s->n && !rc; i++) {
        char path[2 * TR_PATH_MAX];
        tr_image_set_path(s, i, path, sizeof path);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            snprintf(why, size, "%s: %s", path, strerror(errno));
            rc = -1;
            break;
        }
        key_str(st, s->names + s->name_off[i]);
        const uint64_t f[] = {(uint64_t)sb.st_size, ns_of(sb.st_mtim), ns_of(sb.st_ctim), (uint64_t)sb.st_ino,
                              (uint64_t)(s->labeled ? ds->y[i] : -1)};
        for (size_t k = 0; k < sizeof f / sizeof *f; k++) key_u64(st, f[k]);
    }
    if (!rc) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
        memcpy(key, c.digest, 16);
    }
    XXH3_freeState(st);
    return rc;
}

/* data.cache_dir, else $XDG_CACHE_HOME/trainrun/decoded (an absolute one: the XDG rule), else
 * $HOME/.cache/trainrun/decoded, into out[TR_PATH_MAX]; 0, or -1 with why[size]. */
static int disk_dir(const tr_config *cfg, char *out, char *why, size_t size)
{
    if (cfg->data.cache_dir[0]) {
        tr_config_resolve_path(cfg, cfg->data.cache_dir, out);
        return 0;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(out, TR_PATH_MAX, "%s/trainrun/decoded", xdg);
    else if (home && home[0] == '/') n = snprintf(out, TR_PATH_MAX, "%s/.cache/trainrun/decoded", home);
    else return snprintf(why, size, "neither XDG_CACHE_HOME nor HOME is an absolute path: set data.cache_dir"), -1;
    if (n >= TR_PATH_MAX)
        return snprintf(why, size, "the cache folder's path is longer than %d bytes", TR_PATH_MAX - 1), -1;
    return 0;
}

/* mkdir -p `dir`, each folder made with mode 0700; 0 or -1 with errno set. */
static int make_dirs(const char *dir)
{
    char p[TR_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
        *c = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(p, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) return errno = ENOTDIR, -1;
    return 0;
}

static int read_all(int fd, void *buf, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        const ssize_t r = read(fd, (uint8_t *)buf + *got, n - *got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        *got += (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(fd, (const uint8_t *)buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

/* The file's header for the cache of `s`. */
static void disk_header(const tr_image_set *s, uint8_t h[DISK_HEADER])
{
    memset(h, 0, DISK_HEADER);
    memcpy(h, k_disk_magic, 4);
    put_le32(h + 4, TR_IMAGE_DISK_VERSION);
    memcpy(h + 8, s->disk->key, 16);
    put_le64(h + 24, (uint64_t)s->n);
    put_le32(h + 32, (uint32_t)s->opts.h);
    put_le32(h + 36, (uint32_t)s->opts.w);
    put_le32(h + 40, (uint32_t)s->opts.channels);
    put_le64(h + 48, XXH3_64bits(s->cache, (size_t)s->cache_bytes));
    put_le64(h + 56, XXH3_64bits(h, 56));
}

/* The cache file of `s` into s->cache: 0 (every sample in it), 1 (there is none), or -1 with why[size] (refused:
 * every check of image_folder.h, each naming what differs). The cache's slots are not marked here. */
static int disk_read(tr_image_set *s, char *why, size_t size)
{
    const tr_image_disk *dk = s->disk;
    const size_t bytes = (size_t)s->cache_bytes;
    const int fd = open(dk->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        return snprintf(why, size, "cannot open: %s", strerror(errno)), -1;
    }
    struct stat st;
    uint8_t h[DISK_HEADER];
    size_t got = 0;
    int rc = -1;
    if (fstat(fd, &st) != 0) snprintf(why, size, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode)) snprintf(why, size, "not a regular file");
    else if (read_all(fd, h, sizeof h, &got) != 0) snprintf(why, size, "read error: %s", strerror(errno));
    else if (got < sizeof h)
        snprintf(why, size, "truncated: %zu bytes, shorter than the %d-byte header", got, DISK_HEADER);
    else if (memcmp(h, k_disk_magic, 4) != 0)
        snprintf(why, size, "wrong magic %02x %02x %02x %02x at byte offset 0 (expected \"TRDC\")", h[0], h[1], h[2],
                 h[3]);
    else if (get_le32(h + 4) != TR_IMAGE_DISK_VERSION)
        snprintf(why, size, "format version %u (this build reads %u)", get_le32(h + 4), TR_IMAGE_DISK_VERSION);
    else if (get_le64(h + 56) != XXH3_64bits(h, 56))
        snprintf(why, size, "the header's checksum (byte offset 56) does not match its bytes: a corrupt header");
    else if (memcmp(h + 8, dk->key, 16) != 0)
        snprintf(why, size, "its key (byte offset 8) is not its name's: not the file of these images");
    else if (get_le64(h + 24) != (uint64_t)s->n || get_le32(h + 32) != (uint64_t)s->opts.h ||
             get_le32(h + 36) != (uint64_t)s->opts.w || get_le32(h + 40) != (uint64_t)s->opts.channels)
        snprintf(why, size, "%llu images of %u x %u x %u, but the set has %lld of %lld x %lld x %d",
                 (unsigned long long)get_le64(h + 24), get_le32(h + 32), get_le32(h + 36), get_le32(h + 40),
                 (long long)s->n, (long long)s->opts.h, (long long)s->opts.w, s->opts.channels);
    else if ((uint64_t)st.st_size != DISK_HEADER + (uint64_t)bytes)
        snprintf(why, size, "%lld bytes, but the header says %llu (%d + %lld images x %zu bytes): truncated or grown",
                 (long long)st.st_size, (unsigned long long)(DISK_HEADER + (uint64_t)bytes), DISK_HEADER,
                 (long long)s->n, bytes / (size_t)s->n);
    else if (read_all(fd, s->cache, bytes, &got) != 0)
        snprintf(why, size, "read error at byte offset %zu: %s", DISK_HEADER + got, strerror(errno));
    else if (got != bytes) snprintf(why, size, "truncated while read: %zu of %zu payload bytes", got, bytes);
    else if (get_le64(h + 48) != XXH3_64bits(s->cache, bytes))
        snprintf(why, size, "the payload's checksum (XXH3-64, byte offset 48) does not match its bytes: corrupt");
    else rc = 0;
    close(fd);
    return rc;
}

/* Write the cache file of `s` (every slot ready); the outcome into s->disk (image_folder.h: never an error). */
static void disk_write(const tr_image_set *s)
{
    tr_image_disk *dk = s->disk;
    char tmp[TR_PATH_MAX + 64], why[TR_PATH_MAX + 128] = "";
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", dk->path);
    uint8_t h[DISK_HEADER];
    disk_header(s, h);
    const int fd = make_dirs(dk->dir) == 0 ? mkstemp(tmp) : -1;
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot create a file in %s: %s", dk->dir, strerror(errno));
    } else {
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        int bad = write_all(fd, h, sizeof h) || write_all(fd, s->cache, (size_t)s->cache_bytes) || fsync(fd);
        if (bad) snprintf(why, sizeof why, "%s: %s", tmp, strerror(errno));
        if (close(fd) != 0 && !bad) bad = 1, snprintf(why, sizeof why, "%s: %s", tmp, strerror(errno));
        if (!bad && rename(tmp, dk->path) != 0)
            bad = 1, snprintf(why, sizeof why, "cannot rename %s to it: %s", tmp, strerror(errno));
        if (bad) unlink(tmp);
        else {
            const int dfd = open(dk->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the rename itself, durable */
            if (dfd >= 0) {
                (void)fsync(dfd);
                close(dfd);
            }
        }
    }
    if (why[0]) {
        snprintf(dk->outcome, sizeof dk->outcome,
                 "cannot write %s: %s; the run goes on (its images stay in memory; the next run decodes them again)",
                 dk->path, why);
        atomic_store_explicit(&dk->state, DISK_FAILED, memory_order_release);
        return;
    }
    dk->written = s->n;
    snprintf(dk->outcome, sizeof dk->outcome,
             "%lld decoded images written to %s (%lld bytes): later runs read them "
             "from there",
             (long long)s->n, dk->path, (long long)(DISK_HEADER + s->cache_bytes));
    atomic_store_explicit(&dk->state, DISK_WRITTEN, memory_order_release);
}

/* data.cache: disk for the set of `ds` (its cache just allocated): its file's key and path, and the file read when
 * it passes every check. Whatever fails here is a note and the set goes on as data.cache: memory. */
void tr_image_disk_setup(const tr_config *cfg, tr_dataset *ds)
{
    tr_image_set *s = ds->images;
    tr_image_disk *dk = calloc(1, sizeof *dk);
    if (!dk) return; /* memory is short: the set works without its file */
    s->disk = dk;
    char why[3 * TR_PATH_MAX] = "";
    dk->reported = 1; /* until there is a file to write */
    if (disk_dir(cfg, dk->dir, why, sizeof why) != 0 || disk_key(ds, dk->key, why, sizeof why) != 0) {
        snprintf(dk->note, sizeof dk->note, "%s: the decoded images are kept in memory for this run only", why);
        dk->note_warn = 1;
        return; /* not active: the note reaches the log, nothing is read or written */
    }
    if (make_dirs(dk->dir) != 0) {
        snprintf(dk->note, sizeof dk->note,
                 "cannot make the cache folder %s: %s: the decoded images are kept in "
                 "memory for this run only",
                 dk->dir, strerror(errno));
        dk->note_warn = 1;
        return;
    }
    char hex[33];
    for (int k = 0; k < 16; k++) snprintf(hex + 2 * k, 3, "%02x", dk->key[k]);
    snprintf(dk->path, sizeof dk->path, "%s/%s.u8", dk->dir, hex);
    const int r = disk_read(s, why, sizeof why);
    if (r == 0) {
        for (int64_t i = 0; i < s->n; i++) atomic_store_explicit(&s->cache_state[i], 2, memory_order_relaxed);
        atomic_store(&dk->filled, s->n);
        dk->read = s->n;
        snprintf(dk->note, sizeof dk->note, "%lld decoded images read from the disk cache %s", (long long)s->n,
                 dk->path);
    } else if (r == 1) {
        dk->active = 1;
        dk->reported = 0;
        snprintf(dk->note, sizeof dk->note, "no disk cache yet: written to %s once every image has been decoded",
                 dk->path);
    } else {
        dk->active = 1;
        dk->reported = 0;
        dk->note_warn = 1;
        snprintf(dk->note, sizeof dk->note,
                 "%s: %s: ignored (the images are decoded from their files, and the file is "
                 "written again once every image has been decoded)",
                 dk->path, why);
    }
}

const char *tr_image_disk_note(const tr_image_set *s, int *warn)
{
    if (!s || !s->disk) return NULL;
    if (warn) *warn = s->disk->note_warn;
    return s->disk->note;
}

int tr_image_disk_outcome(tr_image_set *s, char *out, size_t size, int *warn)
{
    tr_image_disk *dk = s ? s->disk : NULL;
    if (!dk || dk->reported) return 0;
    const int st = atomic_load_explicit(&dk->state, memory_order_acquire);
    if (st == DISK_PENDING) return 0;
    dk->reported = 1;
    snprintf(out, size, "%s", dk->outcome);
    if (warn) *warn = st == DISK_FAILED;
    return 1;
}

void tr_image_disk_counts(const tr_image_set *s, int64_t *read, int64_t *written)
{
    const tr_image_disk *dk = s ? s->disk : NULL;
    *read = dk ? dk->read : 0;
    *written = dk && atomic_load_explicit(&dk->state, memory_order_acquire) == DISK_WRITTEN ? dk->written : 0;
}

const char *tr_image_disk_path(const tr_image_set *s) { return s && s->disk ? s->disk->path : ""; }


void tr_image_disk_kept(const tr_image_set *s)
{
    tr_image_disk *dk = s->disk;
    if (dk && dk->active && atomic_fetch_add_explicit(&dk->filled, 1, memory_order_acq_rel) + 1 == s->n) disk_write(s);
}

void tr_image_disk_complete(tr_image_set *s, tr_image_buf *buf)
{
    tr_image_disk *dk = s ? s->disk : NULL;
    if (!dk || !atomic_load(&dk->active) || atomic_load(&dk->filled) >= s->n) return;
    const size_t d = (size_t)(s->opts.h * s->opts.w * s->opts.channels);
    float *px = malloc(d * sizeof *px);
    if (!px) return; /* the file waits for the epochs to come */
    for (int64_t i = 0; i < s->n; i++) {
        if (atomic_load_explicit(&s->cache_state[i], memory_order_acquire) != 0) continue;
        tr_error e = {0};
        if (tr_image_set_sample(s, i, px, buf, &e) == TR_OK) continue;
        /* a sample that does not decode: no file (the run meets the error where it uses the sample) */
        if (atomic_exchange(&dk->active, 0)) {
            snprintf(dk->outcome, sizeof dk->outcome, "%s: not written, an image does not decode: %s", dk->path,
                     e.msg);
            atomic_store_explicit(&dk->state, DISK_FAILED, memory_order_release);
        }
        break;
    }
    free(px);
}
