/*
 * checkpoint.c -- the checkpoint protocol (see checkpoint.h): save into a temporary directory, fsync, rename,
 * fsync the parent, prune; verify the manifest before loading; restore model, optimizer, generator and cursor.
 */
#define _GNU_SOURCE /* realpath, MAP_ANONYMOUS, MAP_POPULATE */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io.h"
#include "safetensors.h"

static const char *const k_files[] = {"model.safetensors", "optimizer.safetensors", "rng.safetensors",
                                      "trainer.json"};
#define N_FILES (sizeof k_files / sizeof k_files[0])

/* ------------------------------------------------------------------------------------------------ small helpers */

static void warnf(tr_ckpt_warn_fn warn, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void warnf(tr_ckpt_warn_fn warn, void *ctx, const char *fmt, ...)
{
    if (!warn) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    warn(ctx, msg);
}

/* fsync every file of a flat directory and the directory itself, all at once (tr_io_fsync_paths). Why each: a file's
 * fsync makes its data and size durable, and on most file systems (btrfs, with per-inode logs) one file's fsync
 * says nothing of another's; the directory's makes the files' names in it durable. Both must hold before the
 * directory is renamed to step-N, or a power loss could leave a step-N whose files are empty or missing while the
 * prune that follows the rename has deleted the older checkpoints. (The rename itself is made durable by the fsync
 * of checkpoints/ after it, again before the prune.) The files were written unsynced with their write-back already
 * started (tr_st_write_packed_unsynced, write_text), so the file system commits them in one go; run at once, the
 * fsyncs also share their cache flushes, where in a row each paid one. */
static int fsync_dir_files(const char *dir, tr_error *err)
{
    DIR *d = opendir(dir);
    if (!d) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open to fsync: %s", dir, strerror(errno));
    enum { MAX_PATHS = TR_CKPT_MAX_FILES + 1 };
    static const size_t path_size = TR_PATH_MAX + 320;
    char *buf = malloc(MAX_PATHS * path_size);
    const char *paths[MAX_PATHS];
    int is_dir[MAX_PATHS];
    size_t n = 0;
    int rc = buf ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "%s: out of memory to fsync", dir);
    for (struct dirent *e; !rc && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char *path = buf + n * path_size;
        if (n + 1 >= MAX_PATHS) rc = tr_error_set(err, TR_E_RUNTIME, "%s: more than %d files", dir, MAX_PATHS - 1);
        else if (snprintf(path, path_size, "%s/%s", dir, e->d_name) >= (int)path_size)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: path too long to fsync", dir);
        else {
            paths[n] = path;
            is_dir[n++] = 0;
        }
    }
    closedir(d);
    if (!rc) {
        paths[n] = dir;
        is_dir[n++] = 1;
        rc = tr_io_fsync_paths(paths, is_dir, n, err);
    }
    free(buf);
    return rc;
}

/* snprintf that reports truncation: nonzero when `out` could not hold the whole result. */
#define PATHF(out, ...) (snprintf((out), sizeof(out), __VA_ARGS__) >= (int)sizeof(out))

static void hexfloat(double v, char *out, size_t n) { snprintf(out, n, "%a", v); }

static cJSON *add_hex(cJSON *o, const char *key, double v)
{
    char b[64];
    hexfloat(v, b, sizeof b);
    return cJSON_AddStringToObject(o, key, b);
}

/* int64 values as decimal strings: cJSON numbers are doubles printed with 15 digits. */
static cJSON *add_i64(cJSON *o, const char *key, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    return cJSON_AddStringToObject(o, key, b);
}

void tr_ckpt_json_add_threads(cJSON *o)
{
    int intra = 0, inter = 0, blas = 0;
    trs_get_threads(&intra, &inter, &blas);
    cJSON *th = cJSON_AddObjectToObject(o, "threads");
    cJSON_AddNumberToObject(th, "intra_op", intra);
    cJSON_AddNumberToObject(th, "inter_op", inter);
    cJSON_AddNumberToObject(th, "blas", blas);
}

static const char *get_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int write_text(const char *path, const char *text, tr_error *err)
{
    const int fd = tr_io_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    if (tr_io_write_all(fd, text, strlen(text)) != 0) {
        const int e = errno;
        close(fd);
        unlink(path);
        return tr_error_set(err, TR_E_RUNTIME, "%s: write failed: %s", path, strerror(e));
    }
    tr_start_writeback(fd);
    if (close(fd) != 0) {
        unlink(path);
        return tr_error_set(err, TR_E_RUNTIME, "%s: close failed: %s", path, strerror(errno));
    }
    return TR_OK;
}

static char *read_text(const char *path, tr_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tr_error_set(err, TR_E_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n > (64L << 20)) { /* a manifest, trainer.json or model spec: kilobytes; refuse before allocating */
        fclose(f);
        tr_error_set(err, TR_E_RUNTIME, "%s: %ld bytes, more than the 64 MiB a checkpoint's JSON may have", path, n);
        return NULL;
    }
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        tr_error_set(err, TR_E_RUNTIME, "%s: cannot read", path);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static tr_st_dtype st_dtype(trs_dtype d)
{
    switch (d) {
    case TRS_DTYPE_FLOAT32: return TR_ST_F32;
    case TRS_DTYPE_INT64: return TR_ST_I64;
    case TRS_DTYPE_UINT8: return TR_ST_U8;
    default: return TR_ST_DTYPE_COUNT_;
    }
}

static int shim_dtype(tr_st_dtype d, trs_dtype *out)
{
    switch (d) {
    case TR_ST_F32: *out = TRS_DTYPE_FLOAT32; return 0;
    case TR_ST_I64: *out = TRS_DTYPE_INT64; return 0;
    case TR_ST_U8: *out = TRS_DTYPE_UINT8; return 0;
    default: return -1;
    }
}

/* ------------------------------------------------------------------------------------------------ fingerprint */

int tr_config_not_fingerprinted(const char *key)
{
    static const char *const prefixes[] = {"run.", "log.", "checkpoint.", "watchdog.", "eval.", "init.", "debug.",
                                           "memory.", "early_stopping."};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return strcmp(key, "device") == 0 || strcmp(key, "model.spec") == 0 || strcmp(key, "model.torchscript") == 0 ||
           strcmp(key, "data.root") == 0;
}

/* What differs between a checkpoint's config_yaml and `cfg`, in words, into out[n]: "train.max_steps 3000 -> 4100
 * (checkpoint -> now)", or that only the model spec's text or the data directory does. */
static void config_changes(const char *saved_yaml, const tr_config *cfg, char *out, size_t n)
{
    tr_config *saved = malloc(sizeof *saved);
    tr_error ignore = {0};
    int keys = -1;
    if (saved && saved_yaml) {
        tr_config_defaults(saved);
        if (tr_config_load_string(saved, saved_yaml, "config_yaml", &ignore) == TR_OK)
            keys = tr_config_diff(saved, cfg, tr_config_not_fingerprinted, out, n > 32 ? n - 32 : n);
    }
    free(saved);
    if (keys > 0) {
        const size_t len = strlen(out);
        snprintf(out + len, n - len, " (checkpoint -> now)");
    } else if (keys == 0) {
        snprintf(out, n, "the model spec's text or the data directory (every key agrees)");
    } else {
        snprintf(out, n, "keys not known (the checkpoint's config_yaml is missing or unreadable)");
    }
}

int tr_checkpoint_read_classes(const char *ckpt_dir, char ***names, int64_t *n, tr_error *err)
{
    *names = NULL;
    *n = 0;
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/trainer.json", ckpt_dir);
    char *text = read_text(file, err);
    if (!text) return TR_E_RUNTIME;
    cJSON *o = cJSON_Parse(text);
    free(text);
    if (!o) return tr_error_set(err, TR_E_RUNTIME, "%s: not valid JSON", file);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "classes"), *e;
    int rc = TR_OK;
    if (list && (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > 65536))
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field classes: not a list of at most 65536 names", file);
    const int count = list && !rc ? cJSON_GetArraySize(list) : 0;
    char **out = count ? calloc((size_t)count, sizeof *out) : NULL;
    if (count && !out) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
    int i = 0;
    if (out) cJSON_ArrayForEach(e, list)
        {
            const size_t len = cJSON_IsString(e) && e->valuestring ? strlen(e->valuestring) : 0;
            if (len < 1 || len > 255) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: field classes[%d]: not a name of 1 to 255 bytes", file, i);
                break;
            }
            if (!(out[i++] = strdup(e->valuestring))) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
                break;
            }
        }
    cJSON_Delete(o);
    if (rc) {
        for (int k = 0; k < count && out; k++) free(out[k]);
        free(out);
        return rc;
    }
    *names = out;
    *n = count;
    return TR_OK;
}

int tr_checkpoint_read_config(const char *ckpt_dir, tr_config *out, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/trainer.json", ckpt_dir);
    char *text = read_text(file, err);
    if (!text) return TR_E_RUNTIME;
    cJSON *o = cJSON_Parse(text);
    free(text);
    const char *yaml = o ? get_str(o, "config_yaml") : NULL;
    int rc;
    if (!yaml) {
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: no config_yaml", file);
    } else {
        tr_config_defaults(out);
        rc = tr_config_load_string(out, yaml, file, err);
    }
    cJSON_Delete(o);
    return rc;
}

/* tr_config_fingerprint's last result and what it was computed from (the process's one entry, under its lock). */
static struct {
    pthread_mutex_t lock;
    char *text; /* the config text hashed (malloc'd) */
    size_t len;
    char path[TR_PATH_MAX];
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
    char hex[65];
} fp_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

