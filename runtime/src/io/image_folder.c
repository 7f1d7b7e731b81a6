/*
 * image_folder.c -- ImageFolder trees listed in ImageFolder's order, and their samples decoded on demand (see
 * image_folder.h).
 */
#define _DEFAULT_SOURCE /* dirent.d_type, strdup */
#include "image_folder.h"

#include <ctype.h>
#include <limits.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

/* ------------------------------------------------------------------------------------------------ the listing */

/* A growing list of strings in one arena. */
typedef struct strlist {
    char *buf;
    size_t len, cap;
    int64_t *off;
    int64_t n, ncap;
} strlist;

static void strlist_free(strlist *l)
{
    free(l->buf);
    free(l->off);
    memset(l, 0, sizeof *l);
}

static int strlist_add(strlist *l, const char *s)
{
    const size_t n = strlen(s) + 1;
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 4096;
        while (cap < l->len + n) cap *= 2;
        char *b = realloc(l->buf, cap);
        if (!b) return -1;
        l->buf = b;
        l->cap = cap;
    }
    if (l->n == l->ncap) {
        const int64_t cap = l->ncap ? 2 * l->ncap : 256;
        int64_t *o = realloc(l->off, (size_t)cap * sizeof *o);
        if (!o) return -1;
        l->off = o;
        l->ncap = cap;
    }
    memcpy(l->buf + l->len, s, n);
    l->off[l->n++] = (int64_t)l->len;
    l->len += n;
    return 0;
}

static const char *strlist_at(const strlist *l, int64_t i) { return l->buf + l->off[i]; }

/* Sort a list's entries by strcmp (Python compares str by code point; UTF-8 bytes compare in the same order). */
static const char *g_sort_base; /* qsort has no context argument in C11; the listing runs on one thread */
static int cmp_off(const void *a, const void *b)
{
    return strcmp(g_sort_base + *(const int64_t *)a, g_sort_base + *(const int64_t *)b);
}
static void strlist_sort(strlist *l)
{
    if (l->n == 0) return; /* an empty list has no offsets array (qsort's base may not be NULL) */
    g_sort_base = l->buf;
    qsort(l->off, (size_t)l->n, sizeof *l->off, cmp_off);
}

/* torchvision.datasets.folder.IMG_EXTENSIONS, matched as filename.lower().endswith(...) */
static int has_image_extension(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    const size_t n = strlen(name);
    for (size_t e = 0; e < sizeof ext / sizeof *ext; e++) {
        const size_t m = strlen(ext[e]);
        if (n < m) continue;
        size_t k = 0;
        while (k < m && tolower((unsigned char)name[n - m + k]) == ext[e][k]) k++;
        if (k == m) return 1;
    }
    return 0;
}

/* What the walk collects: the files of one class folder, and what it skipped. */
typedef struct walk {
    const char *top; /* the set's root (names are relative to it) */
    strlist dirs;    /* directories found, relative to top        */
    int skip_bad;
    int64_t skipped;
    char *note; /* first skip, note_size bytes               */
    size_t note_size;
} walk;

static void note_skip(walk *wk, const char *path, const char *why)
{
    if (wk->skipped++ == 0) snprintf(wk->note, wk->note_size, "%s: %s", path, why);
}

/* The directory `rel` (under wk->top) and, recursively, every directory under it (symbolic links followed), into
 * wk->dirs. `anc` holds the (device, inode) of the directories from the class folder down to rel's parent. */
