/*
 * checkpoint_validate.c -- a checkpoint's trainer.json checked as a whole (tr_ckpt_validate, checkpoint.h): after
 * tr_ckpt_parse_trainer has checked every field on its own, that the fields agree with each other, with the config
 * that saved the checkpoint and with the checkpoints beside it -- values a real run can produce, and nothing that
 * would make a resumed run do something the uninterrupted one would not. Pure C over the parsed structs, no
 * libtorch: the fuzz harness links it with checkpoint_meta.c.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "io.h"
#include "monitor.h"

#define FAIL(...) tr_error_set(err, TR_E_RUNTIME, __VA_ARGS__)

/* Whether v is a value the metric can take: accuracies and F1 scores in [0, 1], losses and errors >= 0; finite. */
static int in_metric_range(tr_monitor_metric metric, double v)
{
    if (!isfinite(v)) return 0;
    switch (metric) {
    case TR_MON_ACCURACY:
    case TR_MON_TOP_K_ACCURACY:
    case TR_MON_MICRO_F1:
    case TR_MON_MACRO_F1: return v >= 0.0 && v <= 1.0;
    default: return v >= 0.0;
    }
}

static const char *metric_range_text(tr_monitor_metric metric)
{
    return metric == TR_MON_LOSS || metric == TR_MON_MSE || metric == TR_MON_MAE ? "a finite value >= 0" : "[0, 1]";
}

/* The open log window: a sum of losses of as many steps as it counts, and no more correct targets than samples
 * (x targets per sample: the block's positions for token data). `positions` 0: not known. */
static int check_window(const tr_ckpt_progress *p, int64_t positions, int run, const char *file, tr_error *err)
{
    if (!isfinite(p->win_loss) || p->win_loss < 0)
        return FAIL("%s: field log_window.loss_sum: %g is not a sum of losses (finite, >= 0)", file, p->win_loss);
    if (p->win_steps == 0 && (p->win_samples != 0 || p->win_correct != 0 || p->win_loss != 0))
        return FAIL("%s: field log_window.samples: a window of 0 steps holds %lld samples, %lld correct and a loss "
                    "sum of %g",
                    file, (long long)p->win_samples, (long long)p->win_correct, p->win_loss);
    if (p->win_samples == 0 && p->win_correct != 0)
        return FAIL("%s: field log_window.correct: %lld correct of 0 samples", file, (long long)p->win_correct);
    if (positions > 0 && p->win_correct / positions + (p->win_correct % positions != 0) > p->win_samples)
        return FAIL("%s: field log_window.correct: %lld correct of %lld samples x %lld target%s each", file,
                    (long long)p->win_correct, (long long)p->win_samples, (long long)positions,
                    positions == 1 ? "" : "s");
    if (run && p->win_samples > p->samples_total)
        return FAIL("%s: field log_window.samples: %lld, more than the run's samples_total %lld", file,
                    (long long)p->win_samples, (long long)p->samples_total);
    if (run && p->epoch_samples > 0 && p->win_samples < p->win_steps)
        return FAIL("%s: field log_window.samples: %lld samples in %lld steps (every step takes at least one)", file,
                    (long long)p->win_samples, (long long)p->win_steps);
    return TR_OK;
}

/* Totals that must agree with the step count and with each other: time in train steps is part of the training
 * time; no step, no samples; an evaluation behind every evaluated figure. */
static int check_totals(const tr_ckpt_progress *p, int run, const char *file, tr_error *err)
{
    if (p->step_seconds > p->elapsed * (1.0 + 1e-9) + 1e-9)
        return FAIL("%s: field step_seconds: %.17g s inside train steps, more than the %.17g s of training "
                    "(elapsed_seconds) they are part of",
                    file, p->step_seconds, p->elapsed);
    if (p->step == 0 && (p->samples_total != 0 || p->step_seconds != 0))
        return FAIL("%s: field samples_total: %lld samples and %g s in train steps before the first step", file,
                    (long long)p->samples_total, p->step_seconds);
    if (run && p->epoch_samples > 0 && p->samples_total < p->step)
        return FAIL("%s: field samples_total: %lld samples in %lld steps (every step takes at least one)", file,
                    (long long)p->samples_total, (long long)p->step);
    if (p->has_val && p->evals_done < 1) return FAIL("%s: field has_val: true, but evals_done is 0", file);
    return TR_OK;
}