int tr_config_fingerprint(const tr_config *cfg, char hex[65], tr_error *err)
{
    tr_config c = *cfg, d;
    tr_config_defaults(&d);
    c.run = d.run;
    c.log = d.log;
    c.checkpoint = d.checkpoint;
    c.early_stopping = d.early_stopping; /* when a run stops, not what it computes until then */
    c.watchdog = d.watchdog;
    c.eval = d.eval;
    c.init = d.init;
    c.debug = d.debug;
    c.memory = d.memory; /* the allocator's settings change no result */
    memcpy(c.device, d.device, sizeof c.device); /* a resume on another device is warned about by name instead */
    memset(c.source, 0, sizeof c.source);
    memset(c.model.spec, 0, sizeof c.model.spec);
    memset(c.model.torchscript, 0, sizeof c.model.torchscript);
    /* the data directory by where it is, not how it was spelled (a run's config.yaml holds the absolute path) */
    char root[TR_PATH_MAX], abs[PATH_MAX];
    tr_config_resolve_path(cfg, cfg->data.root, root);
    memset(c.data.root, 0, sizeof c.data.root);
    if (realpath(root, abs) && strlen(abs) < sizeof c.data.root) memcpy(c.data.root, abs, strlen(abs) + 1);
    else memcpy(c.data.root, root, strlen(root) + 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "config fingerprint: out of memory");
    tr_config_write_yaml(&c, f);
    fclose(f);

    /* The model by its content, not where it is: the YAML's or the TorchScript archive's bytes (an unreadable
     * file adds nothing; loading it fails the run anyway). */
    char spec_path[TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->model.torchscript[0] ? cfg->model.torchscript : cfg->model.spec, spec_path);

    /* The last fingerprint, by the exact text hashed and the model file's identity and change times: a run
     * saves many checkpoints of one config, and hashing a TorchScript archive of tens of MB on each would stall
     * the loop for as long (a file rewritten or replaced gets new times, so it is hashed again). Checked by
     * tests/test_checkpoint.c (fingerprint_follows_the_model_file). */
    struct stat sst;
    const int have_stat = stat(spec_path, &sst) == 0;
    pthread_mutex_lock(&fp_cache.lock);
    const int hit = have_stat && fp_cache.text && fp_cache.len == len && memcmp(fp_cache.text, text, len) == 0 &&
                    strcmp(fp_cache.path, spec_path) == 0 && fp_cache.dev == sst.st_dev &&
                    fp_cache.ino == sst.st_ino && fp_cache.size == sst.st_size &&
                    fp_cache.mtime.tv_sec == sst.st_mtim.tv_sec && fp_cache.mtime.tv_nsec == sst.st_mtim.tv_nsec &&
                    fp_cache.ctime.tv_sec == sst.st_ctim.tv_sec && fp_cache.ctime.tv_nsec == sst.st_ctim.tv_nsec;
    if (hit) memcpy(hex, fp_cache.hex, 65);
    pthread_mutex_unlock(&fp_cache.lock);
    if (hit) {
        free(text);
        return TR_OK;
    }

    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, text, len);
    FILE *spec = ok ? fopen(spec_path, "rb") : NULL;
    if (spec) {
        char buf[65536];
        size_t n;
        while (ok && (n = fread(buf, 1, sizeof buf, spec)) > 0) ok = EVP_DigestUpdate(ctx, buf, n);
        fclose(spec);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        free(text);
        return tr_error_set(err, TR_E_RUNTIME, "config fingerprint: SHA-256 failed");
    }
    for (unsigned i = 0; i < mdlen && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    /* Remembered only when the file's content was last changed 2 s or more before this hash ("racy git"): a change
     * within the same clock tick as an earlier one could keep its mtime and size, but one made after now cannot;
     * setting the mtime back by hand changes the ctime. */
    if (have_stat && time(NULL) - sst.st_mtim.tv_sec >= 2) {
        /* the text's ownership passes to the cache */
        pthread_mutex_lock(&fp_cache.lock);
        free(fp_cache.text);
        fp_cache.text = text;
        fp_cache.len = len;
        snprintf(fp_cache.path, sizeof fp_cache.path, "%s", spec_path);
        fp_cache.dev = sst.st_dev;
        fp_cache.ino = sst.st_ino;
        fp_cache.size = sst.st_size;
        fp_cache.mtime = sst.st_mtim;
        fp_cache.ctime = sst.st_ctim;
        memcpy(fp_cache.hex, hex, 65);
        pthread_mutex_unlock(&fp_cache.lock);
        text = NULL;
    }
    free(text);
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ save */

/* Every entry of the model, optimizer or EMA at once (trs_*_state_describe / _read_all: one pass over the state,
 * where one call per entry would rebuild the whole list each time). */
typedef trs_status (*describe_fn)(void *h, trs_state_desc *out, int64_t cap, int64_t *count);
typedef trs_status (*read_all_fn)(void *h, void *const *dst, const size_t *nbytes, int64_t count);

typedef struct source {
    void *handle;
    describe_fn describe;
    read_all_fn read_all;
    const char *(*errmsg)(const void *h);
} source;

static trs_status m_describe(void *h, trs_state_desc *o, int64_t cap, int64_t *n)
{
    return trs_model_state_describe(h, o, cap, n);
}
static trs_status m_read_all(void *h, void *const *d, const size_t *nb, int64_t n)
{
    return trs_model_state_read_all(h, d, nb, n);
}
static const char *m_err(const void *h) { return trs_model_errmsg(h); }
static trs_status o_describe(void *h, trs_state_desc *o, int64_t cap, int64_t *n)
{
    return trs_optimizer_state_describe(h, o, cap, n);
}
static trs_status o_read_all(void *h, void *const *d, const size_t *nb, int64_t n)
{
    return trs_optimizer_state_read_all(h, d, nb, n);
}
static const char *o_err(const void *h) { return trs_optimizer_errmsg(h); }
static trs_status e_describe(void *h, trs_state_desc *o, int64_t cap, int64_t *n)
{
    return trs_ema_state_describe(h, o, cap, n);
}
static trs_status e_read_all(void *h, void *const *d, const size_t *nb, int64_t n)
{
    return trs_ema_state_read_all(h, d, nb, n);
}
static const char *e_err(const void *h) { return trs_ema_errmsg(h); }

/* List a source's entries as safetensors descriptions (malloc'd array into *out, count into *n), each with its
 * nbytes. */
static int describe_source(const source *s, tr_st_tensor **out, size_t *n, tr_error *err)
{
    int64_t count = 0;
    if (s->describe(s->handle, NULL, 0, &count) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "checkpoint: %s", s->errmsg(s->handle));
    trs_state_desc *ds = calloc(count > 0 ? (size_t)count : 1, sizeof *ds);
    tr_st_tensor *ts = calloc(count > 0 ? (size_t)count : 1, sizeof *ts);
    int64_t again = 0;
    int rc = TR_OK;
    if (!ds || !ts) rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: out of memory");
    else if (s->describe(s->handle, ds, count, &again) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: %s", s->errmsg(s->handle));
    else if (again != count)
        rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: the state changed from %lld to %lld entries while it was "
                          "described", (long long)count, (long long)again);
    for (int64_t i = 0; !rc && i < count; i++) {
        _Static_assert(sizeof ds[i].name <= sizeof ts[i].name, "entry names fit the safetensors writer's");
        _Static_assert(TRS_MAX_DIMS <= TR_ST_MAX_DIMS, "entry ranks fit the safetensors writer's");
        memcpy(ts[i].name, ds[i].name, sizeof ds[i].name);
        ts[i].ndim = ds[i].ndim;
        memcpy(ts[i].shape, ds[i].shape, sizeof ds[i].shape);
        ts[i].dtype = st_dtype(ds[i].dtype);
        if (ts[i].dtype == TR_ST_DTYPE_COUNT_)
            rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: %s has a dtype trainrun cannot store", ts[i].name);
        ts[i].nbytes = ds[i].nbytes;
    }
    free(ds);
    if (rc) {
        free(ts);
        return rc;
    }
    *out = ts;
    *n = (size_t)count;
    return TR_OK;
}

typedef struct written {
    char digest[TR_HASH_HEX_MAX]; /* XXH3-128, hex */
    uint64_t size;
} written;

/* The XXH3-128 digest and size of a text file just written from `text` (NUL-terminated), from the text itself:
 * what tr_hash_file would read back. `path` is only used in messages. */
static int hash_text(const char *path, const char *text, written *w, tr_error *err)
{
    const size_t n = strlen(text);
    tr_hash h = {0};
    const int bad = tr_hash_init(&h, TR_HASH_XXH3_128) != 0 || tr_hash_update(&h, text, n) != 0 ||
                    tr_hash_final(&h, w->digest) != 0;
    tr_hash_abort(&h);
    if (bad) return tr_error_set(err, TR_E_RUNTIME, "%s: XXH3-128 failed", path);
    w->size = n;
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ snapshot */

/* One safetensors file of a snapshot: its entries, and where its data section lies in the snapshot's arena (the
 * entries' bytes packed in order, as the file holds them: written from there with no copy). */
typedef struct snap_file {
    const char *name;  /* "model.safetensors", ...                         */
    tr_st_tensor *ts;  /* the entries (malloc'd), nbytes filled in          */
    size_t n;
    size_t base;       /* byte offset of its data section in the arena       */
    size_t bytes;      /* its length: the sum of the entries' nbytes         */
    int pt_meta;       /* with {"format": "pt"} metadata (PyTorch's files)  */
} snap_file;

enum { SNAP_MODEL, SNAP_OPTIM, SNAP_RNG, SNAP_EMA, SNAP_FILES };

struct tr_ckpt_snapshot {
    int64_t step;
    snap_file files[SNAP_FILES]; /* SNAP_EMA has name NULL when the run has no EMA */
    char *trainer_json;          /* trainer.json's text                               */
    unsigned char *arena;        /* one anonymous mapping: every entry's bytes        */
    size_t arena_bytes;          /* bytes of tensor data in it                        */
    size_t arena_map;            /* its mapped length                                 */
};

int64_t tr_checkpoint_snapshot_step(const tr_ckpt_snapshot *s) { return s ? s->step : -1; }
int64_t tr_checkpoint_snapshot_bytes(const tr_ckpt_snapshot *s) { return s ? (int64_t)s->arena_bytes : 0; }

/* The spare arena: the mapping of the last freed snapshot, kept resident for the next one. A fresh mapping's pages
 * are allocated and zeroed by the kernel as they are populated, which costs more than copying the state into them
 * (under a hypervisor that takes freed guest memory back, every page is a host fault too: 13 ms of the 16 ms a
 * 5 MB snapshot took, bench/checkpoint_async.md); a kept one is already resident. Its pages are not marked
 * MADV_FREE: on this project's VMs the kernel hands such pages back within a fraction of a second even with
 * memory to spare, and the next snapshot then faults all of them in afresh (8 ms instead of 0.3 ms to copy 5 MB,
 * measured on an idle machine, bench/checkpoint_async.md). So the spare holds one checkpoint's bytes of RSS from
 * the first save until the run ends, as PyTorch's cached staging buffers for async checkpoints do. One spare per
 * process, under a lock (snapshots may be freed on a writer thread); tr_checkpoint_release_spare unmaps it. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *spare_arena;
static size_t spare_map;

static void arena_unmap(unsigned char *a, size_t len)
{
    if (a) munmap(a, len);
}

/* A mapping of at least `need` bytes (never 0) into *a / *len: the spare when it is large enough and not more than
 * twice too large (else it is unmapped), or a fresh populated one. -1 with errno when none can be mapped. */
static int arena_get(size_t need, unsigned char **a, size_t *len)
{
    if (need == 0) need = 1;
    pthread_mutex_lock(&spare_lock);
    unsigned char *sp = spare_arena;
    size_t sl = spare_map;
    spare_arena = NULL;
    spare_map = 0;
    pthread_mutex_unlock(&spare_lock);
    if (sp && sl >= need && sl / 2 <= need) {
        *a = sp;
        *len = sl;
        return 0;
    }
    arena_unmap(sp, sl);
    void *m = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) return -1;
    *a = m;
    *len = need;
    return 0;
}

/* Park a snapshot's mapping as the spare (replacing an older one, which is unmapped). */
static void arena_put(unsigned char *a, size_t len)
{
    if (!a) return;
    pthread_mutex_lock(&spare_lock);
    unsigned char *old = spare_arena;
    const size_t old_len = spare_map;
    spare_arena = a;
    spare_map = len;
    pthread_mutex_unlock(&spare_lock);
    arena_unmap(old, old_len);
}

void tr_checkpoint_release_spare(void)
{
    pthread_mutex_lock(&spare_lock);
    unsigned char *a = spare_arena;
    const size_t len = spare_map;
    spare_arena = NULL;
    spare_map = 0;
    pthread_mutex_unlock(&spare_lock);
    arena_unmap(a, len);
}

void tr_checkpoint_snapshot_free(tr_ckpt_snapshot *s)
{
    if (!s) return;
    for (int i = 0; i < SNAP_FILES; i++) free(s->files[i].ts);
    arena_put(s->arena, s->arena_map);
    free(s->trainer_json);
    free(s);
}

/* The generator states rng.safetensors holds: one tensor per entry, U8 [nbytes]. */
typedef struct rng_entry {
    char name[48];
    const unsigned char *bytes;
    size_t nbytes;
} rng_entry;

/* The CUDA devices whose generators a checkpoint of `model` holds: every visible one when the model is on a CUDA
 * device (torch.cuda.get_rng_state_all), none on the CPU (which never touches CUDA). */
static int cuda_generators_of(trs_model *model)
{
    trs_device_type type = TRS_DEVICE_CPU;
    int count = 0;
    if (!model || trs_model_device(model, &type, NULL) != TRS_OK || type != TRS_DEVICE_CUDA) return 0;
    if (trs_cuda_device_count(&count) != TRS_OK) return 0;
    return count;
}

/* rng.safetensors' entries: "cpu_generator" (and "cpu_generator.rank<r>" of the other ranks), and on a CUDA device
 * "cuda_generator.<i>" for every visible device i. *es_out (count *n_out) point into *buf_out or p's gathered
 * states; the caller frees *es_out and *buf_out. */
static int describe_rng(trs_model *model, const tr_ckpt_progress *p, rng_entry **es_out, size_t *n_out,
                        unsigned char **buf_out, tr_error *err)
{
    size_t n = 0;
    if (trs_rng_state_size(&n) != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "rng: %s", trs_last_error());
    const int ranks = p->rank_rng && p->world_size > 1 ? p->world_size : 1;
    if (ranks > 1 && p->rank_rng_bytes != n)
        return tr_error_set(err, TR_E_RUNTIME, "rng: gathered states of %zu bytes, expected %zu", p->rank_rng_bytes, n);
    const int cuda = cuda_generators_of(model);
    size_t cuda_n = 0;
    if (cuda > 0 && trs_cuda_rng_state_size(0, &cuda_n) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "rng: CUDA generator: %s", trs_last_error());
    const int rank_cuda = ranks > 1 && p->rank_cuda_rng ? ranks - 1 : 0; /* ranks 1.. own devices' generators */
    const size_t count = (size_t)ranks + (size_t)cuda + (size_t)rank_cuda;
    unsigned char *buf = malloc(n * (size_t)ranks + cuda_n * (size_t)cuda + 1);
    rng_entry *es = calloc(count, sizeof *es);
    int rc = TR_OK;
    if (!buf || !es) rc = tr_error_set(err, TR_E_RUNTIME, "rng: out of memory");
    else if (ranks > 1) memcpy(buf, p->rank_rng, n * (size_t)ranks);
    else if (trs_rng_get_state(buf, n) != TRS_OK) rc = tr_error_set(err, TR_E_RUNTIME, "rng: %s", trs_last_error());
    for (int r = 0; !rc && r < ranks; r++) {
        if (r == 0) snprintf(es[r].name, sizeof es[r].name, "cpu_generator");
        else snprintf(es[r].name, sizeof es[r].name, "cpu_generator.rank%d", r);
        es[r].bytes = buf + (size_t)r * n;
        es[r].nbytes = n;
    }
    for (int i = 0; !rc && i < cuda; i++) {
        rng_entry *e = &es[ranks + i];
        unsigned char *dst = buf + n * (size_t)ranks + cuda_n * (size_t)i;
        snprintf(e->name, sizeof e->name, "cuda_generator.%d", i);
        e->bytes = dst;
        e->nbytes = cuda_n;
        if (trs_cuda_rng_get_state(i, dst, cuda_n) != TRS_OK)
            rc = tr_error_set(err, TR_E_RUNTIME, "rng: CUDA generator %d: %s", i, trs_last_error());
    }
    for (int r = 1; !rc && r <= rank_cuda; r++) {
        rng_entry *e = &es[ranks + cuda + r - 1];
        snprintf(e->name, sizeof e->name, "cuda_generator.rank%d", r);
        e->bytes = p->rank_cuda_rng + (size_t)r * p->rank_cuda_rng_bytes;
        e->nbytes = p->rank_cuda_rng_bytes;
    }
    if (rc) {
        free(buf);
        free(es);
        return rc;
    }
    *es_out = es;
    *n_out = count;
    *buf_out = buf;
    return TR_OK;
}

/* The model's device as the `device` key names it ("cpu", "cuda:N"). */
static void device_name_of(trs_model *model, char *buf, size_t n)
{
    trs_device_type type = TRS_DEVICE_CPU;
    int index = -1;
    if (model) trs_model_device(model, &type, &index);
    if (type == TRS_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", index);
    else snprintf(buf, n, "cpu");
}

/* trainer.json's "selection": what keeps the kept checkpoints, the stop step and the plateau's lr the same after
 * a resume (monitor.h). Absent when nothing is monitored. */
static void add_selection(cJSON *o, const tr_select_state *s)
{
    if (!s->topk_metric[0] && !s->es_metric[0] && !s->plateau_metric[0]) return;
    cJSON *sel = cJSON_AddObjectToObject(o, "selection");
    if (s->topk_metric[0]) {
        cJSON *c = cJSON_AddObjectToObject(sel, "checkpoint");
        cJSON_AddStringToObject(c, "monitor", s->topk_metric);
        cJSON_AddStringToObject(c, "mode", s->topk_max ? "max" : "min");
        cJSON *list = cJSON_AddArrayToObject(c, "top_k");
        for (int i = 0; i < s->topk.n; i++) {
            cJSON *e = cJSON_CreateObject();
            add_i64(e, "step", s->topk.step[i]);
            add_hex(e, "score", s->topk.score[i]);
            cJSON_AddItemToArray(list, e);
        }
    }
    if (s->es_metric[0]) {
        cJSON *e = cJSON_AddObjectToObject(sel, "early_stopping");
        cJSON_AddStringToObject(e, "monitor", s->es_metric);
        cJSON_AddStringToObject(e, "mode", s->es_max ? "max" : "min");
        add_hex(e, "best", s->es.best);
        add_i64(e, "best_step", s->es.best_step);
        add_i64(e, "wait", s->es.wait);
        cJSON_AddBoolToObject(e, "stopped", s->es.stopped);
    }
    if (s->plateau_metric[0]) {
        cJSON *e = cJSON_AddObjectToObject(sel, "plateau");
        cJSON_AddStringToObject(e, "monitor", s->plateau_metric);
        add_hex(e, "lr", s->plateau.lr);
        add_hex(e, "best", s->plateau.best);
        add_i64(e, "num_bad", s->plateau.bad);
        add_i64(e, "cooldown_counter", s->plateau.cooldown);
        add_i64(e, "reductions", s->plateau.reductions);
    }
}

static char *trainer_json(const tr_config *cfg, trs_model *model, trs_optimizer *opt, trs_ema *ema,
                          const tr_ckpt_progress *p, const char *reason, tr_error *err)
{
    char fp[65] = "";
    if (tr_config_fingerprint(cfg, fp, err)) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "format_version", TR_CKPT_FORMAT_VERSION);
    cJSON_AddStringToObject(o, "trainrun_version", TR_VERSION);
    cJSON_AddStringToObject(o, "libtorch_version", trs_torch_version());
    tr_ckpt_json_add_threads(o);
    char device[32];
    device_name_of(model, device, sizeof device);
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddNumberToObject(o, "cuda_generators", cuda_generators_of(model));
    cJSON_AddStringToObject(o, "reason", reason);
    char stamp[32];
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(o, "saved_at", stamp);

    add_i64(o, "step", p->step);
    add_i64(o, "epoch", p->epoch);
    add_i64(o, "position", p->pos);
    if (p->epoch_samples > 0) add_i64(o, "epoch_samples", p->epoch_samples);
    add_hex(o, "elapsed_seconds", p->elapsed);
    add_i64(o, "evals_done", p->evals_done);
    cJSON *win = cJSON_AddObjectToObject(o, "log_window");
    add_hex(win, "loss_sum", p->win_loss);
    add_i64(win, "correct", p->win_correct);
    add_i64(win, "samples", p->win_samples);
    add_i64(win, "steps", p->win_steps);
    add_hex(o, "last_loss", p->last_loss);
    cJSON_AddBoolToObject(o, "has_val", p->has_val);
    add_hex(o, "val_loss", p->val_loss);
    add_hex(o, "val_accuracy", p->val_accuracy);
    add_i64(o, "samples_total", p->samples_total);
    add_i64(o, "world_size", p->world_size > 1 ? p->world_size : 1);
    add_hex(o, "step_seconds", p->step_seconds);
    if (p->step_samples > 0) { /* the cursor's geometry and origin (checkpoint.h): a run's checkpoints */
        cJSON *c = cJSON_AddObjectToObject(o, "cursor");
        add_i64(c, "step_samples", p->step_samples);
        cJSON_AddBoolToObject(c, "drop_last", p->drop_last);
        cJSON *origin = cJSON_AddObjectToObject(c, "origin");
        add_i64(origin, "step", p->origin_step);
        add_i64(origin, "epoch", p->origin_epoch);
        add_i64(origin, "position", p->origin_pos);
        add_i64(origin, "samples", p->origin_samples);
    }
    add_selection(o, &p->sel);
    if (p->classes) {
        cJSON *cl = cJSON_AddArrayToObject(o, "classes");
        for (int64_t i = 0; i < p->n_classes; i++) cJSON_AddItemToArray(cl, cJSON_CreateString(p->classes[i]));
    }

    if (ema) {
        int64_t updates = 0;
        trs_ema_get_updates(ema, &updates);
        add_i64(o, "ema_updates", updates);
    }
    double lr = 0;
    trs_optimizer_get_lr(opt, &lr);
    cJSON *groups = cJSON_AddArrayToObject(o, "param_groups");
    int64_t n_groups = 1;
    trs_optimizer_param_group(opt, -1, &n_groups, NULL, NULL, 0);
    for (int64_t gi = 0; gi < n_groups; gi++) {
        cJSON *g = cJSON_CreateObject();
        double wd = cfg->optim.weight_decay;
        int64_t n_params = 0;
        char names[4096] = "";
        trs_optimizer_param_group(opt, gi, &n_params, &wd, names, sizeof names);
        add_hex(g, "lr", lr);
        add_hex(g, "weight_decay", wd);
        add_hex(g, "momentum", cfg->optim.momentum);
        add_hex(g, "dampening", cfg->optim.dampening);
        cJSON_AddBoolToObject(g, "nesterov", cfg->optim.nesterov);
        add_hex(g, "beta1", cfg->optim.beta1);
        add_hex(g, "beta2", cfg->optim.beta2);
        add_hex(g, "eps", cfg->optim.eps);
        cJSON_AddStringToObject(g, "params", names);
        cJSON_AddItemToArray(groups, g);
    }

    cJSON_AddStringToObject(o, "config_fingerprint", fp);
    char *yaml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&yaml, &len);
    if (f) {
        tr_config_write_yaml(cfg, f);
        fclose(f);
        cJSON_AddStringToObject(o, "config_yaml", yaml);
        free(yaml);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) tr_error_set(err, TR_E_RUNTIME, "trainer.json: out of memory");
    return text;
}

