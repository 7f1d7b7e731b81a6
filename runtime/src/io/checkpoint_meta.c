/*
 * checkpoint_meta.c -- a checkpoint's JSON (trainer.json, MANIFEST.json) read as untrusted input: parsed and every
 * field checked against what it can mean on its own, before anything of it is used (checkpoint.h). Pure C over
 * cJSON, no libtorch: the fuzz harness tests/fuzz/fuzz_checkpoint_meta.c links this file alone.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int tr_ckpt_json_i64(const cJSON *o, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !v->valuestring) return -1;
    char *end;
    errno = 0;
    const long long x = strtoll(v->valuestring, &end, 10);
    if (errno || *end || end == v->valuestring) return -1;
    *out = x;
    return 0;
}

int tr_ckpt_json_hex(const cJSON *o, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !v->valuestring) return -1;
    char *end;
    *out = strtod(v->valuestring, &end);
    return (*end || end == v->valuestring) ? -1 : 0;
}

const char *tr_ckpt_json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

void tr_ckpt_meta_free(tr_ckpt_meta *m)
{
    if (!m) return;
    for (int64_t i = 0; i < m->n_groups; i++) free(m->group_params[i]);
    free(m->group_params);
    free(m->config_yaml);
    memset(m, 0, sizeof *m);
}

/* A field that is missing or not of its type. */
#define MISSING(key) tr_error_set(err, TR_E_RUNTIME, "%s: field %s: missing or malformed", file, key)

/* An integer field outside [lo, hi]. */
static int range_i64(const char *file, const char *key, int64_t v, int64_t lo, int64_t hi, const char *why,
                     tr_error *err)
{
    if (v >= lo && v <= hi) return TR_OK;
    return tr_error_set(err, TR_E_RUNTIME, "%s: field %s: %lld is outside [%lld, %lld]%s%s", file, key, (long long)v,
                        (long long)lo, (long long)hi, why ? " " : "", why ? why : "");
}

static int seconds_ok(const char *file, const char *key, double v, tr_error *err)
{
    if (isfinite(v) && v >= 0 && v <= TR_CKPT_MAX_SECONDS) return TR_OK;
    return tr_error_set(err, TR_E_RUNTIME, "%s: field %s: %g is not a duration in [0, %g] seconds", file, key, v,
                        (double)TR_CKPT_MAX_SECONDS);
}

/* A monitor name as saved: [a-z_], 1 to TR_MONITOR_NAME - 1 bytes ("" for none is written as absent). */
static int read_name(const cJSON *o, const char *key, char *out)
{
    const char *v = tr_ckpt_json_str(o, key);
    if (!v || !v[0] || strlen(v) >= TR_MONITOR_NAME || strspn(v, "abcdefghijklmnopqrstuvwxyz_") != strlen(v)) return -1;
    snprintf(out, TR_MONITOR_NAME, "%s", v);
    return 0;
}

static int read_mode(const cJSON *o, int *mode_max)
{
    const char *v = tr_ckpt_json_str(o, "mode");
    if (!v || (strcmp(v, "min") && strcmp(v, "max"))) return -1;
    *mode_max = strcmp(v, "max") == 0;
    return 0;
}

/* Strict types: a field trainer.json writes with a JSON type must have that type when present; a value of another
 * type is an error naming the field, never read as something else ("true" as false, 1.5 as 1) or skipped. */

/* An optional boolean: 0 and *out set (absent: *out = dflt), -1 when present and not true / false. */
static int opt_bool(const cJSON *o, const char *key, int dflt, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) return -1;
    *out = cJSON_IsTrue(v);
    return 0;
}