/*
 * Where the loader's cursor stands after k steps of `bs` samples from (e0, p0), in epochs of n samples (drop_last:
 * only whole batches), as run_loader.c moves it: a step at an epoch's end starts the next epoch at 0; a step takes
 * min(bs, n - pos) samples; the epoch ends at pos >= min(steps_per_epoch x bs, n). *consumed: samples taken. 0, or
 * -1 when it cannot be computed (an epoch of no whole batch, an overflow).
 */
static int advance(int64_t e0, int64_t p0, int64_t k, int64_t bs, int64_t n, int drop_last, int64_t *e, int64_t *pos,
                   int64_t *consumed)
{
    const int64_t spe = drop_last ? n / bs : n / bs + (n % bs != 0);
    if (spe < 1) return -1;
    const int64_t end = spe * bs < n ? spe * bs : n; /* spe * bs <= n + bs: no overflow below 2^62 */
    *e = e0, *pos = p0, *consumed = 0;
    if (k == 0) return 0;
    if (*pos >= end) ++*e, *pos = 0;
    const int64_t left = (end - *pos + bs - 1) / bs; /* steps this epoch still has */
    const int64_t first_end = *pos + left * bs < n ? *pos + left * bs : n;
    if (k <= left) {
        const int64_t to = *pos + k * bs < n ? *pos + k * bs : n;
        *consumed = to - *pos;
        *pos = to;
        return 0;
    }
    *consumed = first_end - *pos;
    k -= left;
    const int64_t full = (k - 1) / spe, r = (k - 1) % spe + 1; /* whole epochs, then r steps into the next */
    int64_t whole;
    if (__builtin_mul_overflow(full, end, &whole) || __builtin_add_overflow(*e, 1 + full, e)) return -1;
    *pos = r * bs < n ? r * bs : n;
    if (__builtin_add_overflow(*consumed, whole, consumed) || __builtin_add_overflow(*consumed, *pos, consumed))
        return -1;
    return 0;
}

/* The data cursor (epoch, position) and samples_total follow from the step: from the cursor's origin, every step
 * moved it by one batch of the recorded geometry (checkpoint.h, "cursor"). */
static int check_cursor(const tr_ckpt_progress *p, const tr_config *saved, const char *file, tr_error *err)
{
    if (p->epoch_samples < 1) return TR_OK; /* the caller's batches: no epochs, nothing to follow from */
    int64_t bs = p->step_samples;
    int drop_last = p->drop_last;
    if (saved) {
        const int64_t want = saved->train.batch_size * saved->train.accumulate_steps;
        if (bs > 0 && (bs != want || drop_last != (saved->train.drop_last != 0)))
            return FAIL("%s: field cursor.step_samples: %lld samples a step (drop_last %s), but the config it was "
                        "saved with takes %lld (train.batch_size x accumulate_steps, drop_last %s)",
                        file, (long long)bs, drop_last ? "true" : "false", (long long)want,
                        saved->train.drop_last ? "true" : "false");
        if (bs == 0) bs = want, drop_last = saved->train.drop_last != 0; /* an older checkpoint: origin 0 */
    }
    if (bs < 1) return TR_OK; /* an older checkpoint whose config is unknown */
    if (p->origin_pos > p->epoch_samples)
        return FAIL("%s: field cursor.origin.position: %lld is past the end of the epoch (%lld samples)", file,
                    (long long)p->origin_pos, (long long)p->epoch_samples);
    int64_t e, pos, consumed;
    if (advance(p->origin_epoch, p->origin_pos, p->step - p->origin_step, bs, p->epoch_samples, drop_last, &e, &pos,
                &consumed))
        return TR_OK; /* no whole batch fits an epoch of this rank: a geometry the loader itself cannot step */
    if (e != p->epoch || pos != p->pos)
        return FAIL("%s: field %s: epoch %lld, position %lld after step %lld, but %lld steps of %lld samples from "
                    "the cursor's origin (step %lld: epoch %lld, position %lld) in epochs of %lld samples%s end at "
                    "epoch %lld, position %lld",
                    file, e != p->epoch ? "epoch" : "position", (long long)p->epoch, (long long)p->pos,
                    (long long)p->step, (long long)(p->step - p->origin_step), (long long)bs, (long long)p->origin_step,
                    (long long)p->origin_epoch, (long long)p->origin_pos, (long long)p->epoch_samples,
                    drop_last ? " (drop_last)" : "", (long long)e, (long long)pos);
    const int64_t ws = p->world_size > 1 ? p->world_size : 1;
    int64_t want;
    if (__builtin_mul_overflow(consumed, ws, &want) || __builtin_add_overflow(want, p->origin_samples, &want) ||
        want != p->samples_total)
        return FAIL("%s: field samples_total: %lld, but the cursor's steps since its origin took %lld samples on "
                    "each of %lld rank%s after the origin's %lld",
                    file, (long long)p->samples_total, (long long)consumed, (long long)ws, ws == 1 ? "" : "s",
                    (long long)p->origin_samples);
    return TR_OK;
}