int tr_checkpoint_snapshot(const tr_config *cfg, trs_model *model, trs_optimizer *opt, trs_ema *ema,
                           const tr_ckpt_progress *p, const char *reason, tr_ckpt_snapshot **out, tr_error *err)
{
    *out = NULL;
    tr_ckpt_snapshot *s = calloc(1, sizeof *s);
    if (!s) return tr_error_set(err, TR_E_RUNTIME, "checkpoint: out of memory");
    s->step = p->step;
    const source srcs[SNAP_FILES] = {
        [SNAP_MODEL] = {model, m_describe, m_read_all, m_err},
        [SNAP_OPTIM] = {opt, o_describe, o_read_all, o_err},
        [SNAP_EMA] = {ema, e_describe, e_read_all, e_err},
    };
    static const char *const names[SNAP_FILES] = {"model.safetensors", "optimizer.safetensors", "rng.safetensors",
                                                  "ema.safetensors"};
    rng_entry *rng = NULL;
    unsigned char *rng_buf = NULL;
    int rc = TR_OK;
    /* 1. what every file holds, and so the arena's size: each file's data section, packed */
    size_t total = 0, most = 0;
    for (int k = 0; k < SNAP_FILES && !rc; k++) {
        snap_file *f = &s->files[k];
        if (k == SNAP_EMA && !ema) continue;
        f->name = names[k];
        f->pt_meta = k != SNAP_RNG;
        if (k == SNAP_RNG) {
            if (!(rc = describe_rng(model, p, &rng, &f->n, &rng_buf, err))) {
                f->ts = calloc(f->n ? f->n : 1, sizeof *f->ts);
                if (!f->ts) rc = tr_error_set(err, TR_E_RUNTIME, "rng: out of memory");
                for (size_t i = 0; !rc && i < f->n; i++) {
                    snprintf(f->ts[i].name, sizeof f->ts[i].name, "%s", rng[i].name);
                    f->ts[i].dtype = TR_ST_U8;
                    f->ts[i].ndim = 1;
                    f->ts[i].shape[0] = (int64_t)rng[i].nbytes;
                    f->ts[i].nbytes = rng[i].nbytes;
                }
            }
        } else {
            rc = describe_source(&srcs[k], &f->ts, &f->n, err);
        }
        f->base = total;
        for (size_t i = 0; !rc && i < f->n; i++) f->bytes += (size_t)f->ts[i].nbytes;
        total += f->bytes;
        if (f->n > most) most = f->n;
    }
    /* 2. one anonymous mapping for all of it (the spare when there is one, arena_get): outside libtorch's allocator
     *    (the watchdog's `allocated` never counts it) and outside malloc's heap */
    if (!rc) {
        s->arena_bytes = total;
        if (arena_get(total, &s->arena, &s->arena_map) != 0)
            rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: cannot map %zu bytes for the state's copy: %s", total,
                              strerror(errno));
    }
    /* 3. the bytes: parameters, buffers, optimizer state, EMA (each in one call), generator states */
    void **dst = rc ? NULL : malloc((most ? most : 1) * sizeof *dst);
    size_t *nbytes = rc ? NULL : malloc((most ? most : 1) * sizeof *nbytes);
    if (!rc && (!dst || !nbytes)) rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: out of memory");
    for (int k = 0; k < SNAP_FILES && !rc; k++) {
        const snap_file *f = &s->files[k];
        if (!f->name) continue;
        size_t at = f->base;
        for (size_t i = 0; i < f->n; i++) {
            dst[i] = s->arena + at;
            nbytes[i] = (size_t)f->ts[i].nbytes;
            at += nbytes[i];
        }
        if (k == SNAP_RNG) {
            for (size_t i = 0; i < f->n; i++) memcpy(dst[i], rng[i].bytes, rng[i].nbytes);
        } else if (srcs[k].read_all(srcs[k].handle, dst, nbytes, (int64_t)f->n) != TRS_OK) {
            rc = tr_error_set(err, TR_E_RUNTIME, "checkpoint: %s: %s", f->name, srcs[k].errmsg(srcs[k].handle));
        }
    }
    free(dst);
    free(nbytes);
    free(rng);
    free(rng_buf);
    if (!rc && !(s->trainer_json = trainer_json(cfg, model, opt, ema, p, reason, err))) rc = TR_E_RUNTIME;
    if (rc) {
        tr_checkpoint_snapshot_free(s);
        return rc;
    }
    *out = s;
    return TR_OK;
}