/* An optional integral JSON number in [lo, hi]: 0 and *out set (absent: *out untouched), -1 otherwise. */
static int opt_int(const cJSON *o, const char *key, double lo, double hi, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

/* An optional string: 0 (absent: *out = NULL), -1 when present and not a string. */
static int opt_str(const cJSON *o, const char *key, const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NULL;
    if (!v) return 0;
    if (!cJSON_IsString(v) || !v->valuestring) return -1;
    *out = v->valuestring;
    return 0;
}

/* An optional hex-float string (the doubles trainer.json writes): 0, or -1 when present and malformed. */
static int opt_hex(const cJSON *o, const char *key)
{
    double ignored;
    return !cJSON_GetObjectItemCaseSensitive(o, key) || tr_ckpt_json_hex(o, key, &ignored) == 0 ? 0 : -1;
}

/* Why a checkpoint is saved: the run's triggers (checkpoint.h) and the embedding trainer's. */
static int known_reason(const char *r)
{
    static const char *const reasons[] = {"interval", "steps", "end", "signal", "watchdog", "best", "trainer"};
    for (size_t i = 0; i < sizeof reasons / sizeof *reasons; i++)
        if (strcmp(r, reasons[i]) == 0) return 1;
    return 0;
}

/* "cpu" or "cuda:N" (N in [0, 1023]). */
static int known_device(const char *d)
{
    if (strcmp(d, "cpu") == 0) return 1;
    const size_t n = strlen(d);
    return strncmp(d, "cuda:", 5) == 0 && n > 5 && n <= 9 && strspn(d + 5, "0123456789") == n - 5;
}

/* trainer.json's "cursor": the batch geometry and the origin it took over at (checkpoint.h), absent in older
 * checkpoints. Each field on its own; whether the cursor follows from them is tr_ckpt_validate's. */
static int parse_cursor(const cJSON *c, const char *file, tr_ckpt_progress *p, tr_error *err)
{
    if (!c) return TR_OK;
    if (!cJSON_IsObject(c)) return MISSING("cursor");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(c, "origin");
    if (tr_ckpt_json_i64(c, "step_samples", &p->step_samples)) return MISSING("cursor.step_samples");
    if (opt_bool(c, "drop_last", -1, &p->drop_last) || p->drop_last < 0) return MISSING("cursor.drop_last");
    if (!cJSON_IsObject(o)) return MISSING("cursor.origin");
    if (tr_ckpt_json_i64(o, "step", &p->origin_step)) return MISSING("cursor.origin.step");
    if (tr_ckpt_json_i64(o, "epoch", &p->origin_epoch)) return MISSING("cursor.origin.epoch");
    if (tr_ckpt_json_i64(o, "position", &p->origin_pos)) return MISSING("cursor.origin.position");
    if (tr_ckpt_json_i64(o, "samples", &p->origin_samples)) return MISSING("cursor.origin.samples");
    int rc = range_i64(file, "cursor.step_samples", p->step_samples, 1, TR_CKPT_MAX_COUNT, NULL, err);
    if (!rc) rc = range_i64(file, "cursor.origin.step", p->origin_step, 0, p->step, NULL, err);
    if (!rc) rc = range_i64(file, "cursor.origin.epoch", p->origin_epoch, 0, p->epoch, NULL, err);
    if (!rc) rc = range_i64(file, "cursor.origin.position", p->origin_pos, 0, TR_CKPT_MAX_COUNT, NULL, err);
    if (!rc) rc = range_i64(file, "cursor.origin.samples", p->origin_samples, 0, p->samples_total, NULL, err);
    return rc;
}

/* trainer.json's "selection" (monitor.h's tr_select_state), each field checked on its own. */
static int parse_selection(const cJSON *sel, const char *file, const tr_ckpt_progress *p, tr_select_state *s,
                           tr_error *err)
{
    memset(s, 0, sizeof *s);
    if (!sel) return TR_OK; /* saved before selection existed, or without any */
    if (!cJSON_IsObject(sel)) return MISSING("selection");
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(sel, "checkpoint");
    if (ck) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(ck, "top_k");
        if (read_name(ck, "monitor", s->topk_metric)) return MISSING("selection.checkpoint.monitor");
        if (read_mode(ck, &s->topk_max)) return MISSING("selection.checkpoint.mode");
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > TR_TOPK_MAX)
            return tr_error_set(err, TR_E_RUNTIME, "%s: field selection.checkpoint.top_k: not a list of at most %d",
                                file, TR_TOPK_MAX);
        const cJSON *e;
        cJSON_ArrayForEach(e, list)
        {
            const int i = s->topk.n;
            int64_t st;
            double sc;
            if (tr_ckpt_json_i64(e, "step", &st) || tr_ckpt_json_hex(e, "score", &sc))
                return MISSING("selection.checkpoint.top_k[]");
            int rc = range_i64(file, "selection.checkpoint.top_k[].step", st, 0, p->step, NULL, err);
            if (rc) return rc;
            if (!isfinite(sc))
                return tr_error_set(err, TR_E_RUNTIME, "%s: field selection.checkpoint.top_k[%d].score: not finite",
                                    file, i);
            for (int j = 0; j < i; j++) {
                if (s->topk.step[j] == st)
                    return tr_error_set(err, TR_E_RUNTIME, "%s: field selection.checkpoint.top_k[%d].step: %lld "
                                        "twice", file, i, (long long)st);
            }
            if (i > 0 && (s->topk_max ? sc > s->topk.score[i - 1] : sc < s->topk.score[i - 1]))
                return tr_error_set(err, TR_E_RUNTIME, "%s: field selection.checkpoint.top_k[%d].score: not ordered "
                                    "best first", file, i);
            s->topk.step[i] = st;
            s->topk.score[i] = sc;
            s->topk.n++;
        }
    }
    const cJSON *es = cJSON_GetObjectItemCaseSensitive(sel, "early_stopping");
    if (es) {
        if (read_name(es, "monitor", s->es_metric)) return MISSING("selection.early_stopping.monitor");
        if (read_mode(es, &s->es_max)) return MISSING("selection.early_stopping.mode");
        if (tr_ckpt_json_hex(es, "best", &s->es.best) || isnan(s->es.best))
            return MISSING("selection.early_stopping.best");
        if (tr_ckpt_json_i64(es, "best_step", &s->es.best_step) || tr_ckpt_json_i64(es, "wait", &s->es.wait))
            return MISSING("selection.early_stopping.best_step / wait");
        int rc = range_i64(file, "selection.early_stopping.best_step", s->es.best_step, -1, p->step, NULL, err);
        if (!rc) rc = range_i64(file, "selection.early_stopping.wait", s->es.wait, 0, p->evals_done, NULL, err);
        if (rc) return rc;
        if (opt_bool(es, "stopped", 0, &s->es.stopped))
            return tr_error_set(err, TR_E_RUNTIME, "%s: field selection.early_stopping.stopped: not true or false",
                                file);
    }
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(sel, "plateau");
    if (pl) {
        if (read_name(pl, "monitor", s->plateau_metric)) return MISSING("selection.plateau.monitor");
        if (tr_ckpt_json_hex(pl, "lr", &s->plateau.lr) || !isfinite(s->plateau.lr) || !(s->plateau.lr > 0) ||
            s->plateau.lr > 1e10)
            return tr_error_set(err, TR_E_RUNTIME, "%s: field selection.plateau.lr: missing or not in (0, 1e10]", file);
        if (tr_ckpt_json_hex(pl, "best", &s->plateau.best) || isnan(s->plateau.best))
            return MISSING("selection.plateau.best");
        if (tr_ckpt_json_i64(pl, "num_bad", &s->plateau.bad) ||
            tr_ckpt_json_i64(pl, "cooldown_counter", &s->plateau.cooldown) ||
            tr_ckpt_json_i64(pl, "reductions", &s->plateau.reductions))
            return MISSING("selection.plateau.num_bad / cooldown_counter / reductions");
        int rc = range_i64(file, "selection.plateau.num_bad", s->plateau.bad, 0, p->evals_done, NULL, err);
        if (!rc) rc = range_i64(file, "selection.plateau.cooldown_counter", s->plateau.cooldown, 0, 1000000000, NULL, err);
        if (!rc) rc = range_i64(file, "selection.plateau.reductions", s->plateau.reductions, 0, p->evals_done, NULL, err);
        if (rc) return rc;
    }
    return TR_OK;
}

