/*
 * checkpoint_list.c -- a run's checkpoints by step (checkpoint.h): the newest that verifies, pruning to keep_last
 * and the top-k set, setting aside the ones a resume does not continue from.
 */
#include "checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"

/* ------------------------------------------------------------------------------------------------ listing */

int64_t *tr_ckpt_list_steps(const char *run_dir, size_t *n)
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
    int64_t *steps = tr_ckpt_list_steps(run_dir, &n);
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
        if (TR_CKPT_PATHF(path, "%s/checkpoints/step-%010lld", run_dir, (long long)steps[i]) ||
            TR_CKPT_PATHF(trash, "%s/checkpoints/.trash-step-%010lld-%ld", run_dir, (long long)steps[i], (long)getpid()))
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

int tr_checkpoint_find_latest(const char *run_dir, char *path_out, tr_ckpt_warn_fn warn, void *ctx, tr_error *err)
{
    path_out[0] = '\0';
    size_t n = 0;
    int64_t *steps = tr_ckpt_list_steps(run_dir, &n);
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
        tr_ckpt_warnf(warn, ctx, "skipping checkpoint %s: %s", dir, verr.msg);
    }
    free(steps);
    return TR_OK;
}

int tr_checkpoint_set_aside(const char *ckpt_dir, const char *label, char *to_out, size_t to_size, tr_error *err)
{
    char to[TR_PATH_MAX + 96];
    struct stat st;
    for (int k = 1; k < 10000; k++) {
        if (TR_CKPT_PATHF(to, k == 1 ? "%s.%s" : "%s.%s-%d", ckpt_dir, label, k))
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
    int64_t *steps = tr_ckpt_list_steps(run_dir, &n);
    char from[TR_PATH_MAX + 64], to[TR_PATH_MAX + 96];
    int rc = TR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        if (steps[i] <= step) continue;
        if (TR_CKPT_PATHF(from, "%s/checkpoints/step-%010lld", run_dir, (long long)steps[i])) continue;
        tr_error verr = {0};
        const char *label = tr_checkpoint_verify(from, &verr) == TR_OK ? "superseded" : "corrupt";
        if (!(rc = tr_checkpoint_set_aside(from, label, to, sizeof to, err)))
            tr_ckpt_warnf(warn, ctx, "set aside %s as %s", from, to);
    }
    free(steps);
    return rc;
}