int tr_checkpoint_write(const char *run_dir, const tr_ckpt_snapshot *s, char *path_out, int64_t *bytes,
                        tr_error *err)
{
    char root[TR_PATH_MAX], tmp[TR_PATH_MAX + 64], final[TR_PATH_MAX + 64];
    if (PATHF(root, "%s/checkpoints", run_dir))
        return tr_error_set(err, TR_E_RUNTIME, "%s: run directory path too long for checkpoints", run_dir);
    struct stat st;
    if (stat(root, &st) != 0 && tr_io_mkdir(root, 0777) != 0 && errno != EEXIST)
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s", root, strerror(errno));
    /* Temporaries of saves that were killed first, so a full disk is not made fuller by each retry. */
    tr_io_remove_stale(root);
    snprintf(final, sizeof final, "%s/step-%010lld", root, (long long)s->step);
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%010lld-%ld", root, (long long)s->step, (long)getpid());
    if (stat(final, &st) == 0)
        return tr_error_set(err, TR_E_RUNTIME, "%s already exists; a complete checkpoint is never replaced", final);
    tr_io_discard_dir(tmp);
    if (tr_io_mkdir(tmp, 0777) != 0) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s", tmp, strerror(errno));

    written w[N_FILES + 1]; /* model, optimizer, rng, trainer.json; the last: ema.safetensors */
    memset(w, 0, sizeof w);
    const int slot[SNAP_FILES] = {[SNAP_MODEL] = 0, [SNAP_OPTIM] = 1, [SNAP_RNG] = 2, [SNAP_EMA] = N_FILES};
    const int ema = s->files[SNAP_EMA].name != NULL;
    int rc = TR_OK;
    char path[TR_PATH_MAX + 128];
    for (int k = 0; k < SNAP_FILES && !rc; k++) {
        const snap_file *f = &s->files[k];
        if (!f->name) continue;
        if (PATHF(path, "%s/%s", tmp, f->name)) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: path too long", tmp);
            break;
        }
        const tr_st_meta meta[] = {{"format", "pt"}};
        rc = tr_st_write_packed_unsynced(path, f->ts, f->n, f->pt_meta ? meta : NULL, f->pt_meta ? 1 : 0,
                                         s->arena + f->base, TR_HASH_XXH3_128, w[slot[k]].digest, &w[slot[k]].size,
                                         err);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/trainer.json", tmp);
        rc = write_text(path, s->trainer_json, err);
        if (!rc) rc = hash_text(path, s->trainer_json, &w[3], err);
    }
    /* Token data: the run's vocabulary (RUN_DIR/vocab.json, run.c) travels with the weights it belongs to. */
    written vocab = {0};
    int has_vocab = 0;
    if (!rc) {
        char src[TR_PATH_MAX + 32];
        snprintf(src, sizeof src, "%s/vocab.json", run_dir); /* written once at start-up (run.c) */
        struct stat vst;
        if (stat(src, &vst) == 0) {
            char *text = read_text(src, err);
            if (!text) rc = TR_E_RUNTIME;
            if (!rc) {
                snprintf(path, sizeof path, "%s/vocab.json", tmp);
                rc = write_text(path, text, err);
                if (!rc) rc = hash_text(path, text, &vocab, err);
                has_vocab = !rc;
            }
            free(text);
        }
    }
    if (!rc) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "format_version", TR_CKPT_MANIFEST_VERSION);
        add_i64(m, "step", s->step);
        cJSON *files = cJSON_AddObjectToObject(m, "files");
        for (size_t i = 0; i < N_FILES; i++) {
            cJSON *e = cJSON_AddObjectToObject(files, k_files[i]);
            add_i64(e, "size", (int64_t)w[i].size);
            cJSON_AddStringToObject(e, tr_hash_name(TR_HASH_XXH3_128), w[i].digest);
        }
        if (ema) {
            cJSON *e = cJSON_AddObjectToObject(files, "ema.safetensors");
            add_i64(e, "size", (int64_t)w[N_FILES].size);
            cJSON_AddStringToObject(e, tr_hash_name(TR_HASH_XXH3_128), w[N_FILES].digest);
        }
        if (has_vocab) {
            cJSON *e = cJSON_AddObjectToObject(files, "vocab.json");
            add_i64(e, "size", (int64_t)vocab.size);
            cJSON_AddStringToObject(e, tr_hash_name(TR_HASH_XXH3_128), vocab.digest);
        }
        char *text = cJSON_Print(m);
        cJSON_Delete(m);
        snprintf(path, sizeof path, "%s/MANIFEST.json", tmp);
        rc = text ? write_text(path, text, err) : tr_error_set(err, TR_E_RUNTIME, "manifest: out of memory");
        free(text);
    }
    if (!rc) rc = fsync_dir_files(tmp, err);
    if (!rc && tr_io_rename(tmp, final) != 0)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (!rc) rc = tr_io_fsync_path(root, 1, err);
    if (rc) {
        tr_io_discard_dir(tmp); /* after a failed rename or fsync of checkpoints/ the new step-N may exist: */
        if (rc && stat(final, &st) == 0 && tr_checkpoint_verify(final, NULL) != TR_OK) tr_io_discard_dir(final);
        return rc;
    }
    if (path_out && snprintf(path_out, TR_PATH_MAX, "%s", final) >= TR_PATH_MAX) path_out[0] = '\0';
    if (bytes) {
        *bytes = 0;
        for (size_t i = 0; i <= N_FILES; i++) *bytes += (int64_t)w[i].size;
        *bytes += (int64_t)vocab.size;
    }
    return TR_OK;
}

