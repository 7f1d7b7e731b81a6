/*
 * run_dir.c -- the run directory and the files that describe the run in it: the directory itself (a new one, or
 * an earlier run of the same name and what to resume from), config.yaml with a copy of the model, vocab.json for
 * token data, and the trace file (log.trace) with its header and config.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io.h"
#include "plot.h"
#include "run_internal.h"
#include "run_lock.h"
#include "text.h"
#include "trace.h"

/* Whether `path` holds nothing but its lock file (which a refused or finished process leaves behind). */
static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return 1;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, TR_RUN_LOCK_FILE);
    closedir(d);
    return empty;
}

/*
 * The run directory, claimed: run.name set: run.dir/run.name (created when missing), which may hold an earlier run
 * of the same name; run.name empty: a new run.dir/<config stem>-<UTC time>[-k]. Then its lock (run_lock.h), before
 * anything in it is read or written: a second process refuses here (TR_E_LOCKED) having written nothing.
 */
int run_dir_claim(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char dir[TR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->run.dir);
    int created = 0, rc;
    if (cfg->run.name[0]) {
        if (snprintf(t->dir.path, sizeof t->dir.path, "%s/%s", dir, cfg->run.name) >= (int)sizeof t->dir.path)
            return tr_error_set(err, TR_E_CONFIG, "run.dir/run.name: path longer than %d bytes", TR_PATH_MAX - 1);
        if ((rc = tr_io_make_dirs(t->dir.path, &created, err))) return rc;
    } else {
        const char *base = strrchr(cfg->source, '/');
        base = base ? base + 1 : (cfg->source[0] ? cfg->source : "run");
        const char *dot = strrchr(base, '.');
        const int stem = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
        char stamp[32];
        const time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        /* Create the last component exclusively, so two runs started in the same second never share it. */
        for (int k = 1; !created && k < 1000; k++) {
            char suffix[16] = "";
            if (k > 1) snprintf(suffix, sizeof suffix, "-%d", k);
            if (snprintf(t->dir.path, sizeof t->dir.path, "%s/%.*s-%s%s", dir, stem > 200 ? 200 : stem, base, stamp,
                         suffix) >= (int)sizeof t->dir.path)
                return tr_error_set(err, TR_E_CONFIG, "run.dir: path longer than %d bytes", TR_PATH_MAX - 1);
            int parent_created;
            if ((rc = tr_io_make_dirs(dir, &parent_created, err))) return rc;
            if (mkdir(t->dir.path, 0777) == 0) created = 1;
            else if (errno != EEXIST)
                return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create directory: %s", t->dir.path, strerror(errno));
        }
    }
    t->dir.created = created;
    return tr_run_lock_acquire(&t->dir.lock, t->dir.path, run_warn_to_log, &t->sinks.log, err);
}

/*
 * What to resume from, in the claimed run directory (run_dir_claim). resume auto continues from its newest valid
 * checkpoint; without one, a fresh start that keeps the earlier metrics under another name. run.resume PATH: that
 * checkpoint, whatever the directory.
 */