/* Learning rates a schedule can reach: every schedule stays at or below its base lr (optim.lr), the plateau's
 * too (it starts there and only reduces). */
static int check_lr(const tr_ckpt_progress *p, const tr_ckpt_meta *m, const tr_config *saved, const char *file,
                    tr_error *err)
{
    if (!saved) return TR_OK;
    const double base = saved->optim.lr, top = base * (1.0 + 1e-12); /* a cosine's first value rounds to base */
    if (m->lr_max > top)
        return FAIL("%s: field param_groups[].lr: %.17g, above the optim.lr %.17g of the config it was saved with "
                    "(config_yaml): no schedule goes above its base lr",
                    file, m->lr_max, base);
    if (p->sel.plateau_metric[0] && p->sel.plateau.lr > top)
        return FAIL("%s: field selection.plateau.lr: %.17g, above the optim.lr %.17g it starts from (the plateau "
                    "schedule only reduces it)",
                    file, p->sel.plateau.lr, base);
    return TR_OK;
}

/* A monitor name that parses (monitor.h), its metric into *metric. */
static int monitor_metric(const char *name, const char *key, tr_monitor_metric *metric, const char *file, tr_error *err)
{
    tr_monitor mon;
    char why[256];
    if (tr_monitor_parse(name, &mon, why, sizeof why)) return FAIL("%s: field %s: %s", file, key, why);
    *metric = mon.metric;
    return TR_OK;
}

/* The directory of checkpoint `step` beside ckpt_dir (its parent's step-NNNNNNNNNN) exists. */
static int sibling_exists(const char *ckpt_dir, int64_t step, char *path, size_t n)
{
    const char *slash = strrchr(ckpt_dir, '/');
    const int len = slash ? (int)(slash - ckpt_dir) : 1;
    snprintf(path, n, "%.*s/step-%010lld", len, slash ? ckpt_dir : ".", (long long)step);
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int tr_ckpt_best_json(const char *run_dir, char monitor[TR_MONITOR_NAME], int *mode_max, tr_topk *steps)
{
    steps->n = 0;
    monitor[0] = '\0';
    *mode_max = 0;
    char path[TR_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/best.json", run_dir) >= (int)sizeof path) return 0;
    unsigned char *text = NULL;
    size_t n = 0;
    tr_error ignore = {0}; /* no best.json, or one over 1 MiB: no selection to read */
    if (tr_io_read_file(path, 1 << 20, &text, &n, &ignore) != TR_OK) return 0;
    cJSON *o = cJSON_Parse((const char *)text);
    free(text);
    const cJSON *mon = cJSON_GetObjectItemCaseSensitive(o, "monitor"),
                *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
    if (cJSON_IsString(mon) && strlen(mon->valuestring) < TR_MONITOR_NAME)
        snprintf(monitor, TR_MONITOR_NAME, "%s", mon->valuestring);
    *mode_max = cJSON_IsString(mode) && strcmp(mode->valuestring, "max") == 0;
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(o, "top_k"), *e;
    const cJSON *list = cJSON_IsArray(top) ? top : NULL;
    const cJSON *named[TR_TOPK_MAX + 1];
    int k = 0;
    named[k++] = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "best"), "step");
    cJSON_ArrayForEach(e, list)
    {
        if (k == TR_TOPK_MAX + 1) break;
        named[k++] = cJSON_GetObjectItemCaseSensitive(e, "step");
    }
    for (int i = 0; i < k && steps->n < TR_TOPK_MAX; i++) {
        const cJSON *v = named[i];
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > (double)TR_CKPT_MAX_STEP ||
            v->valuedouble != floor(v->valuedouble) || tr_topk_has(steps, (int64_t)v->valuedouble))
            continue;
        steps->step[steps->n] = (int64_t)v->valuedouble;
        steps->score[steps->n++] = 0;
    }
    cJSON_Delete(o);
    return steps->n;
}