/* What describes how a checkpoint was made (versions, device, threads, config, reason): strings, integers and
 * objects of their type when present, or an error naming the field -- a thread count of another type would
 * otherwise be skipped, and with it the warning that the resumed run is not bit-identical. */
static int parse_descriptive(const cJSON *o, const char *file, tr_ckpt_meta *m, tr_error *err)
{
    const char *fp, *ver, *dev, *yaml, *reason, *tv, *saved_at;
    if (opt_str(o, "config_fingerprint", &fp) || (fp && (strlen(fp) != 64 || strspn(fp, "0123456789abcdef") != 64)))
        return tr_error_set(err, TR_E_RUNTIME, "%s: field config_fingerprint: not 64 lowercase hex digits", file);
    if (opt_str(o, "libtorch_version", &ver) || (ver && strlen(ver) >= sizeof m->libtorch_version))
        return MISSING("libtorch_version");
    if (opt_str(o, "trainrun_version", &tv)) return MISSING("trainrun_version");
    if (opt_str(o, "saved_at", &saved_at)) return MISSING("saved_at");
    if (opt_str(o, "device", &dev) || (dev && !known_device(dev)))
        return tr_error_set(err, TR_E_RUNTIME, "%s: field device: not \"cpu\" or \"cuda:N\"", file);
    if (opt_str(o, "reason", &reason) || (reason && !known_reason(reason)))
        return tr_error_set(err, TR_E_RUNTIME,
                            "%s: field reason: not one of interval, steps, end, signal, watchdog, "
                            "best, trainer",
                            file);
    if (opt_str(o, "config_yaml", &yaml)) return MISSING("config_yaml");
    if (opt_int(o, "cuda_generators", 0, 1024, &m->cuda_generators))
        return tr_error_set(err, TR_E_RUNTIME, "%s: field cuda_generators: not a whole count in [0, 1024]", file);
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(o, "threads");
    if (th) {
        int intra = -1, inter = -1, blas = -1;
        if (!cJSON_IsObject(th)) return MISSING("threads");
        if (!cJSON_GetObjectItemCaseSensitive(th, "intra_op") || opt_int(th, "intra_op", 0, 1e6, &intra))
            return tr_error_set(err, TR_E_RUNTIME, "%s: field threads.intra_op: not a whole count in [0, 1000000]",
                                file);
        if (!cJSON_GetObjectItemCaseSensitive(th, "inter_op") || opt_int(th, "inter_op", 0, 1e6, &inter))
            return tr_error_set(err, TR_E_RUNTIME, "%s: field threads.inter_op: not a whole count in [0, 1000000]",
                                file);
        if (opt_int(th, "blas", -1, 1e6, &blas))
            return tr_error_set(err, TR_E_RUNTIME, "%s: field threads.blas: not a whole count in [-1, 1000000]", file);
        m->intra_op = intra;
        m->inter_op = inter;
    }
    snprintf(m->fingerprint, sizeof m->fingerprint, "%s", fp ? fp : "");
    snprintf(m->libtorch_version, sizeof m->libtorch_version, "%s", ver ? ver : "");
    snprintf(m->device, sizeof m->device, "%s", dev ? dev : "");
    snprintf(m->reason, sizeof m->reason, "%s", reason ? reason : "");
    if (yaml && !(m->config_yaml = strdup(yaml))) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
    return TR_OK;
}