int run_dir_setup(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    const int created = t->dir.created;
    int rc;
    t->dir.used = 1;
    if (cfg->run.name[0] && !created && !dir_is_empty(t->dir.path) && strcmp(cfg->run.resume, "never") == 0)
        return tr_error_set(err, TR_E_CONFIG,
                            "run.resume: never, but %s already holds a run; choose another run.name or remove it",
                            t->dir.path);
    if (!created) { /* stale temporaries of killed saves and writes first: a full disk is not made fuller */
        char ckpts[TR_PATH_MAX + 16];
        tr_io_remove_stale(t->dir.path);
        if (snprintf(ckpts, sizeof ckpts, "%s/checkpoints", t->dir.path) < (int)sizeof ckpts) tr_io_remove_stale(ckpts);
    }

    /* What to resume from. */
    t->dir.resume_from[0] = '\0';
    if (strcmp(cfg->run.resume, "never") != 0 && strcmp(cfg->run.resume, "auto") != 0) {
        char path[TR_PATH_MAX];
        tr_config_resolve_path(cfg, cfg->run.resume, path);
        const tr_ckpt_expect x = run_ckpt_expect(t);
        if ((rc = tr_checkpoint_check(path, cfg, t->core.model, t->core.opt, t->core.ema, &x, err))) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return tr_error_set(err, TR_E_CONFIG, "run.resume: %s", msg);
        }
        snprintf(t->dir.resume_from, sizeof t->dir.resume_from, "%s", path);
    } else if (strcmp(cfg->run.resume, "auto") == 0 && !created) {
        /* Every checkpoint is checked before it is chosen; a damaged one is reported and skipped (and kept, as
         * is every one, until a resume from an older one has succeeded). One saved with another config that
         * does not fit this one stops the run here: nothing is renamed and nothing starts afresh over it. */
        const tr_ckpt_expect x = run_ckpt_expect(t);
        if ((rc = tr_checkpoint_find_resumable(t->dir.path, cfg, t->core.model, t->core.opt, t->core.ema, &x,
                                               t->dir.resume_from, run_warn_to_log, &t->sinks.log, err)))
            return rc;
    }
    if (!t->dir.resume_from[0] && !created) {
        /* A fresh start in a used directory: checkpoints none of which verified are set aside (they would
         * otherwise outrank this run's in pruning), and what the earlier run logged is kept. */
        if ((rc = tr_checkpoint_set_aside_newer(t->dir.path, -1, run_warn_to_log, &t->sinks.log, err))) return rc;
        char old[TR_PATH_MAX + 32], kept[TR_PATH_MAX + 64];
        snprintf(old, sizeof old, "%s/metrics.jsonl", t->dir.path);
        struct stat st;
        for (int k = 1; stat(old, &st) == 0 && k < 10000; k++) {
            snprintf(kept, sizeof kept, "%s/metrics.earlier-%d.jsonl", t->dir.path, k);
            if (stat(kept, &st) != 0 && rename(old, kept) == 0) {
                tr_log_message(&t->sinks.log, "%s holds a run without a complete checkpoint: starting afresh; its metrics "
                                        "are kept in %s", t->dir.path, kept);
                break;
            }
        }
    }
    return TR_OK;
}

void run_dir_release(tr_run_state *t)
{
    if (t->dir.lock.fd > 0 && t->dir.created && !t->dir.used) {
        /* Unlinked while still held: a process that opened the file meanwhile holds an orphan and fails on the
         * directory's absence, never writes beside this one. */
        char path[TR_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", t->dir.path, TR_RUN_LOCK_FILE);
        unlink(path);
        rmdir(t->dir.path); /* fails, harmlessly, if anything else appeared in it */
    }
    tr_run_lock_release(&t->dir.lock);
}

static int write_config_fn(const void *arg, FILE *f) { return tr_config_write_yaml(arg, f); }

static int copy_file_fn(const void *arg, FILE *out)
{
    FILE *in = fopen(arg, "rb");
    if (!in) return TR_E_RUNTIME;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) break;
    const int rc = ferror(in) || ferror(out) ? TR_E_RUNTIME : TR_OK;
    fclose(in);
    return rc;
}

/*
 * The run directory gets a self-contained copy of what defines the run: model.yaml (the model spec) or model.pt
 * (the TorchScript archive, byte for byte; model.pt.gz for a gzip'd one) and config.yaml (the effective config with model.spec /
 * model.torchscript pointing at that copy, and absolute data, init and run paths), so `trainrun RUN_DIR/config.yaml`
 * repeats or continues it from anywhere. A resumed run rewrites them once the checkpoint is loaded (`resumed`),
 * unless it finds the run complete: a run continued with other values (train.max_steps raised to extend it) leaves
 * its config.yaml saying what it now is.
 */
int run_dir_write_files(tr_run_state *t, int resumed, tr_error *err)
{
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.yaml", t->dir.path);
    struct stat st;
    if (t->dir.resume_from[0] && !resumed && stat(path, &st) == 0) return TR_OK; /* after the resume (below) */
    return tr_run_dir_write_config(t->cfg, t->dir.path, resumed, &t->sinks.log, err);
}

