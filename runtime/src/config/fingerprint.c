/*
 * fingerprint.c -- what makes two runs compute the same thing, as one SHA-256 (fingerprint.h).
 */
#define _GNU_SOURCE /* realpath */
#include "fingerprint.h"

#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int tr_config_not_fingerprinted(const char *key)
{
    static const char *const prefixes[] = {"run.", "log.", "checkpoint.", "watchdog.", "eval.", "init.", "debug.",
                                           "memory.", "early_stopping."};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return strcmp(key, "device") == 0 || strcmp(key, "model.spec") == 0 || strcmp(key, "model.torchscript") == 0 ||
           strcmp(key, "data.root") == 0;
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