int tr_ckpt_parse_trainer(const char *text, const char *file, int64_t dir_step, tr_ckpt_progress *p,
                          tr_ckpt_meta *m, tr_error *err)
{
    memset(p, 0, sizeof *p);
    memset(m, 0, sizeof *m);
    p->epoch_samples = -1;
    m->ema_updates = -1;
    m->intra_op = m->inter_op = -1;
    cJSON *o = cJSON_Parse(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return tr_error_set(err, TR_E_RUNTIME, "%s: not a JSON object", file);
    }
    int rc = TR_OK;
    const cJSON *fv = cJSON_GetObjectItemCaseSensitive(o, "format_version");
    const cJSON *win = cJSON_GetObjectItemCaseSensitive(o, "log_window");
    int64_t ws = 1;
    if (!cJSON_IsNumber(fv)) rc = MISSING("format_version");
    else if (fv->valuedouble != TR_CKPT_FORMAT_VERSION)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field format_version: %g; this trainrun reads %d", file,
                          fv->valuedouble, TR_CKPT_FORMAT_VERSION);
    else if (tr_ckpt_json_i64(o, "step", &p->step)) rc = MISSING("step");
    else if (tr_ckpt_json_i64(o, "epoch", &p->epoch)) rc = MISSING("epoch");
    else if (tr_ckpt_json_i64(o, "position", &p->pos)) rc = MISSING("position");
    else if (tr_ckpt_json_hex(o, "elapsed_seconds", &p->elapsed)) rc = MISSING("elapsed_seconds");
    else if (tr_ckpt_json_i64(o, "evals_done", &p->evals_done)) rc = MISSING("evals_done");
    else if (!cJSON_IsObject(win)) rc = MISSING("log_window");
    else if (tr_ckpt_json_hex(win, "loss_sum", &p->win_loss)) rc = MISSING("log_window.loss_sum");
    else if (tr_ckpt_json_i64(win, "correct", &p->win_correct)) rc = MISSING("log_window.correct");
    else if (tr_ckpt_json_i64(win, "samples", &p->win_samples)) rc = MISSING("log_window.samples");
    else if (tr_ckpt_json_i64(win, "steps", &p->win_steps)) rc = MISSING("log_window.steps");
    else if (tr_ckpt_json_hex(o, "last_loss", &p->last_loss)) rc = MISSING("last_loss");
    else if (tr_ckpt_json_hex(o, "val_loss", &p->val_loss)) rc = MISSING("val_loss");
    else if (tr_ckpt_json_hex(o, "val_accuracy", &p->val_accuracy)) rc = MISSING("val_accuracy");
    else if (tr_ckpt_json_i64(o, "samples_total", &p->samples_total)) rc = MISSING("samples_total");
    else if (tr_ckpt_json_hex(o, "step_seconds", &p->step_seconds)) rc = MISSING("step_seconds");
    /* absent in checkpoints saved before it was recorded */
    else if (cJSON_GetObjectItemCaseSensitive(o, "epoch_samples") &&
             (tr_ckpt_json_i64(o, "epoch_samples", &p->epoch_samples) || p->epoch_samples < 1))
        rc = MISSING("epoch_samples");
    /* absent in checkpoints of one-process runs saved before distributed runs existed */
    else if (cJSON_GetObjectItemCaseSensitive(o, "world_size") && tr_ckpt_json_i64(o, "world_size", &ws))
        rc = MISSING("world_size");
    /* each field against what it can mean on its own */
    if (!rc) rc = range_i64(file, "step", p->step, 0, TR_CKPT_MAX_STEP, NULL, err);
    if (!rc && dir_step >= 0 && p->step != dir_step)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field step: %lld, but the checkpoint is step %lld", file,
                          (long long)p->step, (long long)dir_step);
    if (!rc) rc = range_i64(file, "epoch", p->epoch, 0, p->step, "(an epoch takes at least one step)", err);
    if (!rc) rc = range_i64(file, "epoch_samples", p->epoch_samples, -1, TR_CKPT_MAX_COUNT, NULL, err);
    if (!rc)
        rc = range_i64(file, "position", p->pos, 0, p->epoch_samples >= 0 ? p->epoch_samples : TR_CKPT_MAX_COUNT,
                       p->epoch_samples >= 0 ? "(the epoch's length)" : NULL, err);
    if (!rc) rc = seconds_ok(file, "elapsed_seconds", p->elapsed, err);
    if (!rc) rc = seconds_ok(file, "step_seconds", p->step_seconds, err);
    if (!rc) rc = range_i64(file, "evals_done", p->evals_done, 0, p->step + 1, NULL, err);
    if (!rc) rc = range_i64(file, "log_window.steps", p->win_steps, 0, p->step, NULL, err);
    if (!rc) rc = range_i64(file, "log_window.samples", p->win_samples, 0, TR_CKPT_MAX_COUNT, NULL, err);
    if (!rc) rc = range_i64(file, "log_window.correct", p->win_correct, 0, TR_CKPT_MAX_COUNT, NULL, err);
    if (!rc) rc = range_i64(file, "samples_total", p->samples_total, 0, TR_CKPT_MAX_COUNT, NULL, err);
    if (!rc) rc = range_i64(file, "world_size", ws, 1, TR_CKPT_MAX_WORLD, NULL, err);
    if (!rc) {
        p->world_size = (int)ws;
        if (opt_bool(o, "has_val", 0, &p->has_val))
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: field has_val: not true or false", file);
    }
    if (!rc) rc = parse_cursor(cJSON_GetObjectItemCaseSensitive(o, "cursor"), file, p, err);
    if (!rc && cJSON_GetObjectItemCaseSensitive(o, "ema_updates")) {
        if (tr_ckpt_json_i64(o, "ema_updates", &m->ema_updates)) rc = MISSING("ema_updates");
        else rc = range_i64(file, "ema_updates", m->ema_updates, 0, p->step, "(at most one update a step)", err);
    }
    if (!rc) rc = parse_selection(cJSON_GetObjectItemCaseSensitive(o, "selection"), file, p, &p->sel, err);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(o, "param_groups");
    if (!rc && !cJSON_IsArray(groups)) rc = MISSING("param_groups");
    if (!rc) {
        const int n = cJSON_GetArraySize(groups);
        if (n < 1 || n > TR_CKPT_MAX_GROUPS)
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: field param_groups: %d groups, expected 1 to %d", file, n,
                              TR_CKPT_MAX_GROUPS);
        else if (!(m->group_params = calloc((size_t)n, sizeof *m->group_params)))
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
        const cJSON *g;
        int i = 0;
        cJSON_ArrayForEach(g, groups)
        {
            if (rc) break;
            const char *names = tr_ckpt_json_str(g, "params");
            double lr = 0;
            char key[64];
            static const char *const hex_options[] = {"weight_decay", "momentum", "dampening", "beta1", "beta2", "eps"};
            const char *bad = NULL;
            int nesterov;
            for (size_t k = 0; k < sizeof hex_options / sizeof *hex_options && !bad; k++)
                if (opt_hex(g, hex_options[k])) bad = hex_options[k];
            if (!bad && opt_bool(g, "nesterov", 0, &nesterov)) bad = "nesterov";
            if (!names || tr_ckpt_json_hex(g, "lr", &lr)) {
                snprintf(key, sizeof key, "param_groups[%d]", i);
                rc = MISSING(key);
            } else if (bad) {
                snprintf(key, sizeof key, "param_groups[%d].%s", i, bad);
                rc = MISSING(key);
            } else if (!isfinite(lr) || lr < 0) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: field param_groups[%d].lr: %g is not a learning rate", file,
                                  i, lr);
            } else if (!(m->group_params[i] = strdup(names))) {
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", file);
            } else {
                if (lr > m->lr_max) m->lr_max = lr;
                m->n_groups = ++i;
            }
        }
    }
    if (!rc) rc = parse_descriptive(o, file, m, err);
    cJSON_Delete(o);
    if (rc) tr_ckpt_meta_free(m);
    return rc;
}