int tr_checkpoint_save(const char *run_dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt,
                       trs_ema *ema, const tr_ckpt_progress *p, const char *reason, char *path_out, int64_t *bytes,
                       tr_error *err)
{
    tr_ckpt_snapshot *s = NULL;
    int rc = tr_checkpoint_snapshot(cfg, model, opt, ema, p, reason, &s, err);
    if (!rc) rc = tr_checkpoint_write(run_dir, s, path_out, bytes, err);
    tr_checkpoint_snapshot_free(s);
    return rc;
}
static int read_trainer(const char *dir, tr_ckpt_progress *p, tr_ckpt_meta *m, tr_error *err);

/* ------------------------------------------------------------------------------------------------ listing */

/* Steps of the complete checkpoints under run_dir/checkpoints, newest first (malloc'd; count in *n). */
static int64_t *list_steps(const char *run_dir, size_t *n)
{
    char root[TR_PATH_MAX + 16];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    *n = 0;
    DIR *d = opendir(root);
    if (!d) return NULL;
    size_t cap = 16;
    int64_t *steps = malloc(cap * sizeof *steps);
    struct dirent *e;
    while (steps && (e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        if (*n == cap) {
            int64_t *bigger = realloc(steps, 2 * cap * sizeof *steps);
            if (!bigger) break;
            steps = bigger;
            cap *= 2;
        }
        steps[(*n)++] = s;
    }
    closedir(d);
    /* newest first */
    for (size_t i = 1; i < *n; i++)
        for (size_t j = i; j > 0 && steps[j - 1] < steps[j]; j--) {
            const int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return steps;
}

int tr_checkpoint_prune(const char *run_dir, int64_t keep_last, int64_t step, const tr_topk *best, tr_error *err)
{
    size_t n = 0;
    int64_t *steps = list_steps(run_dir, &n);
    /* A set that names nothing (a state without top-k entries): best.json's, from the saves before, are kept. A set
     * with entries is the newer word (best.json is rewritten from it once this save is complete). */
    tr_topk named = {0};
    char monitor[TR_MONITOR_NAME];
    int mode_max;
    if (!best || best->n == 0) tr_ckpt_best_json(run_dir, monitor, &mode_max, &named);
    char path[TR_PATH_MAX + 64];
    char trash[TR_PATH_MAX + 96];
    int rc = TR_OK;
    /* Count only checkpoints at or before `step` (the one just saved): a newer directory is not this run's to
     * weigh, and must never push the checkpoint just written out. */
    size_t first = 0;
    while (first < n && steps[first] > step) first++;
    /* checkpoint.save_top_k's best are kept apart: never pruned, and not counted against keep_last */
    size_t kept = 0;
    for (size_t i = first; i < n && !rc; i++) {
        if ((best && tr_topk_has(best, steps[i])) || tr_topk_has(&named, steps[i])) continue;
        if (kept < (size_t)keep_last) {
            kept++;
            continue;
        }
        /* Rename first (atomic), delete after: a kill mid-way leaves a .trash-* directory, never a half-deleted
         * step-* that looks like a checkpoint. */
        if (PATHF(path, "%s/checkpoints/step-%010lld", run_dir, (long long)steps[i]) ||
            PATHF(trash, "%s/checkpoints/.trash-step-%010lld-%ld", run_dir, (long long)steps[i], (long)getpid()))
            continue;
        if (tr_io_rename(path, trash) != 0)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: cannot remove (keep_last %lld): rename to %s failed: %s", path,
                              (long long)keep_last, trash, strerror(errno));
        else if (tr_io_remove_dir(trash) != 0)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: cannot remove the pruned checkpoint: %s", trash, strerror(errno));
    }
    free(steps);
    /* Stale temporaries of saves that were killed (incomplete by construction) and interrupted deletions. */
    char root[TR_PATH_MAX + 16];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    tr_io_remove_stale(root);
    return rc;
}

int tr_checkpoint_verify(const char *dir, tr_error *err)
{
    char path[TR_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/MANIFEST.json", dir);
    char *text = read_text(path, err);
    if (!text) return TR_E_RUNTIME;
    tr_ckpt_manifest *m = malloc(sizeof *m);
    if (!m) {
        free(text);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    }
    int rc = tr_ckpt_parse_manifest(text, path, m, err);
    free(text);
    for (size_t i = 0; i < N_FILES && !rc; i++) {
        int found = 0;
        for (int j = 0; j < m->n && !found; j++) found = strcmp(m->files[j].name, k_files[i]) == 0;
        if (!found) rc = tr_error_set(err, TR_E_RUNTIME, "%s: no entry for %s", path, k_files[i]);
    }
    /* every file the manifest lists: the required ones and optional ones (ema.safetensors) */
    for (int j = 0; j < m->n && !rc; j++) {
        char fpath[TR_PATH_MAX + 128];
        snprintf(fpath, sizeof fpath, "%s/%s", dir, m->files[j].name);
        char hex[TR_HASH_HEX_MAX];
        uint64_t got = 0;
        if ((rc = tr_hash_file(fpath, m->algo, hex, &got, err))) break;
        if ((int64_t)got != m->files[j].size)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: %llu bytes, the manifest says %lld (truncated?)", fpath,
                              (unsigned long long)got, (long long)m->files[j].size);
        else if (strcmp(hex, m->files[j].digest) != 0)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s %s differs from the manifest's %s (corrupted)", fpath,
                              m->algo == TR_HASH_XXH3_128 ? "XXH3-128" : "SHA-256", hex, m->files[j].digest);
    }
    free(m);
    return rc;
}

