/*
 * checkpoint_save.c -- a checkpoint's state copied out of libtorch (tr_checkpoint_snapshot) and written by the
 * protocol of checkpoint.h (tr_checkpoint_write): temporary directory, files, manifest, fsyncs, rename.
 */
#include "checkpoint_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "io.h"
#include "safetensors.h"
#include "sys.h"

/* ------------------------------------------------------------------------------------------------ small helpers */

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

/* ------------------------------------------------------------------------------------------------ save */

/* Every entry of the model, optimizer or EMA at once (trs_*_state_describe / _read_all: one pass over the state,
 * where one call per entry would rebuild the whole list each time). The shim's three state APIs have one shape;
 * a source is one of them behind it. */
typedef struct source {
    void *handle;
    trs_status (*describe)(void *h, trs_state_desc *out, int64_t cap, int64_t *count);
    trs_status (*read_all)(void *h, void *const *dst, const size_t *nbytes, int64_t count);
    const char *(*errmsg)(const void *h);
} source;

/* KIND_describe, KIND_read_all and KIND_errmsg over trs_KIND_state_describe, trs_KIND_state_read_all and
 * trs_KIND_errmsg, for KIND model, optimizer and ema. */
#define STATE_SOURCE(KIND)                                                                                            \
    static trs_status KIND##_describe(void *h, trs_state_desc *o, int64_t cap, int64_t *n)                            \
    {                                                                                                                 \
        return trs_##KIND##_state_describe(h, o, cap, n);                                                             \
    }                                                                                                                 \
    static trs_status KIND##_read_all(void *h, void *const *d, const size_t *nb, int64_t n)                           \
    {                                                                                                                 \
        return trs_##KIND##_state_read_all(h, d, nb, n);                                                              \
    }                                                                                                                 \
    static const char *KIND##_errmsg(const void *h) { return trs_##KIND##_errmsg(h); }
STATE_SOURCE(model)
STATE_SOURCE(optimizer)
STATE_SOURCE(ema)

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
        ts[i].dtype = tr_ckpt_st_dtype(ds[i].dtype);
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

void tr_checkpoint_release_spare(void) { tr_arena_release_spare(); }

void tr_checkpoint_snapshot_free(tr_ckpt_snapshot *s)
{
    if (!s) return;
    for (int i = 0; i < SNAP_FILES; i++) free(s->files[i].ts);
    tr_arena_put(s->arena, s->arena_map);
    free(s->trainer_json);
    free(s);
}

/* The generator states rng.safetensors holds: one tensor per entry, U8 [nbytes]. */
typedef struct rng_entry {
    char name[48];
    const unsigned char *bytes;
    size_t nbytes;
} rng_entry;

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
    const int cuda = tr_ckpt_cuda_generators(model);
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
    tr_ckpt_device_name(model, device, sizeof device);
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddNumberToObject(o, "cuda_generators", tr_ckpt_cuda_generators(model));
    cJSON_AddStringToObject(o, "reason", reason);
    char stamp[32];
    tr_utc_stamp(stamp);
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
        [SNAP_MODEL] = {model, model_describe, model_read_all, model_errmsg},
        [SNAP_OPTIM] = {opt, optimizer_describe, optimizer_read_all, optimizer_errmsg},
        [SNAP_EMA] = {ema, ema_describe, ema_read_all, ema_errmsg},
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
    /* 2. one anonymous mapping for all of it (the spare when there is one, tr_arena_get): outside libtorch's allocator
     *    (the watchdog's `allocated` never counts it) and outside malloc's heap */
    if (!rc) {
        s->arena_bytes = total;
        if (tr_arena_get(total, &s->arena, &s->arena_map) != 0)
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
    if (TR_CKPT_PATHF(root, "%s/checkpoints", run_dir))
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

    written w[TR_CKPT_N_FILES + 1]; /* model, optimizer, rng, trainer.json; the last: ema.safetensors */
    memset(w, 0, sizeof w);
    const int slot[SNAP_FILES] = {[SNAP_MODEL] = 0, [SNAP_OPTIM] = 1, [SNAP_RNG] = 2, [SNAP_EMA] = TR_CKPT_N_FILES};
    const int ema = s->files[SNAP_EMA].name != NULL;
    int rc = TR_OK;
    char path[TR_PATH_MAX + 128];
    for (int k = 0; k < SNAP_FILES && !rc; k++) {
        const snap_file *f = &s->files[k];
        if (!f->name) continue;
        if (TR_CKPT_PATHF(path, "%s/%s", tmp, f->name)) {
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
            char *text = tr_ckpt_read_text(src, err);
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
        for (size_t i = 0; i < TR_CKPT_N_FILES; i++) {
            cJSON *e = cJSON_AddObjectToObject(files, tr_ckpt_files[i]);
            add_i64(e, "size", (int64_t)w[i].size);
            cJSON_AddStringToObject(e, tr_hash_name(TR_HASH_XXH3_128), w[i].digest);
        }
        if (ema) {
            cJSON *e = cJSON_AddObjectToObject(files, "ema.safetensors");
            add_i64(e, "size", (int64_t)w[TR_CKPT_N_FILES].size);
            cJSON_AddStringToObject(e, tr_hash_name(TR_HASH_XXH3_128), w[TR_CKPT_N_FILES].digest);
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
        for (size_t i = 0; i <= TR_CKPT_N_FILES; i++) *bytes += (int64_t)w[i].size;
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