/* The run directory of a checkpoint directory RUN/checkpoints/step-N: its parent's parent, into out[n]; 0 when the
 * path does not look like that. */
static int run_dir_of(const char *ckpt_dir, char *out, size_t n)
{
    const char *last = strrchr(ckpt_dir, '/');
    if (!last) return 0;
    const char *mid = last;
    while (mid > ckpt_dir && mid[-1] != '/') mid--;
    if (mid == ckpt_dir || (size_t)(last - mid) != strlen("checkpoints") || strncmp(mid, "checkpoints", 11) != 0)
        return 0;
    const int len = (int)(mid - 1 - ckpt_dir);
    return snprintf(out, n, "%.*s", len > 0 ? len : 1, len > 0 ? ckpt_dir : "/") < (int)n;
}

/* Model selection's state: names that parse, scores and bests its metric can take, top-k entries whose checkpoints
 * are on disk, and -- for a run's checkpoint whose config selects -- the state for it present. */
static int check_selection(const tr_ckpt_progress *p, const tr_config *saved, int run, const char *ckpt_dir,
                           const char *file, tr_error *err)
{
    const tr_select_state *s = &p->sel;
    tr_monitor_metric metric = TR_MON_LOSS;
    int rc;
    if (run && saved && saved->checkpoint.monitor[0] &&
        (strcmp(s->topk_metric, saved->checkpoint.monitor) || s->topk_max != (saved->checkpoint.mode == TR_MODE_MAX)))
        return FAIL("%s: field selection.checkpoint: %s%s%s, but the config it was saved with keeps the best by %s "
                    "(checkpoint.monitor, mode %s): without that state the best checkpoints would be pruned as old "
                    "ones",
                    file, s->topk_metric[0] ? "kept by " : "missing", s->topk_metric,
                    s->topk_metric[0] ? (s->topk_max ? " (max)" : " (min)") : "", saved->checkpoint.monitor,
                    saved->checkpoint.mode == TR_MODE_MAX ? "max" : "min");
    if (run && saved && saved->early_stopping.monitor[0] &&
        (strcmp(s->es_metric, saved->early_stopping.monitor) ||
         s->es_max != (saved->early_stopping.mode == TR_MODE_MAX)))
        return FAIL("%s: field selection.early_stopping: %s%s, but the config it was saved with stops early on %s "
                    "(early_stopping.monitor)",
                    file, s->es_metric[0] ? "kept for " : "missing", s->es_metric, saved->early_stopping.monitor);
    if (run && saved && saved->schedule.name == TR_SCHED_PLATEAU && strcmp(s->plateau_metric, saved->schedule.monitor))
        return FAIL("%s: field selection.plateau: %s%s, but the config it was saved with reduces the lr on a plateau "
                    "of %s (schedule.monitor)",
                    file, s->plateau_metric[0] ? "kept for " : "missing", s->plateau_metric, saved->schedule.monitor);
    if (s->topk_metric[0]) {
        if ((rc = monitor_metric(s->topk_metric, "selection.checkpoint.monitor", &metric, file, err))) return rc;
        if (s->topk.n > p->evals_done)
            return FAIL("%s: field selection.checkpoint.top_k: %d entries, but only %lld evaluations ran", file,
                        s->topk.n, (long long)p->evals_done);
        char run_dir[TR_PATH_MAX], best_monitor[TR_MONITOR_NAME];
        int best_max = 0;
        tr_topk named;
        if (s->topk.n == 0 && run_dir_of(ckpt_dir, run_dir, sizeof run_dir) &&
            tr_ckpt_best_json(run_dir, best_monitor, &best_max, &named) && strcmp(best_monitor, s->topk_metric) == 0 &&
            best_max == s->topk_max)
            for (int i = 0; i < named.n; i++) {
                char path[TR_PATH_MAX + 32];
                /* an entry is in every later checkpoint's set until a better one evicts it: never none at all */
                if (named.step[i] <= p->step &&
                    (named.step[i] == p->step || sibling_exists(ckpt_dir, named.step[i], path, sizeof path)))
                    return FAIL("%s: field selection.checkpoint.top_k: empty, but %s/best.json names step %lld, a "
                                "checkpoint before this one, among the best by %s: a set that held it cannot have "
                                "become empty",
                                file, run_dir, (long long)named.step[i], s->topk_metric);
            }
        for (int i = 0; i < s->topk.n; i++) {
            char path[TR_PATH_MAX + 32];
            if (!in_metric_range(metric, s->topk.score[i]))
                return FAIL("%s: field selection.checkpoint.top_k[%d].score: %.17g is not a %s (%s)", file, i,
                            s->topk.score[i], s->topk_metric, metric_range_text(metric));
            if (s->topk.step[i] != p->step && !sibling_exists(ckpt_dir, s->topk.step[i], path, sizeof path))
                return FAIL("%s: field selection.checkpoint.top_k[%d].step: %lld, but there is no checkpoint %s (the "
                            "best checkpoints are never pruned)",
                            file, i, (long long)s->topk.step[i], path);
        }
    }
    if (s->es_metric[0]) {
        if ((rc = monitor_metric(s->es_metric, "selection.early_stopping.monitor", &metric, file, err))) return rc;
        const double start = s->es_max ? -INFINITY : INFINITY;
        if (s->es.best_step < 0 && s->es.best != start)
            return FAIL("%s: field selection.early_stopping.best: %g without a best step (it starts at %g)", file,
                        s->es.best, start);
        if (s->es.best_step >= 0 && !in_metric_range(metric, s->es.best))
            return FAIL("%s: field selection.early_stopping.best: %.17g is not a %s (%s)", file, s->es.best,
                        s->es_metric, metric_range_text(metric));
        if (s->es.best_step >= 0 && p->evals_done < 1)
            return FAIL("%s: field selection.early_stopping.best_step: %lld, but no evaluation ran", file,
                        (long long)s->es.best_step);
    }
    if (s->plateau_metric[0]) {
        if ((rc = monitor_metric(s->plateau_metric, "selection.plateau.monitor", &metric, file, err))) return rc;
        const int known = saved && saved->schedule.name == TR_SCHED_PLATEAU;
        const double start = known && saved->schedule.mode == TR_MODE_MAX ? -INFINITY : INFINITY;
        const int initial = known ? s->plateau.best == start : isinf(s->plateau.best);
        if (!initial && !in_metric_range(metric, s->plateau.best))
            return FAIL("%s: field selection.plateau.best: %.17g is not a %s (%s)%s", file, s->plateau.best,
                        s->plateau_metric, metric_range_text(metric), known ? ", nor where the schedule starts" : "");
    }
    return TR_OK;
}