int tr_checkpoint_find_latest(const char *run_dir, char *path_out, tr_ckpt_warn_fn warn, void *ctx, tr_error *err)
{
    path_out[0] = '\0';
    size_t n = 0;
    int64_t *steps = list_steps(run_dir, &n);
    char dir[TR_PATH_MAX + 64];
    for (size_t i = 0; i < n; i++) {
        snprintf(dir, sizeof dir, "%s/checkpoints/step-%010lld", run_dir, (long long)steps[i]);
        tr_error verr = {0};
        if (tr_checkpoint_verify(dir, &verr) == TR_OK) {
            if (snprintf(path_out, TR_PATH_MAX, "%s", dir) >= TR_PATH_MAX) {
                free(steps);
                path_out[0] = '\0';
                return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", dir);
            }
            break;
        }
        warnf(warn, ctx, "skipping checkpoint %s: %s", dir, verr.msg);
    }
    free(steps);
    return TR_OK;
}

int tr_checkpoint_set_aside(const char *ckpt_dir, const char *label, char *to_out, size_t to_size, tr_error *err)
{
    char to[TR_PATH_MAX + 96];
    struct stat st;
    for (int k = 1; k < 10000; k++) {
        if (PATHF(to, k == 1 ? "%s.%s" : "%s.%s-%d", ckpt_dir, label, k))
            return tr_error_set(err, TR_E_RUNTIME, "%s: path too long to set aside", ckpt_dir);
        if (stat(to, &st) != 0) break;
    }
    if (rename(ckpt_dir, to) != 0)
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot set aside: %s", ckpt_dir, strerror(errno));
    if (to_out) snprintf(to_out, to_size, "%s", to);
    return TR_OK;
}

int tr_checkpoint_set_aside_newer(const char *run_dir, int64_t step, tr_ckpt_warn_fn warn, void *ctx, tr_error *err)
{
    size_t n = 0;
    int64_t *steps = list_steps(run_dir, &n);
    char from[TR_PATH_MAX + 64], to[TR_PATH_MAX + 96];
    int rc = TR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        if (steps[i] <= step) continue;
        if (PATHF(from, "%s/checkpoints/step-%010lld", run_dir, (long long)steps[i])) continue;
        tr_error verr = {0};
        const char *label = tr_checkpoint_verify(from, &verr) == TR_OK ? "superseded" : "corrupt";
        if (!(rc = tr_checkpoint_set_aside(from, label, to, sizeof to, err)))
            warnf(warn, ctx, "set aside %s as %s", from, to);
    }
    free(steps);
    return rc;
}

/* Keys whose change cannot make a step fail that the checkpoint's config took: tr_config_fingerprint's unhashed
 * ones, and the run's length (a finished run extended). */
static int not_for_a_step(const char *key)
{
    return tr_config_not_fingerprinted(key) || strcmp(key, "train.max_steps") == 0 || strcmp(key, "train.epochs") == 0;
}

int tr_checkpoint_same_config(const char *ckpt_dir, const tr_config *cfg)
{
    tr_config *saved = malloc(sizeof *saved);
    tr_error ignore = {0};
    char diff[256];
    const int same = saved && tr_checkpoint_read_config(ckpt_dir, saved, &ignore) == TR_OK &&
                     tr_config_diff(saved, cfg, not_for_a_step, diff, sizeof diff) == 0;
    free(saved);
    return same;
}

/* ------------------------------------------------------------------------------------------------ load */

/* Compare the model's state_dict with a file's tensors; list every difference. strict: any difference fails;
 * otherwise only shape mismatches do. On success, *map[i] = file tensor for model entry i (or NULL). */