int tr_run_dir_write_config(const tr_config *cfg, const char *dir, int resumed, tr_log *log, tr_error *err)
{
    char path[TR_PATH_MAX + 32], spec[TR_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    tr_config *eff = malloc(sizeof *eff);
    if (!eff) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    *eff = *cfg;
    const int torchscript = cfg->model.torchscript[0] != '\0';
    tr_config_resolve_path(cfg, torchscript ? cfg->model.torchscript : cfg->model.spec, spec);
    char abs[PATH_MAX];
    if (realpath(dir, abs)) {
        char *slash = strrchr(abs, '/');
        if (slash && slash != abs) {
            snprintf(eff->run.name, sizeof eff->run.name, "%s", slash + 1);
            *slash = '\0';
            if (snprintf(eff->run.dir, sizeof eff->run.dir, "%s", abs) >= (int)sizeof eff->run.dir)
                snprintf(eff->run.dir, sizeof eff->run.dir, "%s", cfg->run.dir);
        }
    }
    char tmp[TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->data.root, tmp);
    if (realpath(tmp, abs) && strlen(abs) < sizeof eff->data.root) memcpy(eff->data.root, abs, strlen(abs) + 1);
    char *roots[] = {eff->data.train_root, eff->data.val_root, eff->data.test_root}; /* image folders */
    for (int i = 0; i < 3; i++) /* ./ and ../ were the config file's: kept as absolute paths */
        if (strncmp(roots[i], "./", 2) == 0 || strncmp(roots[i], "../", 3) == 0) {
            tr_config_resolve_data_path(cfg, roots[i], tmp, sizeof tmp);
            if (realpath(tmp, abs) && strlen(abs) < TR_PATH_MAX) memcpy(roots[i], abs, strlen(abs) + 1);
        }
    if (cfg->init.from[0]) {
        tr_config_resolve_path(cfg, cfg->init.from, tmp);
        if (realpath(tmp, abs) && strlen(abs) < sizeof eff->init.from) memcpy(eff->init.from, abs, strlen(abs) + 1);
    }
    const size_t spec_len = strlen(spec);
    const int gzipped = spec_len > 3 && strcmp(spec + spec_len - 3, ".gz") == 0; /* keep the name's meaning */
    const char *copy = torchscript ? (gzipped ? "model.pt.gz" : "model.pt") : "model.yaml";
    snprintf(torchscript ? eff->model.torchscript : eff->model.spec, TR_PATH_MAX, "%s", copy);
    char model_path[TR_PATH_MAX + 32];
    snprintf(model_path, sizeof model_path, "%s/%s", dir, copy);
    tr_config *before = NULL;
    if (resumed && (before = malloc(sizeof *before))) {
        tr_error ignore = {0};
        tr_config_defaults(before);
        if (tr_config_load_file(before, path, &ignore) != TR_OK) {
            free(before);
            before = NULL;
        }
    }
    int rc = tr_io_write_atomic_with(model_path, copy_file_fn, spec, err);
    if (!rc) rc = tr_io_write_atomic_with(path, write_config_fn, eff, err);
    if (!rc && before) {
        char changes[1024];
        tr_config_defaults(eff);
        tr_error ignore = {0};
        if (tr_config_load_file(eff, path, &ignore) == TR_OK &&
            tr_config_diff(before, eff, NULL, changes, sizeof changes) > 0 && log)
            tr_log_message(log, "%s updated: %s", path, changes);
    }
    free(before);
    free(eff);
    return rc;
}

/* Token data: the vocabulary of this run's data must be the one the weights were trained with -- the checkpoint
 * resumed from (its vocab.json), init.from's, or this run directory's from an earlier process -- or the ids mean
 * other characters (a checkpoint of another corpus). Then the run directory gets it as vocab.json, and every
 * checkpoint a copy (tr_checkpoint_save), so `trainrun sample` needs nothing else. */
int tr_run_dir_vocab(const tr_config *cfg, const char *dir, const char *resumed_from, const tr_vocab *mine,
                     tr_error *err)
{
    static const char *const kinds[] = {"bytes", "characters", "token ids"};
    char files[3][TR_PATH_MAX + 32];
    int n = 0;
    if (resumed_from[0]) snprintf(files[n++], sizeof files[0], "%s/vocab.json", resumed_from);
    if (resumed_from[0]) snprintf(files[n++], sizeof files[0], "%s/vocab.json", dir);
    if (!resumed_from[0] && cfg->init.from[0]) {
        char from[TR_PATH_MAX];
        tr_config_resolve_path(cfg, cfg->init.from, from);
        struct stat st;
        if (stat(from, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(files[n++], sizeof files[0], "%s/vocab.json", from);
    }
    for (int i = 0; i < n; i++) {
        tr_vocab v;
        int found = 0;
        int rc = tr_vocab_read_file(files[i], &v, &found, err);
        if (rc) return rc;
        if (!found) continue;
        const int same = tr_vocab_equal(&v, mine);
        if (!same)
            rc = tr_error_set(err, TR_E_CONFIG, "%s: the weights were trained with another vocabulary (%lld %s) than "
                              "this data's (%lld %s, data.format %s, data.vocab): a checkpoint of another corpus?",
                              files[i], (long long)v.size, kinds[v.kind], (long long)mine->size, kinds[mine->kind],
                              cfg->data.format == TR_DATA_TEXT ? "text" : "tokens");
        tr_vocab_free(&v);
        if (rc) return rc;
        break; /* the first one found decides */
    }
    char *json = tr_vocab_to_json(mine);
    if (!json) return tr_error_set(err, TR_E_RUNTIME, "vocab.json: out of memory");
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    const int rc = tr_io_write_file_atomic(path, json, strlen(json), err);
    free(json);
    return rc;
}

int tr_run_dir_write_confusion(const char *dir, const char *split, int ema, const tr_metrics *m, tr_error *err)
{
    char path[TR_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/confusion_%s%s.csv", dir, split, ema ? "_ema" : "");
    return tr_metrics_write_confusion(m, path, err);
}

void tr_run_dir_draw_curves(const char *dir, int *failed, tr_log *log)
{
    if (*failed) return;
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/curves.png", dir);
    tr_error e = {0};
    if (tr_plot_runs(&dir, 1, path, &e)) {
        *failed = 1;
        tr_log_message(log, "warning: curves.png is no longer drawn: %s", e.msg);
    }
}

/* Keys a trace does not record as overrides: where the run writes, and the trace itself. */
static int not_recorded(const char *key) { return strncmp(key, "run.", 4) == 0 || strcmp(key, "log.trace") == 0; }

/* The recording's config into a fresh trace: the fingerprint, the overrides beyond the config file (the keys
 * whose values differ from the file's; none for a config given as text) and the effective config's YAML, so
 * that `verify CONFIG TRACE` can repeat the recording without its command line and refuse a different config. */
static int write_trace_config(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    char fp[65] = "";
    int rc = tr_config_fingerprint(cfg, fp, err);
    if (rc) return rc;
    char **overrides = NULL;
    int n = 0;
    tr_config *base = malloc(sizeof *base);
    if (!base) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    tr_error ignore = {0};
    tr_config_defaults(base);
    if (cfg->source[0] && tr_config_load_file(base, cfg->source, &ignore) == TR_OK)
        n = tr_config_overrides_between(base, cfg, not_recorded, &overrides);
    free(base);
    char *yaml = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&yaml, &len);
    if (!mem || n < 0) {
        if (mem) fclose(mem);
        free(yaml);
        tr_config_overrides_free(overrides);
        return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    }
    tr_config_write_yaml(cfg, mem);
    fclose(mem);
    tr_trace_write_config(t->sinks.trace, fp, overrides, n, yaml);
    free(yaml);
    tr_config_overrides_free(overrides);
    return TR_OK;
}

/* Open log.trace: a fresh run starts the file, a resumed one appends a resume record. A missing directory is
 * created; one that cannot be is a config error, reported before the first step. */
int run_open_trace(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    if (!cfg->log.trace[0] || !tr_dist_is_main(&t->dist)) return TR_OK;
    char dir[TR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->log.trace);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        int created;
        tr_error derr = {0};
        if (tr_io_make_dirs(dir, &created, &derr))
            return tr_error_set(err, TR_E_CONFIG, "log.trace: %s", derr.msg);
    }
    t->sinks.trace = fopen(cfg->log.trace, t->dir.resume_from[0] ? "a" : "w");
    if (!t->sinks.trace)
        return tr_error_set(err, TR_E_CONFIG, "log.trace: %s: cannot open for writing: %s", cfg->log.trace,
                            strerror(errno));
    if (t->dir.resume_from[0] && ftell(t->sinks.trace) > 0) {
        tr_trace_write_resume(t->sinks.trace, t->p.step);
    } else {
        int intra = 0, inter = 0;
        trs_get_threads(&intra, &inter, NULL);
        tr_trace_write_header(t->sinks.trace, trs_torch_version(), intra, inter, cfg->deterministic);
        return write_trace_config(t, err);
    }
    return TR_OK;
}
