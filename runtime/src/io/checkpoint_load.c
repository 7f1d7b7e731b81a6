/*
 * checkpoint_load.c -- a checkpoint checked before anything of it is used, then loaded (checkpoint.h): the
 * manifest, trainer.json, every file against the model, optimizer, EMA and generators; then their states.
 */
#include "checkpoint_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

/* ------------------------------------------------------------------------------------------------ reading */

static int shim_dtype(tr_st_dtype d, trs_dtype *out)
{
    switch (d) {
    case TR_ST_F32: *out = TRS_DTYPE_FLOAT32; return 0;
    case TR_ST_I64: *out = TRS_DTYPE_INT64; return 0;
    case TR_ST_U8: *out = TRS_DTYPE_UINT8; return 0;
    default: return -1;
    }
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

/* trainer.json of checkpoint `dir` (its path into file[TR_PATH_MAX + 64]) parsed into *o: NULL when it is not valid
 * JSON. TR_E_RUNTIME naming the file when it cannot be read. */
static int parse_trainer_json(const char *dir, char *file, cJSON **o, tr_error *err)
{
    snprintf(file, TR_PATH_MAX + 64, "%s/trainer.json", dir);
    char *text = tr_ckpt_read_text(file, err);
    if (!text) return TR_E_RUNTIME;
    *o = cJSON_Parse(text);
    free(text);
    return TR_OK;
}

int tr_checkpoint_read_classes(const char *ckpt_dir, char ***names, int64_t *n, tr_error *err)
{
    *names = NULL;
    *n = 0;
    char file[TR_PATH_MAX + 64];
    cJSON *o = NULL;
    if (parse_trainer_json(ckpt_dir, file, &o, err)) return TR_E_RUNTIME;
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
    cJSON *o = NULL;
    if (parse_trainer_json(ckpt_dir, file, &o, err)) return TR_E_RUNTIME;
    const char *yaml = o ? tr_ckpt_json_str(o, "config_yaml") : NULL;
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

int tr_checkpoint_verify(const char *dir, tr_error *err)
{
    char path[TR_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/MANIFEST.json", dir);
    char *text = tr_ckpt_read_text(path, err);
    if (!text) return TR_E_RUNTIME;
    tr_ckpt_manifest *m = malloc(sizeof *m);
    if (!m) {
        free(text);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    }
    int rc = tr_ckpt_parse_manifest(text, path, m, err);
    free(text);
    for (size_t i = 0; i < TR_CKPT_N_FILES && !rc; i++) {
        int found = 0;
        for (int j = 0; j < m->n && !found; j++) found = strcmp(m->files[j].name, tr_ckpt_files[i]) == 0;
        if (!found) rc = tr_error_set(err, TR_E_RUNTIME, "%s: no entry for %s", path, tr_ckpt_files[i]);
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
        tr_ckpt_warnf(warn, ctx, "%s: loaded the matching keys; missing keys (%d): %s; unexpected keys (%d): %s", file,
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
    const int cuda = tr_ckpt_cuda_generators(model);
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
    tr_ckpt_device_name(model, here, sizeof here);
    const int saved_n = m->cuda_generators, here_n = tr_ckpt_cuda_generators(model);
    if (strcmp(saved, here) != 0)
        tr_ckpt_warnf(warn, ctx, "the checkpoint was saved on %s (%d CUDA device(s)), this run is on %s (%d): it continues, "
                         "but not bit for bit -- kernels round differently on another kind of device, and random "
                         "draws (dropout) come from %s generator", saved, saved_n, here, here_n,
              strncmp(saved, "cuda", 4) == 0 && strncmp(here, "cuda", 4) == 0 ? "another device's" : "another");
    else if (saved_n != here_n)
        tr_ckpt_warnf(warn, ctx, "the checkpoint holds the generator states of %d CUDA device(s), this process sees %d: "
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
        int same = t && t->ndim == ndim && t->dtype == tr_ckpt_st_dtype(want);
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
        tr_ckpt_warnf(warn, ctx, "%s holds no EMA weights: the EMA starts afresh from the loaded weights", dir);
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
        tr_ckpt_warnf(warn, ctx,
              "the config differs from the checkpoint's: %s. The run continues with the new values, but it will "
              "not be bit-identical to an uninterrupted one (the saved config is in %s, key config_yaml)", keys,
              file);
    }
    if (m->libtorch_version[0] && strcmp(m->libtorch_version, trs_torch_version()) != 0)
        tr_ckpt_warnf(warn, ctx, "checkpoint saved with libtorch %s, running %s: bit-identity no longer holds",
              m->libtorch_version, trs_torch_version());
    int intra = 0, inter = 0;
    trs_get_threads(&intra, &inter, NULL);
    if (m->intra_op >= 0 && (m->intra_op != intra || m->inter_op != inter))
        tr_ckpt_warnf(warn, ctx, "checkpoint saved with %d intra-op / %d inter-op threads, running %d / %d: bit-identity "
                         "no longer holds", m->intra_op, m->inter_op, intra, inter);
}

/* trainer.json of checkpoint `dir`, parsed and checked field by field. */
static int read_trainer(const char *dir, tr_ckpt_progress *p, tr_ckpt_meta *m, tr_error *err)
{
    char file[TR_PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/trainer.json", dir);
    char *text = tr_ckpt_read_text(file, err);
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
                if (map[i]->dtype != tr_ckpt_st_dtype(want))
                    rc = tr_error_set(err, code, "%s: %s: dtype %s, the model's is %s", file, map[i]->name,
                                      tr_st_dtype_name(map[i]->dtype), tr_st_dtype_name(tr_ckpt_st_dtype(want)));
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
    int64_t *steps = tr_ckpt_list_steps(run_dir, &n);
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
        tr_ckpt_warnf(warn, ctx, "skipping checkpoint %s: %s", dir, cerr.msg);
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