static int match_keys(trs_model *model, const tr_st_file *f, const char *file, bool strict,
                      const tr_st_tensor ***map_out, int64_t *n_out, tr_ckpt_warn_fn warn, void *ctx, tr_error *err)
{
    int64_t n = 0;
    if (trs_model_state_count(model, &n) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "%s", trs_model_errmsg(model));
    const tr_st_tensor **map = calloc(n > 0 ? (size_t)n : 1, sizeof *map);
    char *missing = calloc(1, 8192), *unexpected = calloc(1, 8192), *shapes = calloc(1, 8192);
    if (!map || !missing || !unexpected || !shapes) {
        free(map), free(missing), free(unexpected), free(shapes);
        return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    }
    int n_missing = 0, n_unexpected = 0, n_shapes = 0;
    for (int64_t i = 0; i < n; i++) {
        char name[TR_ST_NAME_MAX];
        int64_t shape[TRS_MAX_DIMS];
        int ndim = 0;
        trs_model_state_entry(model, i, name, sizeof name, shape, &ndim, NULL);
        const tr_st_tensor *t = tr_st_find(f, name);
        if (!t) {
            snprintf(missing + strlen(missing), 8192 - strlen(missing), "%s%s", n_missing++ ? ", " : "", name);
            continue;
        }
        int same = t->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
        if (!same) {
            char a[128] = "[", b[128] = "[";
            for (int d = 0; d < ndim; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? ", " : "", (long long)shape[d]);
            for (int d = 0; d < t->ndim; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            snprintf(shapes + strlen(shapes), 8192 - strlen(shapes), "%s%s (model %s], checkpoint %s])",
                     n_shapes++ ? ", " : "", name, a, b);
            continue;
        }
        map[i] = t;
    }
    for (size_t j = 0; j < f->n; j++) {
        int found = 0;
        for (int64_t i = 0; i < n && !found; i++) {
            char name[TR_ST_NAME_MAX];
            trs_model_state_entry(model, i, name, sizeof name, NULL, NULL, NULL);
            found = strcmp(name, f->tensors[j].name) == 0;
        }
        if (!found)
            snprintf(unexpected + strlen(unexpected), 8192 - strlen(unexpected), "%s%s", n_unexpected++ ? ", " : "",
                     f->tensors[j].name);
    }
    int rc = TR_OK;
    if (n_shapes || (strict && (n_missing || n_unexpected))) {
        rc = tr_error_set(err, TR_E_CONFIG,
                          "%s does not fit this model: missing keys (%d): %s; unexpected keys (%d): %s; "
                          "shape mismatches (%d): %s",
                          file, n_missing, n_missing ? missing : "none", n_unexpected,
                          n_unexpected ? unexpected : "none", n_shapes, n_shapes ? shapes : "none");
    } else if (n_missing || n_unexpected) {
        warnf(warn, ctx, "%s: loaded the matching keys; missing keys (%d): %s; unexpected keys (%d): %s", file,
              n_missing, n_missing ? missing : "none", n_unexpected, n_unexpected ? unexpected : "none");
    }
    free(missing), free(unexpected), free(shapes);
    if (rc) {
        free(map);
        return rc;
    }
    *map_out = map;
    *n_out = n;
    return TR_OK;
}

static int load_model_file(const char *file, trs_model *model, bool strict, tr_ckpt_warn_fn warn, void *ctx,
                           tr_error *err)
{
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    if (rc) return rc;
    const tr_st_tensor **map = NULL;
    int64_t n = 0;
    rc = match_keys(model, &f, file, strict, &map, &n, warn, ctx, err);
    for (int64_t i = 0; !rc && i < n; i++) {
        if (!map[i]) continue;
        trs_dtype dt;
        if (shim_dtype(map[i]->dtype, &dt) ||
            trs_model_state_write(model, i, tr_st_data(&f, map[i]), map[i]->nbytes, dt) != TRS_OK)
            rc = tr_error_set(err, TR_E_CONFIG, "%s: %s: %s", file, map[i]->name, trs_model_errmsg(model));
    }
    free(map);
    tr_st_close(&f);
    return rc;
}

int tr_checkpoint_load_weights(const char *path, trs_model *model, bool strict, tr_ckpt_warn_fn warn, void *ctx,
                               tr_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0) return tr_error_set(err, TR_E_CONFIG, "init.from: %s: %s", path, strerror(errno));
    char file[TR_PATH_MAX + 64];
    if (S_ISDIR(st.st_mode)) {
        int rc = tr_checkpoint_verify(path, err);
        if (rc) return rc;
        snprintf(file, sizeof file, "%s/model.safetensors", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
    }
    return load_model_file(file, model, strict, warn, ctx, err);
}

static int load_optimizer_file(const char *file, trs_optimizer *opt, tr_error *err)
{
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    for (size_t i = 0; !rc && i < f.n; i++) {
        const tr_st_tensor *t = &f.tensors[i];
        trs_dtype dt;
        if (shim_dtype(t->dtype, &dt) ||
            trs_optimizer_state_load(opt, t->name, tr_st_data(&f, t), t->nbytes, dt, t->shape, t->ndim) != TRS_OK)
            rc = tr_error_set(err, TR_E_CONFIG, "%s: %s (was the checkpoint saved with another optimizer?)", file,
                              trs_optimizer_errmsg(opt));
    }
    tr_st_close(&f);
    return rc;
}

/* The CPU generator, and on a CUDA device the generators of the devices both the checkpoint and this process have
 * (a difference in count was warned about by parse_trainer). */
static int load_rng_file(const char *file, trs_model *model, tr_error *err)
{
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    if (rc) return rc;
    const tr_st_tensor *t = tr_st_find(&f, "cpu_generator");
    if (!t || t->dtype != TR_ST_U8) rc = tr_error_set(err, TR_E_RUNTIME, "%s: no U8 tensor 'cpu_generator'", file);
    else if (trs_rng_set_state(tr_st_data(&f, t), t->nbytes) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s", file, trs_last_error());
    const int cuda = cuda_generators_of(model);
    for (int i = 0; !rc && i < cuda; i++) {
        char name[48];
        snprintf(name, sizeof name, "cuda_generator.%d", i);
        if (!(t = tr_st_find(&f, name))) continue; /* saved with fewer devices, or on the CPU */
        if (t->dtype != TR_ST_U8) rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s: not U8", file, name);
        else if (trs_cuda_rng_set_state(i, tr_st_data(&f, t), t->nbytes) != TRS_OK)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s: %s", file, name, trs_last_error());
    }
    tr_st_close(&f);
    return rc;
}

/* Warn when the checkpoint was saved on another device, or with generator states of another number of CUDA devices
 * than this process has: the run continues, but not bit for bit. */
static void check_device(const tr_ckpt_meta *m, trs_model *model, tr_ckpt_warn_fn warn, void *ctx)
{
    const char *saved = m->device[0] ? m->device : "cpu"; /* saved before devices existed: every run was on the CPU */
    char here[32];
    device_name_of(model, here, sizeof here);
    const int saved_n = m->cuda_generators, here_n = cuda_generators_of(model);
    if (strcmp(saved, here) != 0)
        warnf(warn, ctx, "the checkpoint was saved on %s (%d CUDA device(s)), this run is on %s (%d): it continues, "
                         "but not bit for bit -- kernels round differently on another kind of device, and random "
                         "draws (dropout) come from %s generator", saved, saved_n, here, here_n,
              strncmp(saved, "cuda", 4) == 0 && strncmp(here, "cuda", 4) == 0 ? "another device's" : "another");
    else if (saved_n != here_n)
        warnf(warn, ctx, "the checkpoint holds the generator states of %d CUDA device(s), this process sees %d: "
                         "the states of the devices both have are restored; random draws on the others differ",
              saved_n, here_n);
}

/* The EMA's entries against the tensors of ema.safetensors at `file`, by name. With `load`, each entry is written
 * from its tensor (TR_E_CONFIG naming the file and entry when the EMA refuses its dtype or size); without, each
 * tensor's dtype and shape must be the entry's (`code` naming them otherwise). A missing tensor is `code`'s error.
 * TR_OK, that, or tr_st_read's error. */
static int match_ema(const char *file, trs_ema *ema, int load, int code, tr_error *err)
{
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    if (rc) return rc;
    int64_t n = 0;
    trs_ema_state_count(ema, &n);
    for (int64_t i = 0; !rc && i < n; i++) {
        char name[256];
        int64_t shape[TRS_MAX_DIMS];
        int ndim = 0;
        trs_dtype want, dt;
        trs_ema_state_entry(ema, i, name, sizeof name, shape, &ndim, &want);
        const tr_st_tensor *t = tr_st_find(&f, name);
        int same = t && t->ndim == ndim && t->dtype == st_dtype(want);
        for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
        if (!t) rc = tr_error_set(err, code, "%s: no tensor '%s' (saved with another model?)", file, name);
        else if (load && (shim_dtype(t->dtype, &dt) ||
                          trs_ema_state_write(ema, i, tr_st_data(&f, t), t->nbytes, dt) != TRS_OK))
            rc = tr_error_set(err, TR_E_CONFIG, "%s: %s: %s", file, name, trs_ema_errmsg(ema));
        else if (!load && !same)
            rc = tr_error_set(err, code, "%s: '%s' differs from the EMA's in dtype or shape", file, name);
    }
    tr_st_close(&f);
    return rc;
}

/* EMA weights by name (every EMA entry must be in the file with its dtype and size) and the update count. */
static int load_ema(const char *dir, trs_ema *ema, int64_t updates, tr_ckpt_warn_fn warn, void *ctx, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/ema.safetensors", dir);
    struct stat st;
    if (stat(file, &st) != 0) {
        warnf(warn, ctx, "%s holds no EMA weights: the EMA starts afresh from the loaded weights", dir);
        return trs_ema_reset(ema) == TRS_OK ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "ema: %s", trs_ema_errmsg(ema));
    }
    int rc = match_ema(file, ema, 1, TR_E_CONFIG, err);
    if (rc) return rc;
    if (updates < 0 || trs_ema_set_updates(ema, updates) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s/trainer.json: field ema_updates: missing or malformed", dir);
    return rc;
}

/* The step a checkpoint directory is named after (.../step-NNNNNNNNNN), or -1. */
static int64_t dir_step(const char *dir)
{
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    long long st;
    char tail;
    if (sscanf(base, "step-%lld%c", &st, &tail) != 1 || st < 0) return -1;
    return st;
}

/* Warn (not fail) about what makes a resumed run no longer bit-identical. */
static void warn_differences(const char *file, const tr_config *cfg, const tr_ckpt_meta *m, tr_ckpt_warn_fn warn,
                             void *ctx)
{
    char fp[65] = "";
    tr_error ignore = {0};
    if (tr_config_fingerprint(cfg, fp, &ignore) == TR_OK && m->fingerprint[0] && strcmp(fp, m->fingerprint) != 0) {
        char keys[1024];
        config_changes(m->config_yaml, cfg, keys, sizeof keys);
        warnf(warn, ctx,
              "the config differs from the checkpoint's: %s. The run continues with the new values, but it will "
              "not be bit-identical to an uninterrupted one (the saved config is in %s, key config_yaml)", keys,
              file);
    }
    if (m->libtorch_version[0] && strcmp(m->libtorch_version, trs_torch_version()) != 0)
        warnf(warn, ctx, "checkpoint saved with libtorch %s, running %s: bit-identity no longer holds",
              m->libtorch_version, trs_torch_version());
    int intra = 0, inter = 0;
    trs_get_threads(&intra, &inter, NULL);
    if (m->intra_op >= 0 && (m->intra_op != intra || m->inter_op != inter))
        warnf(warn, ctx, "checkpoint saved with %d intra-op / %d inter-op threads, running %d / %d: bit-identity "
                         "no longer holds", m->intra_op, m->inter_op, intra, inter);
}

/* trainer.json of checkpoint `dir`, parsed and checked field by field. */
static int read_trainer(const char *dir, tr_ckpt_progress *p, tr_ckpt_meta *m, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/trainer.json", dir);
    char *text = read_text(file, err);
    if (!text) return TR_E_RUNTIME;
    const int rc = tr_ckpt_parse_trainer(text, file, dir_step(dir), p, m, err);
    free(text);
    return rc;
}

/* param_groups as saved against the optimizer's own: the same count, and each group's parameters by name. */
static int check_groups(const char *file, const tr_ckpt_meta *m, trs_optimizer *opt, int code, tr_error *err)
{
    int64_t n = 0;
    if (trs_optimizer_param_group(opt, -1, &n, NULL, NULL, 0) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "optimizer: %s", trs_optimizer_errmsg(opt));
    if (n != m->n_groups)
        return tr_error_set(err, code, "%s: field param_groups: %lld groups, the optimizer has %lld", file,
                            (long long)m->n_groups, (long long)n);
    char *names = malloc(4096);
    if (!names) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    int rc = TR_OK;
    for (int64_t g = 0; g < n && !rc; g++) {
        int64_t count = 0;
        double wd = 0;
        names[0] = '\0';
        trs_optimizer_param_group(opt, g, &count, &wd, names, 4096); /* the save's buffer size: same truncation */
        if (strcmp(names, m->group_params[g]) != 0)
            rc = tr_error_set(err, code, "%s: field param_groups[%lld].params: \"%.200s\", the optimizer's group "
                              "holds \"%.200s\"", file, (long long)g, m->group_params[g], names);
    }
    free(names);
    return rc;
}

/* rng.safetensors: one U8 generator state of this libtorch's size per saved rank, and nothing else. */
static int check_rng(const char *dir, int world_size, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/rng.safetensors", dir);
    size_t want = 0;
    if (trs_rng_state_size(&want) != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "rng: %s", trs_last_error());
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    if (rc) return rc;
    size_t cpu_states = 0; /* cuda_generator.* entries (CUDA runs) are checked by the shim as they are restored */
    for (size_t i = 0; i < f.n; i++) cpu_states += strncmp(f.tensors[i].name, "cpu_generator", 13) == 0;
    if (cpu_states != (size_t)world_size)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: %zu CPU generator states, trainer.json's world_size is %d", file,
                          cpu_states, world_size);
    for (int r = 0; r < world_size && !rc; r++) {
        char name[48];
        if (r == 0) snprintf(name, sizeof name, "cpu_generator");
        else snprintf(name, sizeof name, "cpu_generator.rank%d", r);
        const tr_st_tensor *t = tr_st_find(&f, name);
        if (!t || t->dtype != TR_ST_U8)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: no U8 tensor '%s'", file, name);
        else if ((size_t)t->nbytes != want)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s: %zu bytes, this libtorch's generator state has %zu", file,
                              name, (size_t)t->nbytes, want);
    }
    tr_st_close(&f);
    return rc;
}

