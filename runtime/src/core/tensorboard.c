/*
 * tensorboard.c -- the TensorBoard sink (see tensorboard.h).
 */
#define _XOPEN_SOURCE 700
#include "tensorboard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"

static double wall_now(const tr_wall_clock *w)
{
    if (w && w->now) return w->now(w->ctx);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every config key as a hyperparameter: numbers as numbers, bools as bools, the rest as text. */
typedef struct hp_list {
    tr_hparam *hp;
    char **text;
    int n, cap;
} hp_list;

static int add_hparam(void *ctx, const char *key, tr_config_kind kind, const char *value)
{
    hp_list *l = ctx;
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 256;
        tr_hparam *hp = realloc(l->hp, (size_t)cap * sizeof *hp);
        if (!hp) return -1;
        l->hp = hp;
        char **text = realloc(l->text, (size_t)cap * 2 * sizeof *text);
        if (!text) return -1;
        l->text = text;
        l->cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    l->text[2 * l->n] = k;
    l->text[2 * l->n + 1] = v;
    if (!k || !v) {
        l->n++;
        return -1;
    }
    tr_hparam h = {.key = k, .kind = kind == TR_CONFIG_NUMBER ? 0 : kind == TR_CONFIG_BOOL ? 1 : 2, .text = v};
    char *end = NULL;
    if (h.kind == 0) {
        h.number = strtod(value, &end);
        if (end == value || *end) h.kind = 2; /* not a plain number after all: kept as written */
    }
    h.boolean = strcmp(value, "true") == 0;
    l->hp[l->n++] = h;
    return 0;
}

static void hp_free(hp_list *l)
{
    for (int i = 0; i < 2 * l->n; i++) free(l->text[i]);
    free(l->text);
    free(l->hp);
}

int tr_tb_open(tr_tb_sink *s, const char *run_dir, const tr_config *cfg, int64_t start_step, int first_process,
               const tr_device *device, const tr_wall_clock *wall, tr_error *err)
{
    memset(s, 0, sizeof *s);
    if (device) s->device = *device;
    if (wall) s->wall = *wall;
    char dir[TR_PATH_MAX + 32], path[TR_PATH_MAX + 256], host[256] = "localhost";
    snprintf(dir, sizeof dir, "%s/tensorboard", run_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s", dir, strerror(errno));
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    const double now = wall_now(&s->wall);
    tr_tfevents_name(dir, now, host, (long)getpid(), path, sizeof path);
    int rc = tr_tfevents_create(&s->file, path, now, err);
    if (!rc) rc = tr_tfevents_session_start(&s->file, now, start_step + 1, err);
    if (!rc && first_process) {
        hp_list l = {0};
        if (tr_config_each_key(cfg, add_hparam, &l)) rc = tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
        else rc = tr_tfevents_hparams(&s->file, now, l.hp, l.n, err);
        hp_free(&l);
    }
    if (rc) {
        tr_tfevents_close(&s->file, NULL);
        return rc;
    }
    s->open = 1;
    return TR_OK;
}

static int fail(tr_tb_sink *s, const tr_error *e)
{
    s->failed = 1;
    snprintf(s->warning, sizeof s->warning, "log.tensorboard: %s; no more TensorBoard events are written", e->msg);
    tr_tfevents_close(&s->file, NULL);
    return 1;
}

int tr_tb_event(tr_tb_sink *s, const tr_event *ev)
{
    if (!s->open || s->failed) return 0;
    const double now = wall_now(&s->wall);
    tr_error e = {0};
    const char *tags[16];
    double vals[16];
    int n = 0;
    char names[16][48];
    if (ev->kind == TR_EV_TRAIN) {
        tr_memory m;
        tr_memory_read(&s->device, &m);
        const char *const k[] = {"train/loss",          "train/accuracy",         "train/lr",
                                 "train/samples_per_s", "memory/allocated_bytes", "memory/reserved_bytes"};
        const double v[] = {ev->loss, ev->accuracy, ev->lr, ev->samples_per_s, (double)m.allocated, (double)m.reserved};
        n = m.reserved >= 0 ? 6 : 5;
        for (int i = 0; i < n; i++) tags[i] = k[i], vals[i] = v[i];
    } else if (ev->kind == TR_EV_EVAL && ev->metrics) {
        const tr_metrics *m = ev->metrics;
        char split[32];
        snprintf(split, sizeof split, "%s%s", ev->split, strcmp(ev->weights, "ema") == 0 ? "_ema" : "");
#define ADD(name, value)                                           \
    do {                                                           \
        snprintf(names[n], sizeof names[n], "%s/%s", split, name); \
        tags[n] = names[n];                                        \
        vals[n++] = (value);                                       \
    } while (0)
        ADD("loss", tr_metrics_loss(m));
        if (m->task == TR_TASK_CLASSIFY) {
            ADD("accuracy", tr_metrics_accuracy(m));
            if (ev->top_k > 0) ADD("top_k_accuracy", tr_metrics_topk_accuracy(m));
        } else if (m->task == TR_TASK_MULTI_LABEL) {
            ADD("accuracy", tr_metrics_accuracy(m));
            ADD("micro_f1", tr_metrics_micro_f1(m));
            ADD("macro_f1", tr_metrics_macro_f1(m));
        } else {
            ADD("mse", tr_metrics_mse(m));
            ADD("mae", tr_metrics_mae(m));
        }
#undef ADD
    } else if (ev->kind == TR_EV_END) {
        tr_tb_close(s);
        return 0;
    } else {
        return 0;
    }
    if (tr_tfevents_scalars(&s->file, now, ev->step, tags, vals, n, &e)) return fail(s, &e);
    return 0;
}

void tr_tb_close(tr_tb_sink *s)
{
    if (!s->open) return;
    tr_tfevents_close(&s->file, NULL);
    s->open = 0;
}
