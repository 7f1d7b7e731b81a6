/*
 * best.c -- RUN_DIR/best.json: written after each save while checkpoint.monitor is set, read back (untrusted)
 * when init.from or predict is given a run directory (best.h).
 */
#include "best.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "io.h"

static void ckpt_name(int64_t step, char *out, size_t n) { snprintf(out, n, "checkpoints/step-%010lld", (long long)step); }

static cJSON *entry(int64_t step, double score)
{
    cJSON *e = cJSON_CreateObject();
    char name[64];
    ckpt_name(step, name, sizeof name);
    cJSON_AddNumberToObject(e, "step", (double)step);
    cJSON_AddNumberToObject(e, "score", score);
    cJSON_AddStringToObject(e, "checkpoint", name);
    return e;
}

int tr_best_write(const char *run_dir, const char *monitor, int mode_max, const tr_topk *t, tr_error *err)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/best.json", run_dir);
    if (t->n == 0) return TR_OK;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "monitor", monitor);
    cJSON_AddStringToObject(o, "mode", mode_max ? "max" : "min");
    cJSON_AddItemToObject(o, "best", entry(t->step[0], t->score[0]));
    cJSON *list = cJSON_AddArrayToObject(o, "top_k");
    for (int i = 0; i < t->n; i++) cJSON_AddItemToArray(list, entry(t->step[i], t->score[i]));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    const size_t len = strlen(text);
    char *line = realloc(text, len + 2);
    if (!line) {
        free(text);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    const int rc = tr_io_write_file_atomic(path, line, len + 1, err);
    free(line);
    return rc;
}

/* The one file reader's error as this file's: a run's best.json and a checkpoint's trainer.json are the run's files,
 * never the user's input (TR_E_RUNTIME). */
static int runtime_error(tr_error *err)
{
    if (err) err->code = TR_E_RUNTIME;
    return TR_E_RUNTIME;
}

int tr_best_resolve(const char *run_dir, char *path_out, size_t size, int *used_best, tr_error *err)
{
    *used_best = 0;
    path_out[0] = '\0';
    char file[1100];
    snprintf(file, sizeof file, "%s/best.json", run_dir);
    struct stat st;
    if (stat(file, &st) != 0 && errno == ENOENT) return TR_OK; /* no selection: the caller takes the newest */
    unsigned char *buf = NULL;
    size_t n = 0;
    if (tr_io_read_file(file, 64 * 1024 - 1, &buf, &n, err) != TR_OK) return runtime_error(err);
    cJSON *o = cJSON_Parse((const char *)buf);
    free(buf);
    int rc = TR_OK;
    const cJSON *mon = cJSON_GetObjectItemCaseSensitive(o, "monitor");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(o, "best");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(best, "step");
    const cJSON *score = cJSON_GetObjectItemCaseSensitive(best, "score");
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(best, "checkpoint");
    char why[256], want[64];
    int64_t s = -1;
    if (!cJSON_IsObject(o)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: not a JSON object", file);
    else if (!cJSON_IsString(mon) || tr_monitor_parse(mon->valuestring, NULL, why, sizeof why))
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field monitor: %s", file,
                          cJSON_IsString(mon) ? why : "missing or not a string");
    else if (!cJSON_IsString(mode) || (strcmp(mode->valuestring, "min") && strcmp(mode->valuestring, "max")))
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field mode: not \"min\" or \"max\"", file);
    else if (!cJSON_IsObject(best)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: field best: missing", file);
    else if (!cJSON_IsNumber(step) || !(step->valuedouble >= 0) || step->valuedouble > (double)TR_CKPT_MAX_STEP ||
             step->valuedouble != floor(step->valuedouble))
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field best.step: not a step in [0, %lld]", file,
                          (long long)TR_CKPT_MAX_STEP);
    else if (!cJSON_IsNumber(score) || !isfinite(score->valuedouble))
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field best.score: not a finite number", file);
    if (!rc) {
        s = (int64_t)step->valuedouble;
        ckpt_name(s, want, sizeof want);
        if (!cJSON_IsString(ck) || strcmp(ck->valuestring, want) != 0)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: field best.checkpoint: expected \"%s\" for step %lld", file,
                              want, (long long)s);
    }
    const double sc = rc ? 0 : score->valuedouble;
    cJSON_Delete(o);
    if (rc) return rc;
    char dir[1200];
    if (snprintf(dir, sizeof dir, "%s/%s", run_dir, want) >= (int)size)
        return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", dir);
    tr_error verr = {0};
    if (tr_checkpoint_verify(dir, &verr))
        return tr_error_set(err, TR_E_RUNTIME, "%s names %s as the best checkpoint, which does not verify: %s", file,
                            dir, verr.msg);
    /* the checkpoint's own record of its score: best.json must agree with it */
    char tj[1300];
    snprintf(tj, sizeof tj, "%s/trainer.json", dir);
    unsigned char *text = NULL;
    size_t len = 0;
    if (tr_io_read_file(tj, (int64_t)64 << 20, &text, &len, err) != TR_OK) return runtime_error(err);
    tr_ckpt_progress p;
    tr_ckpt_meta m;
    rc = tr_ckpt_parse_trainer((const char *)text, tj, s, &p, &m, err);
    free(text);
    if (rc) return rc;
    tr_ckpt_meta_free(&m);
    int found = 0;
    for (int i = 0; i < p.sel.topk.n && !found; i++) found = p.sel.topk.step[i] == s && p.sel.topk.score[i] == sc;
    if (!found)
        return tr_error_set(err, TR_E_RUNTIME, "%s: field best.score: %.17g at step %lld is not what %s recorded",
                            file, sc, (long long)s, tj);
    snprintf(path_out, size, "%s", dir);
    *used_best = 1;
    return TR_OK;
}

int tr_checkpoint_of_run(const char *path, char *out, size_t n, const char **which, tr_error *err)
{
    *which = NULL;
    char sub[1100];
    struct stat st;
    snprintf(sub, sizeof sub, "%s/checkpoints", path);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || stat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (snprintf(out, n, "%s", path) >= (int)n) return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", path);
        return TR_OK;
    }
    int used_best = 0;
    int rc = tr_best_resolve(path, out, n, &used_best, err);
    if (rc) return rc;
    if (used_best) {
        *which = "best";
        return TR_OK;
    }
    char latest[TR_PATH_MAX];
    if ((rc = tr_checkpoint_find_latest(path, latest, NULL, NULL, err))) return rc;
    if (!latest[0]) return tr_error_set(err, TR_E_RUNTIME, "%s: no checkpoint that verifies", path);
    if (snprintf(out, n, "%s", latest) >= (int)n) return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", latest);
    *which = "newest";
    return TR_OK;
}

int tr_init_from_load(const tr_config *cfg, trs_model *model, tr_ckpt_warn_fn warn, void *ctx, char *loaded,
                      const char **which, tr_error *err)
{
    loaded[0] = '\0';
    *which = NULL;
    if (!cfg->init.from[0]) return TR_OK;
    char given[TR_PATH_MAX], path[TR_PATH_MAX];
    tr_config_resolve_path(cfg, cfg->init.from, given);
    int rc = tr_checkpoint_of_run(given, path, sizeof path, which, err);
    if (rc) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return tr_error_set(err, rc, "init.from: %s", msg);
    }
    if ((rc = tr_checkpoint_load_weights(path, model, cfg->init.strict, warn, ctx, err))) return rc;
    snprintf(loaded, TR_PATH_MAX, "%s", path);
    return TR_OK;
}