/* optimizer.safetensors: entries named state.<i>.<field>; Adam's step counts (one int64 each) in [0, step]. The
 * shim checks each entry's field and shape against its parameter as it loads it. */
static int check_optimizer(const char *dir, int64_t step, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/optimizer.safetensors", dir);
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    for (size_t i = 0; !rc && i < f.n; i++) {
        const tr_st_tensor *t = &f.tensors[i];
        long long idx = -1;
        int end = 0;
        if (sscanf(t->name, "state.%lld.%n", &idx, &end) != 1 || end == 0 || idx < 0) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\": not an optimizer state name", file, t->name);
        } else if (strcmp(t->name + end, "step") == 0) {
            int64_t v = -1;
            if (t->dtype != TR_ST_I64 || t->nbytes != sizeof v) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\": not one int64", file, t->name);
            } else {
                memcpy(&v, tr_st_data(&f, t), sizeof v);
                if (v < 0 || v > step)
                    rc = tr_error_set(err, TR_E_RUNTIME, "%s: entry \"%s\": step count %lld is outside [0, %lld]",
                                      file, t->name, (long long)v, (long long)step);
            }
        }
    }
    tr_st_close(&f);
    return rc;
}

/* ema.safetensors (when the run has an EMA and the checkpoint one): every EMA entry by name, dtype and shape. */
static int check_ema(const char *dir, trs_ema *ema, const tr_ckpt_meta *m, int code, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/ema.safetensors", dir);
    struct stat st;
    if (stat(file, &st) != 0) return TR_OK; /* none saved: the load warns and starts the EMA afresh */
    if (m->ema_updates < 0)
        return tr_error_set(err, TR_E_RUNTIME, "%s/trainer.json: field ema_updates: missing, but %s exists", dir,
                            file);
    return match_ema(file, ema, 0, code, err);
}

/* The config that saved a checkpoint, for tr_ckpt_validate: its config_yaml over the defaults; when that is
 * missing or does not load (an older trainrun's keys), this run's config if the fingerprints are equal (the same
 * effective config); else NULL (not known). malloc'd: free it. */
static tr_config *saving_config(const tr_ckpt_meta *m, const tr_config *cfg, int same, const char *file)
{
    tr_config *saved = malloc(sizeof *saved);
    if (!saved) return NULL;
    tr_error ignore = {0};
    tr_config_defaults(saved);
    if (m->config_yaml && tr_config_load_string(saved, m->config_yaml, file, &ignore) == TR_OK) return saved;
    if (same && cfg) {
        *saved = *cfg;
        return saved;
    }
    free(saved);
    return NULL;
}

int tr_checkpoint_check(const char *dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt, trs_ema *ema,
                        const tr_ckpt_expect *x, tr_error *err)
{
    int rc = tr_checkpoint_verify(dir, err);
    if (rc) return rc;
    tr_ckpt_progress p;
    tr_ckpt_meta m;
    if ((rc = read_trainer(dir, &p, &m, err))) return rc;
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/trainer.json", dir);
    /* The same config cannot legitimately produce a checkpoint that does not fit it: then the checkpoint is
     * damaged (TR_E_RUNTIME, skipped). Another config's is the user's mismatch (TR_E_CONFIG, kept). */
    char fp[65] = "";
    tr_error ignore = {0};
    const int same = tr_config_fingerprint(cfg, fp, &ignore) == TR_OK && strcmp(fp, m.fingerprint) == 0;
    const int code = same ? TR_E_RUNTIME : TR_E_CONFIG;
    /* first the checkpoint against itself and the config that saved it: a contradiction is damage, skipped */
    tr_config *saved = saving_config(&m, cfg, same, file);
    rc = tr_ckpt_validate(&p, &m, saved, dir, file, err);
    free(saved);
    if (!rc && x && x->epoch_samples >= 0 && p.pos > x->epoch_samples) {
        /* the checkpoint's own epoch length was checked against its position (tr_ckpt_parse_trainer): past this
         * run's epoch, the data changed; without it recorded, the fingerprint decides */
        const int changed = p.epoch_samples >= 0 ? p.epoch_samples != x->epoch_samples : !same;
        rc = tr_error_set(err, changed ? TR_E_CONFIG : TR_E_RUNTIME,
                          "%s: field position: %lld is past the end of the epoch (%lld samples)%s", file,
                          (long long)p.pos, (long long)x->epoch_samples,
                          changed ? "; the data set differs from the checkpoint's" : "");
    }
    if (!rc && opt) rc = check_groups(file, &m, opt, code, err);
    if (!rc) rc = check_rng(dir, p.world_size, err);
    if (!rc) rc = check_optimizer(dir, p.step, err);
    if (!rc && ema) rc = check_ema(dir, ema, &m, code, err);
    if (!rc && model) { /* every key with its shape and dtype, nothing written */
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        tr_st_file f = {0};
        const tr_st_tensor **map = NULL;
        int64_t n = 0;
        if (!(rc = tr_st_read(file, &f, err))) {
            rc = match_keys(model, &f, file, true, &map, &n, NULL, NULL, err);
            if (rc && same) rc = err->code = TR_E_RUNTIME;
            for (int64_t i = 0; !rc && i < n; i++) {
                trs_dtype want = TRS_DTYPE_FLOAT32;
                trs_model_state_entry(model, i, NULL, 0, NULL, NULL, &want);
                if (map[i]->dtype != st_dtype(want))
                    rc = tr_error_set(err, code, "%s: %s: dtype %s, the model's is %s", file, map[i]->name,
                                      tr_st_dtype_name(map[i]->dtype), tr_st_dtype_name(st_dtype(want)));
            }
            free(map);
            tr_st_close(&f);
        }
    }
    tr_ckpt_meta_free(&m);
    return rc;
}

int tr_checkpoint_find_resumable(const char *run_dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt,
                                 trs_ema *ema, const tr_ckpt_expect *x, char *path_out, tr_ckpt_warn_fn warn,
                                 void *ctx, tr_error *err)
{
    path_out[0] = '\0';
    size_t n = 0;
    int64_t *steps = list_steps(run_dir, &n);
    char dir[TR_PATH_MAX + 64];
    int rc = TR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        snprintf(dir, sizeof dir, "%s/checkpoints/step-%010lld", run_dir, (long long)steps[i]);
        tr_error cerr = {0};
        const int crc = tr_checkpoint_check(dir, cfg, model, opt, ema, x, &cerr);
        if (crc == TR_OK) {
            if (snprintf(path_out, TR_PATH_MAX, "%s", dir) >= TR_PATH_MAX) {
                path_out[0] = '\0';
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: path too long", dir);
            }
            break;
        }
        if (crc == TR_E_CONFIG) {
            rc = tr_error_set(err, TR_E_CONFIG, "cannot resume %s with this config: %s. The checkpoints are kept: "
                              "resume with the config they were saved with (its copy is %s/config.yaml), or set "
                              "another run.name", dir, cerr.msg, run_dir);
            break;
        }
        warnf(warn, ctx, "skipping checkpoint %s: %s", dir, cerr.msg);
    }
    free(steps);
    return rc;
}

int tr_checkpoint_load(const char *dir, const tr_config *cfg, trs_model *model, trs_optimizer *opt, trs_ema *ema,
                       const tr_ckpt_expect *x, tr_ckpt_progress *p, tr_ckpt_warn_fn warn, void *ctx, tr_error *err)
{
    int rc = tr_checkpoint_check(dir, cfg, model, opt, ema, x, err);
    if (rc) return rc;
    tr_ckpt_meta m;
    if ((rc = read_trainer(dir, p, &m, err))) return rc;
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/trainer.json", dir);
    warn_differences(file, cfg, &m, warn, ctx);
    check_device(&m, model, warn, ctx);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    rc = load_model_file(file, model, true, warn, ctx, err);
    snprintf(file, sizeof file, "%s/optimizer.safetensors", dir);
    if (!rc) rc = load_optimizer_file(file, opt, err);
    if (!rc && ema) rc = load_ema(dir, ema, m.ema_updates, warn, ctx, err);
    snprintf(file, sizeof file, "%s/rng.safetensors", dir);
    if (!rc) rc = load_rng_file(file, model, err);
    tr_ckpt_meta_free(&m);
    return rc;
}