int tr_ckpt_parse_manifest(const char *text, const char *file, tr_ckpt_manifest *out, tr_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *m = cJSON_Parse(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
    if (!cJSON_IsObject(files)) {
        cJSON_Delete(m);
        return tr_error_set(err, TR_E_RUNTIME, "%s: not a trainrun manifest", file);
    }
    int rc = TR_OK;
    /* format 1 (and manifests before the field): SHA-256; format 2: XXH3-128 */
    const cJSON *fv = cJSON_GetObjectItemCaseSensitive(m, "format_version");
    out->algo = TR_HASH_SHA256;
    if (fv && (!cJSON_IsNumber(fv) || (fv->valuedouble != 1 && fv->valuedouble != TR_CKPT_MANIFEST_VERSION)))
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field format_version: %s; this trainrun reads manifests of format 1 "
                          "(SHA-256) and %d (XXH3-128)", file, cJSON_IsNumber(fv) ? "not 1 or 2" : "not a number",
                          TR_CKPT_MANIFEST_VERSION);
    else if (fv && fv->valuedouble == TR_CKPT_MANIFEST_VERSION)
        out->algo = TR_HASH_XXH3_128;
    const char *key = tr_hash_name(out->algo);
    const size_t hex_len = tr_hash_hex_len(out->algo);
    if (!rc && !tr_ckpt_json_i64(m, "step", &out->step) && out->step < 0)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: field step: %lld is negative", file, (long long)out->step);
    else if (!rc && tr_ckpt_json_i64(m, "step", &out->step))
        out->step = -1;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, files)
    {
        if (rc) break;
        const char *fname = entry->string;
        int64_t size = -1;
        const char *sha = tr_ckpt_json_str(entry, key);
        if (!fname || !fname[0] || strchr(fname, '/') || strcmp(fname, ".") == 0 || strcmp(fname, "..") == 0 ||
            strlen(fname) >= sizeof out->files[0].name) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: bad file name in the manifest", file);
        } else if (out->n == TR_CKPT_MAX_FILES) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: more than %d files", file, TR_CKPT_MAX_FILES);
        } else if (tr_ckpt_json_i64(entry, "size", &size) || size < 0 || !sha || strlen(sha) != hex_len ||
                   strspn(sha, "0123456789abcdef") != hex_len) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: malformed entry for %s (a size and a %zu-digit %s)", file,
                              fname, hex_len, key);
        } else {
            for (int i = 0; i < out->n && !rc; i++)
                if (strcmp(out->files[i].name, fname) == 0)
                    rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s is listed twice", file, fname);
            if (!rc) {
                snprintf(out->files[out->n].name, sizeof out->files[0].name, "%s", fname);
                memcpy(out->files[out->n].digest, sha, hex_len + 1);
                out->files[out->n].size = size;
                out->n++;
            }
        }
    }
    cJSON_Delete(m);
    return rc;
}