static int walk_dirs(walk *wk, const char *rel, dev_t *anc_dev, ino_t *anc_ino, int depth, tr_error *err)
{
    char path[2 * TR_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", wk->top, rel);
    struct stat st;
    if (stat(path, &st) != 0) return tr_error_set(err, TR_E_RUNTIME, "%s: %s", path, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (anc_dev[i] == st.st_dev && anc_ino[i] == st.st_ino) {
            if (wk->skip_bad) {
                note_skip(wk, path, "a symbolic link loop (it leads back to a folder above it): skipped");
                return TR_OK;
            }
            return tr_error_set(err, TR_E_RUNTIME,
                                "%s: a symbolic link loop: it leads back to a folder above it "
                                "(remove the link, or set data.skip_bad_files: true to skip it)",
                                path);
        }
    if (depth >= TR_IMAGE_MAX_DEPTH)
        return tr_error_set(err, TR_E_RUNTIME, "%s: folders nested more than %d deep under a class folder", path,
                            TR_IMAGE_MAX_DEPTH);
    anc_dev[depth] = st.st_dev;
    anc_ino[depth] = st.st_ino;
    if (strlist_add(&wk->dirs, rel)) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory listing", path);
    DIR *d = opendir(path);
    if (!d) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot list the folder: %s", path, strerror(errno));
    strlist subs = {0};
    int rc = TR_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (e->d_type != DT_DIR && e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) continue;
        char sub[2 * TR_PATH_MAX + 256];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat ss;
        if (stat(sub, &ss) != 0 || !S_ISDIR(ss.st_mode)) continue; /* files: listed by the caller */
        char subrel[TR_PATH_MAX];
        if (snprintf(subrel, sizeof subrel, "%s/%s", rel, e->d_name) >= (int)sizeof subrel)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: path longer than %d bytes", sub, TR_PATH_MAX - 1);
        else if (strlist_add(&subs, subrel)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory listing", path);
    }
    closedir(d);
    for (int64_t i = 0; !rc && i < subs.n; i++)
        rc = walk_dirs(wk, strlist_at(&subs, i), anc_dev, anc_ino, depth + 1, err);
    strlist_free(&subs);
    return rc;
}

/* The image files (by extension) directly in directory `rel`, sorted, appended to `files` with label `label`. */
static int list_files(walk *wk, const char *rel, int64_t label, strlist *files, int64_t **labels, int64_t *lcap,
                      tr_error *err)
{
    char path[2 * TR_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", wk->top, rel);
    DIR *d = opendir(path);
    if (!d) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot list the folder: %s", path, strerror(errno));
    strlist here = {0};
    int rc = TR_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!has_image_extension(e->d_name)) continue;
        char full[2 * TR_PATH_MAX + 256];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (e->d_type == DT_DIR) continue;
        if (e->d_type != DT_REG) { /* a link or unknown: what it leads to decides (os.walk lists links to folders
                                      as folders; a dangling link, a link loop, a device is a bad file) */
            struct stat ss;
            if (stat(full, &ss) == 0 && S_ISDIR(ss.st_mode)) continue;
        }
        char relname[TR_PATH_MAX];
        if (snprintf(relname, sizeof relname, rel[0] ? "%s/%s" : "%s%s", rel, e->d_name) >= (int)sizeof relname)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: path longer than %d bytes", full, TR_PATH_MAX - 1);
        else if (strlist_add(&here, relname)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory listing", path);
    }
    closedir(d);
    strlist_sort(&here);
    for (int64_t i = 0; !rc && i < here.n; i++) {
        if (files->n == *lcap) {
            const int64_t cap = *lcap ? 2 * *lcap : 1024;
            int64_t *l = realloc(*labels, (size_t)cap * sizeof *l);
            if (!l) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory listing", path);
                break;
            }
            *labels = l;
            *lcap = cap;
        }
        if (strlist_add(files, strlist_at(&here, i))) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
        else (*labels)[files->n - 1] = label;
    }
    strlist_free(&here);
    return rc;
}

/* One class folder `cls` (relative to the root, "" for the root itself: unlabeled images, not recursed) into
 * files / labels. */
static int list_class(walk *wk, const char *cls, int64_t label, strlist *files, int64_t **labels, int64_t *lcap,
                      tr_error *err)
{
    strlist_free(&wk->dirs);
    dev_t anc_dev[TR_IMAGE_MAX_DEPTH];
    ino_t anc_ino[TR_IMAGE_MAX_DEPTH];
    int rc = walk_dirs(wk, cls, anc_dev, anc_ino, 0, err);
    if (rc) return rc;
    strlist_sort(&wk->dirs); /* sorted(os.walk(...)): the directories in the order of their paths */
    const int64_t before = files->n;
    for (int64_t i = 0; !rc && i < wk->dirs.n; i++)
        rc = list_files(wk, strlist_at(&wk->dirs, i), label, files, labels, lcap, err);
    if (!rc && files->n == before) {
        char path[2 * TR_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", wk->top, cls);
        if (!wk->skip_bad)
            return tr_error_set(err, TR_E_RUNTIME,
                                "%s: an empty class folder: no image files (.png, .jpg, ...) in it "
                                "or under it (ImageFolder refuses one too; remove it, or set data.skip_bad_files: "
                                "true to keep the class with no samples)",
                                path);
        note_skip(wk, path, "an empty class folder (the class is kept, with no samples)");
    }
    return rc;
}

/* The sorted names of root's sub-folders (links to folders included). */
static int list_classes(const char *root, strlist *out, tr_error *err)
{
    DIR *d = opendir(root);
    if (!d) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot list the folder: %s", root, strerror(errno));
    int rc = TR_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char sub[2 * TR_PATH_MAX + 256];
        snprintf(sub, sizeof sub, "%s/%s", root, e->d_name);
        struct stat st;
        if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (out->n >= TR_IMAGE_MAX_CLASSES)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: more than %d class folders", root, TR_IMAGE_MAX_CLASSES);
        else if (strlist_add(out, e->d_name)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", root);
    }
    closedir(d);
    strlist_sort(out);
    return rc;
}

void tr_image_set_free(tr_image_set *s)
{
    if (!s) return;
    free(s->names);
    free(s->name_off);
    free(s->cache);
    free((void *)s->cache_state);
    free(s->disk);
    for (int64_t i = 0; i < s->n_classes; i++) free(s->classes[i]);
    free(s->classes);
    free(s);
}

void tr_image_buf_free(tr_image_buf *b)
{
    free(b->file);
    free(b->sample);
    free(b->rows);
    memset(b, 0, sizeof *b);
}

void tr_image_set_path(const tr_image_set *s, int64_t i, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", s->root, s->names + s->name_off[i]);
}

static char **copy_classes(char *const *names, int64_t n)
{
    char **c = calloc((size_t)(n > 0 ? n : 1), sizeof *c);
    for (int64_t i = 0; c && i < n; i++)
        if (!(c[i] = strdup(names[i]))) {
            for (int64_t j = 0; j < i; j++) free(c[j]);
            free(c);
            return NULL;
        }
    return c;
}

/* A data set of the listed files: takes files' arena and labels. */
static int make_set(const char *root, strlist *files, int64_t *labels, char *const *classes, int64_t n_classes,
                    const tr_image_opts *o, const walk *wk, tr_dataset *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    tr_image_set *s = calloc(1, sizeof *s);
    char **cl = s ? copy_classes(classes, n_classes) : NULL;
    if (!s || !cl) {
        free(s);
        free(labels);
        strlist_free(files);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", root);
    }
    snprintf(s->root, sizeof s->root, "%s", root);
    s->names = files->buf;
    s->name_off = files->off;
    s->n = files->n;
    s->classes = cl;
    s->n_classes = n_classes;
    s->labeled = 1;
    s->opts = *o;
    s->skipped = wk->skipped;
    snprintf(s->skip_note, sizeof s->skip_note, "%s", wk->note);
    memset(files, 0, sizeof *files);
    out->images = s;
    out->free_images = tr_image_set_free;
    out->y = labels ? labels : calloc(1, sizeof *out->y);
    out->n = s->n;
    out->c = o->channels;
    out->h = o->h;
    out->w = o->w;
    out->num_classes = n_classes;
    return out->y ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", root);
}

/* ------------------------------------------------------------------------------------------------- samples */

/* The whole file at `path` into buf->file; its size in *len. */
static int read_file(const char *path, tr_image_buf *buf, size_t *len, tr_error *err)
{
    /* O_NONBLOCK: a FIFO or a device named x.png must not block the open; regular files ignore it */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = TR_OK;
    if (fstat(fd, &st) != 0) rc = tr_error_set(err, TR_E_RUNTIME, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: not a regular file", path);
    else if (st.st_size > TR_IMAGE_MAX_FILE_BYTES)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: %lld bytes: larger than the %lld bytes an image file may have", path,
                          (long long)st.st_size, (long long)TR_IMAGE_MAX_FILE_BYTES);
    const size_t size = rc ? 0 : (size_t)st.st_size;
    if (!rc && size + 1 > buf->cap) {
        uint8_t *b = realloc(buf->file, size + 1);
        if (!b) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory reading %zu bytes", path, size);
        else buf->file = b, buf->cap = size + 1;
    }
    size_t got = 0;
    while (!rc && got < size) {
        const ssize_t r = read(fd, buf->file + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: read error at byte offset %zu: %s", path, got, strerror(errno));
        else if (r == 0) break; /* shrank while read: what is there is decoded (and found truncated) */
        else got += (size_t)r;
    }
    close(fd);
    *len = got;
    return rc;
}

/* Sample i's pixels as the data.* keys make them: read, decoded, resized / cropped to [h, w, c] uint8 in *im_out. */
static int decode_sample(const tr_image_set *s, int64_t i, tr_image *im_out, tr_image_buf *buf, tr_error *err)
{
    char path[2 * TR_PATH_MAX];
    tr_image_set_path(s, i, path, sizeof path);
    size_t len = 0;
    int rc = read_file(path, buf, &len, err);
    if (rc) return rc;
    const tr_image_opts *o = &s->opts;
    tr_image im = {0}, tmp = {0};
    if ((rc = tr_image_decode(buf->file, len, path, o->channels, o->max_pixels, &im, err))) return rc;
    if (o->resize_shorter > 0) { /* Resize(S) then CenterCrop((h, w)) */
        int64_t rh, rw;
        tr_image_shorter_side_size(im.h, im.w, o->resize_shorter, &rh, &rw);
        if (rh < 1 || rw < 1) rh = rh < 1 ? 1 : rh, rw = rw < 1 ? 1 : rw;
        rc = tr_image_resize(&im, rh, rw, &tmp, err);
        tr_image_free(&im);
        if (!rc) rc = tr_image_center_crop(&tmp, o->h, o->w, &im, err);
        tr_image_free(&tmp);
    } else if (im.h != o->h || im.w != o->w) {
        if (!o->resize) {
            rc = tr_error_set(err, TR_E_RUNTIME,
                              "%s: %lld x %lld pixels (H x W), but the data set's images are %lld x "
                              "%lld (the first training image's size): set data.image_size: [H, W] to resize them all",
                              path, (long long)im.h, (long long)im.w, (long long)o->h, (long long)o->w);
        } else {
            rc = tr_image_resize(&im, o->h, o->w, &tmp, err);
            tr_image_free(&im);
            im = tmp;
        }
    }
    if (rc) {
        tr_image_free(&im);
        return rc;
    }
    *im_out = im;
    return TR_OK;
}

/* [h, w, c] uint8 -> [c, h, w] float32: x / 255, then (x - mean) / std, the IDX reader's arithmetic */
static void normalize(const tr_image_opts *o, const uint8_t *px, float *dst)
{
    const int64_t hw = o->h * o->w, c = o->channels;
    for (int64_t ch = 0; ch < c; ch++) {
        const float m = o->mean[o->n_norm > 1 ? ch : 0], sd = o->std[o->n_norm > 1 ? ch : 0];
        float *out = dst + ch * hw;
        const uint8_t *in = px + ch;
        for (int64_t j = 0; j < hw; j++) {
            const float x = (float)in[j * c] / 255.0f;
            out[j] = (x - m) / sd;
        }
    }
}

int tr_image_set_sample(const tr_image_set *s, int64_t i, float *dst, tr_image_buf *buf, tr_error *err)
{
    const tr_image_opts *o = &s->opts;
    const size_t d = (size_t)(o->h * o->w * o->channels);
    if (s->cache && atomic_load_explicit(&s->cache_state[i], memory_order_acquire) == 2) {
        normalize(o, s->cache + (size_t)i * d, dst);
        return TR_OK;
    }
    tr_image im = {0};
    const int rc = decode_sample(s, i, &im, buf, err);
    if (rc) return rc;
    unsigned char empty = 0; /* the first thread to decode sample i keeps it; another one just uses its own */
    if (s->cache && atomic_compare_exchange_strong_explicit(&s->cache_state[i], &empty, 1, memory_order_acquire,
                                                            memory_order_relaxed)) {
        memcpy(s->cache + (size_t)i * d, im.px, d);
        atomic_store_explicit(&s->cache_state[i], 2, memory_order_release);
        /* data.cache: disk: the last sample kept (acq_rel: the other slots' bytes are visible here) writes the file */
        if (s->disk) tr_image_disk_kept(s);
    }
    normalize(o, im.px, dst);
    tr_image_free(&im);
    return TR_OK;
}

int tr_image_gather(const tr_dataset *ds, const int64_t *idx, int64_t count, const tr_augment *a, uint64_t seed,
                    uint64_t epoch, float *xbuf, int64_t *ybuf, tr_image_buf *buf, tr_error *err)
{
    const size_t d = (size_t)(ds->c * ds->h * ds->w);
    const int aug = tr_augment_enabled(a);
    if (aug && buf->sample_cap < d) {
        float *p = realloc(buf->sample, d * sizeof *p);
        if (!p) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
        buf->sample = p;
        buf->sample_cap = d;
    }
    for (int64_t k = 0; k < count; k++) {
        const int64_t i = idx[k];
        float *dst = xbuf + (size_t)k * d;
        int rc = tr_image_set_sample(ds->images, i, aug ? buf->sample : dst, buf, err);
        if (rc) return rc;
        if (aug) tr_augment_sample(a, seed, epoch, i, buf->sample, ds->c, ds->h, ds->w, dst);
        ybuf[k] = ds->y[i];
    }
    return TR_OK;
}

const float *tr_dataset_rows(const tr_dataset *ds, int64_t i, int64_t n, tr_image_buf *buf, tr_error *err)
{
    const size_t d = (size_t)(ds->c * ds->h * ds->w);
    if (!ds->images) return ds->x + (size_t)i * d;
    if (buf->rows_cap < (size_t)n * d) {
        float *p = realloc(buf->rows, (size_t)n * d * sizeof *p);
        if (!p) return tr_error_set(err, TR_E_RUNTIME, "out of memory decoding %lld images", (long long)n), NULL;
        buf->rows = p;
        buf->rows_cap = (size_t)n * d;
    }
    for (int64_t k = 0; k < n; k++)
        if (tr_image_set_sample(ds->images, i + k, buf->rows + (size_t)k * d, buf, err)) return NULL;
    return buf->rows;
}

/* ---------------------------------------------------------------------------------------------- the splits */

/* Every file of `ds` decoded once; the bad ones dropped (data.skip_bad_files), counted and the first noted. */
static int drop_bad(tr_dataset *ds, tr_error *err)
{
    tr_image_set *s = ds->images;
    const size_t d = (size_t)(ds->c * ds->h * ds->w);
    float *sample = malloc(d * sizeof *sample);
    if (!sample) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", s->root);
    tr_image_buf buf = {0};
    int64_t w = 0;
    for (int64_t i = 0; i < s->n; i++) {
        tr_error e = {0};
        if (tr_image_set_sample(s, i, sample, &buf, &e) != TR_OK) {
            if (s->skipped++ == 0) memcpy(s->skip_note, e.msg, sizeof s->skip_note - 1); /* cut to fit */
            continue;
        }
        s->name_off[w] = s->name_off[i];
        ds->y[w] = ds->y[i];
        w++;
    }
    free(sample);
    tr_image_buf_free(&buf);
    s->n = ds->n = w;
    if (w == 0) return tr_error_set(err, TR_E_RUNTIME, "%s: no image decodes (%s)", s->root, s->skip_note);
    return TR_OK;
}

/* A data set's first `keep` samples (data.train_subset / test_subset); 0 keeps all. */
static void keep_first(tr_dataset *ds, int64_t keep)
{
    if (keep > 0 && keep < ds->n) ds->n = ds->images->n = keep;
}

/* The folder given by `key` (data.train_root, ...), resolved, as a data set; classes NULL: the folder's own. */
static int load_root(const tr_config *cfg, const char *key, const char *given, char *const *classes, int64_t n_classes,
                     const tr_image_opts *o, tr_dataset *out, tr_error *err)
{
    char root[TR_PATH_MAX];
    tr_config_resolve_data_path(cfg, given, root, sizeof root);
    struct stat st;
    if (stat(root, &st) != 0) return tr_error_set(err, TR_E_CONFIG, "%s: %s: %s", key, root, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return tr_error_set(err, TR_E_CONFIG, "%s: %s is not a folder", key, root);
    strlist names = {0}, files = {0};
    int64_t *labels = NULL, lcap = 0;
    char note[1024] = "";
    walk wk = {.top = root, .skip_bad = cfg->data.skip_bad_files, .note = note, .note_size = sizeof note};
    int rc = list_classes(root, &names, err);
    if (!rc && names.n == 0)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: no class folders in it (the ImageFolder layout is %s/CLASS/FILE.png)",
                          root, root);
    char **own = NULL;
    if (!rc && !classes) { /* the training folder: its classes are its sub-folders */
        own = calloc((size_t)names.n, sizeof *own);
        if (!own) rc = tr_error_set(err, TR_E_RUNTIME, "out of memory");
        for (int64_t i = 0; !rc && i < names.n; i++) own[i] = (char *)strlist_at(&names, i);
        classes = own;
        n_classes = names.n;
    }
    for (int64_t i = 0; !rc && i < names.n; i++) {
        const char *cls = strlist_at(&names, i);
        int64_t label = -1;
        for (int64_t k = 0; k < n_classes && label < 0; k++)
            if (strcmp(classes[k], cls) == 0) label = k;
        if (label < 0) {
            char cl[256];
            tr_escape_bytes(cls, strlen(cls), cl, sizeof cl);
            rc = tr_error_set(err, TR_E_RUNTIME,
                              "%s/%s: a class folder the training data (data.train_root) does not "
                              "have: its %lld classes are its sub-folders",
                              root, cl, (long long)n_classes);
            break;
        }
        rc = list_class(&wk, cls, label, &files, &labels, &lcap, err);
    }
    strlist_free(&wk.dirs);
    if (!rc && files.n == 0) rc = tr_error_set(err, TR_E_RUNTIME, "%s: no image files in its class folders", root);
    if (!rc) rc = make_set(root, &files, labels, classes, n_classes, o, &wk, out, err);
    else free(labels);
    free(own);
    strlist_free(&names);
    strlist_free(&files);
    return rc;
}

/* The carve of tr_dataset_split (data.c) on file lists: the first val_size positions of the permutation
 * tr_permutation(seed, UINT64_MAX) go to val in that order, the rest stay in train in their order. */
static int split(tr_dataset *train, int64_t val_size, uint64_t seed, tr_dataset *val, tr_error *err)
{
    const int64_t n = train->n;
    if (val_size < 0 || val_size >= n)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.val_size: validation split: val_size %lld must be >= 0 and smaller "
                            "than the %lld training samples",
                            (long long)val_size, (long long)n);
    tr_image_set *s = train->images;
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    char *is_val = calloc((size_t)n, 1);
    strlist vf = {0};
    int64_t *vy = malloc((size_t)val_size * sizeof *vy);
    int rc = TR_OK;
    if (!perm || !is_val || !vy) rc = tr_error_set(err, TR_E_RUNTIME, "validation split: out of memory");
    if (!rc) tr_permutation(seed, UINT64_MAX, n, perm);
    for (int64_t k = 0; !rc && k < val_size; k++) {
        is_val[perm[k]] = 1;
        vy[k] = train->y[perm[k]];
        if (strlist_add(&vf, s->names + s->name_off[perm[k]]))
            rc = tr_error_set(err, TR_E_RUNTIME, "validation split: out of memory");
    }
    if (!rc) {
        int64_t w = 0;
        for (int64_t i = 0; i < n; i++) {
            if (is_val[i]) continue;
            s->name_off[w] = s->name_off[i];
            train->y[w] = train->y[i];
            w++;
        }
        train->n = s->n = w;
        walk none = {.note = ""};
        rc = make_set(s->root, &vf, vy, s->classes, s->n_classes, &s->opts, &none, val, err);
        vy = NULL;
    }
    free(vy);
    strlist_free(&vf);
    free(perm);
    free(is_val);
    return rc;
}

/* The sample size: data.image_size, else the first training file's header. */
static int sample_size(const tr_config *cfg, const tr_dataset *train, tr_image_opts *o, tr_error *err)
{
    if (cfg->data.n_image_size == 2) {
        o->h = (int64_t)cfg->data.image_size[0];
        o->w = (int64_t)cfg->data.image_size[1];
        o->resize = 1;
        return TR_OK;
    }
    char path[2 * TR_PATH_MAX];
    tr_image_set_path(train->images, 0, path, sizeof path);
    tr_image_buf buf = {0};
    size_t len = 0;
    tr_image_info info;
    int rc = read_file(path, &buf, &len, err);
    if (!rc) rc = tr_image_probe(buf.file, len, path, o->max_pixels, &info, err);
    tr_image_buf_free(&buf);
    if (rc) return rc;
    o->h = info.h;
    o->w = info.w;
    return TR_OK;
}

static void set_size(tr_dataset *ds, const tr_image_opts *o)
{
    if (!ds->images) return;
    ds->images->opts = *o;
    ds->c = o->channels;
    ds->h = o->h;
    ds->w = o->w;
}

/* How samples are made, from the data.* keys (the size is found later: sample_size). */
static int make_opts(const tr_config *cfg, tr_image_opts *o, tr_error *err)
{
    static const int k_channels[] = {1, 3, 4};
    *o = (tr_image_opts){.channels = k_channels[cfg->data.image_mode],
                         .resize_shorter = cfg->data.resize_shorter,
                         .max_pixels = cfg->data.max_image_pixels,
                         .n_norm = cfg->data.n_mean};
    if (cfg->data.n_mean != 1 && cfg->data.n_mean != o->channels)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.mean: %d values for %d-channel images (data.image_mode): give 1 or %d",
                            cfg->data.n_mean, o->channels, o->channels);
    for (int k = 0; k < cfg->data.n_mean; k++) {
        o->mean[k] = (float)cfg->data.mean[k];
        o->std[k] = (float)cfg->data.std[k];
    }
    return TR_OK;
}

int tr_image_folder_unlabeled(const tr_config *cfg, const char *dir, char *const *classes, int64_t n_classes,
                              tr_dataset *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    tr_image_opts o;
    int rc = make_opts(cfg, &o, err);
    if (rc) return rc;
    struct stat st;
    if (stat(dir, &st) != 0) return tr_error_set(err, TR_E_CONFIG, "--images: %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return tr_error_set(err, TR_E_CONFIG, "--images: %s is not a folder", dir);
    char note[8] = "";
    walk wk = {.top = dir, .note = note, .note_size = sizeof note};
    strlist files = {0};
    int64_t *labels = NULL, lcap = 0;
    rc = list_files(&wk, "", -1, &files, &labels, &lcap, err);
    if (!rc && files.n == 0)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: no image files (.png, .jpg, ...) directly in it", dir);
    if (!rc) rc = make_set(dir, &files, labels, classes, n_classes, &o, &wk, out, err);
    else free(labels);
    strlist_free(&files);
    if (!rc) {
        out->images->labeled = 0;
        rc = sample_size(cfg, out, &o, err); /* data.image_size, else this folder's first image's */
        if (!rc) set_size(out, &o);
    }
    return rc;
}

/* data.cache: a cache of decoded samples for each of the n sets, or none (see tr_image_folder_setup). */
static int make_caches(const tr_config *cfg, tr_dataset *const *sets, int n, tr_error *err)
{
    if (cfg->data.cache == TR_IMAGE_CACHE_NONE) return TR_OK;
    double total = 0; /* bytes; a double cannot overflow on a huge folder */
    for (int k = 0; k < n; k++)
        if (sets[k]->images) total += (double)sets[k]->n * (double)(sets[k]->c * sets[k]->h * sets[k]->w);
    const int64_t avail = tr_memory_available();
    if (cfg->data.cache == TR_IMAGE_CACHE_AUTO && (avail <= 0 || total > (double)avail / 4)) return TR_OK;
    if (avail > 0 && total > (double)avail)
        return tr_error_set(err, TR_E_CONFIG,
                            "data.cache: %s: the decoded images take %.0f bytes, more than the %lld bytes of "
                            "memory available (set data.cache: none to decode them every epoch)",
                            cfg->data.cache == TR_IMAGE_CACHE_DISK ? "disk" : "memory", total, (long long)avail);
    for (int k = 0; k < n; k++) {
        tr_image_set *s = sets[k]->images;
        if (!s || s->n == 0) continue;
        const size_t bytes = (size_t)s->n * (size_t)(sets[k]->c * sets[k]->h * sets[k]->w);
        s->cache = malloc(bytes);
        s->cache_state = calloc((size_t)s->n, sizeof *s->cache_state);
        if (!s->cache || !s->cache_state) {
            free(s->cache);
            free((void *)s->cache_state);
            s->cache = NULL;
            s->cache_state = NULL;
            if (cfg->data.cache == TR_IMAGE_CACHE_AUTO) continue; /* auto: decoded every time instead */
            return tr_error_set(err, TR_E_RUNTIME, "data.cache: %s: cannot allocate %zu bytes for the decoded images",
                                s->root, bytes);
        }
        s->cache_bytes = (int64_t)bytes;
        if (cfg->data.cache == TR_IMAGE_CACHE_DISK) tr_image_disk_setup(cfg, sets[k]);
    }
    return TR_OK;
}

int tr_image_folder_setup(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err)
{
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    memset(test, 0, sizeof *test);
    if (!cfg->data.train_root[0])
        return tr_error_set(err, TR_E_CONFIG,
                            "data.train_root: the image_folder format needs the training folder "
                            "(ROOT/CLASS/FILE.png)");
    tr_image_opts o;
    int rc = make_opts(cfg, &o, err);
    if (rc) return rc;
    rc = load_root(cfg, "data.train_root", cfg->data.train_root, NULL, 0, &o, train, err);
    if (rc) return rc;
    keep_first(train, cfg->data.train_subset);
    if ((rc = sample_size(cfg, train, &o, err))) return rc;
    set_size(train, &o);
    if (cfg->data.skip_bad_files && (rc = drop_bad(train, err))) return rc;
    const tr_image_set *ts = train->images;
    if (cfg->data.val_root[0]) {
        rc = load_root(cfg, "data.val_root", cfg->data.val_root, ts->classes, ts->n_classes, &o, val, err);
        if (!rc && cfg->data.skip_bad_files) rc = drop_bad(val, err);
    } else if (cfg->data.val_size > 0) {
        rc = split(train, cfg->data.val_size, cfg->seed, val, err);
    }
    if (rc) return rc;
    set_size(val, &o);
    if (cfg->data.test_root[0] && (cfg->eval.test_at_end || cfg->eval.split == TR_EVAL_TEST)) {
        rc = load_root(cfg, "data.test_root", cfg->data.test_root, ts->classes, ts->n_classes, &o, test, err);
        if (!rc) keep_first(test, cfg->data.test_subset);
        if (!rc && cfg->data.skip_bad_files) rc = drop_bad(test, err);
    }
    if (!rc) set_size(test, &o);
    tr_dataset *const sets[] = {train, val, test};
    if (!rc) rc = make_caches(cfg, sets, 3, err);
    return rc;
}

char *tr_image_classes_json(const tr_image_set *s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fputs("{\"classes\": [", f);
    for (int64_t i = 0; i < s->n_classes; i++) {
        if (i) fputs(", ", f);
        tr_json_string(f, s->classes[i]);
    }
    fputs("]}\n", f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