/* The last figures a checkpoint reports: a mean training loss (finite, >= 0) and the last evaluation's loss and
 * accuracy (a diverged evaluation may have left NaN or infinity; never a negative loss or an accuracy past 1). */
static int check_figures(const tr_ckpt_progress *p, const char *file, tr_error *err)
{
    if (!isfinite(p->last_loss) || p->last_loss < 0)
        return FAIL("%s: field last_loss: %g is not a mean loss (finite, >= 0)", file, p->last_loss);
    if (p->has_val && p->val_loss < 0) return FAIL("%s: field val_loss: %g is negative", file, p->val_loss);
    if (p->has_val && (p->val_accuracy < 0 || p->val_accuracy > 1))
        return FAIL("%s: field val_accuracy: %g is outside [0, 1]", file, p->val_accuracy);
    return TR_OK;
}

int tr_ckpt_validate(const tr_ckpt_progress *p, const tr_ckpt_meta *m, const tr_config *saved, const char *ckpt_dir,
                     const char *file, tr_error *err)
{
    /* The embedding trainer's checkpoints (trainrun_trainer_save) carry a step of the caller's loop: no cursor,
     * schedule or selection of a run to agree with. */
    const int run = strcmp(m->reason, "trainer") != 0;
    const int tokens = saved && (saved->data.format == TR_DATA_TEXT || saved->data.format == TR_DATA_TOKENS);
    const int64_t positions = saved ? (tokens ? saved->data.block_size : 1) : 0;
    int rc = check_window(p, positions, run, file, err);
    if (!rc) rc = check_totals(p, run, file, err);
    if (!rc && run) rc = check_cursor(p, saved, file, err);
    if (!rc && run) rc = check_lr(p, m, saved, file, err);
    if (!rc) rc = check_selection(p, saved, run, ckpt_dir, file, err);
    if (!rc) rc = check_figures(p, file, err);
    return rc;
}
