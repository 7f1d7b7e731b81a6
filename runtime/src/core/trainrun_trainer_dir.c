/*
 * trainrun_trainer_dir.c -- a trainer's run directory (trainrun_trainer_open_dir) and its stop requests
 * (trainrun_trainer_request_stop): the run directory's protocol as a run keeps it (run_dir.c, docs/run_directory.md)
 * -- one writer (run_lock.h), stale temporaries removed, the newest checkpoint that verifies resumed, checkpoints
 * none of which verified set aside, a fresh start's init.from weights, token data's vocab.json -- over the same
 * calls; and setting aside, when the caller says so, the checkpoint it resumed.
 */
#include "trainrun_trainer_internal.h"

#include <stdio.h>
#include <string.h>

#include "best.h"
#include "dist.h"
#include "io.h"
#include "run.h"

/* The warnings of open_dir (a checkpoint skipped or set aside, a lock this file system does not enforce), kept
 * until the libtorch lock is released and then reported as WARNING events. */
typedef struct dir_warnings {
    char msg[8][TR_PATH_MAX + 128];
    int n, dropped;
} dir_warnings;

static void keep_warning(void *ctx, const char *msg)
{
    dir_warnings *w = ctx;
    if (w->n < (int)(sizeof w->msg / sizeof *w->msg)) snprintf(w->msg[w->n++], sizeof w->msg[0], "%s", msg);
    else w->dropped++;
}

static void report_warnings(trainrun_trainer *tr, dir_warnings *w)
{
    if (!tr->fn) return;
    trainrun_event ev = {.kind = TRAINRUN_EVENT_WARNING, .step = tr->p.step};
    for (int i = 0; i < w->n; i++) {
        ev.message = w->msg[i];
        tr->fn(tr->fn_ctx, &ev);
    }
    if (!w->dropped) return;
    char more[64];
    snprintf(more, sizeof more, "%d more warnings like these", w->dropped);
    ev.message = more;
    tr->fn(tr->fn_ctx, &ev);
}

/* The directory claimed: created (with its parents) and its lock taken, then the stale temporaries of killed saves
 * removed, then what to resume from found (or the unverifiable checkpoints of a fresh start set aside), and token
 * data's vocabulary checked against it and written. */
static int claim(trainrun_trainer *tr, const char *dir, char *ckpt, dir_warnings *w)
{
    int created = 0, rc = tr_io_make_dirs(dir, &created, &tr->err);
    if (rc || (rc = tr_run_lock_acquire(&tr->dir.lock, dir, keep_warning, w, &tr->err))) return rc;
    char ckpts[TR_PATH_MAX + 16];
    tr_io_remove_stale(dir);
    if (snprintf(ckpts, sizeof ckpts, "%s/checkpoints", dir) < (int)sizeof ckpts) tr_io_remove_stale(ckpts);
    rc = trainer_find_resumable(tr, dir, ckpt, keep_warning, w);
    if (!rc && !ckpt[0]) rc = tr_checkpoint_set_aside_newer(dir, -1, keep_warning, w, &tr->err);
    /* token data open_data read already: the weights' vocabulary must be its own, before anything is loaded */
    if (!rc && tr->dir.vocab.size) rc = tr_run_dir_vocab(&tr->cfg, dir, ckpt, &tr->dir.vocab, &tr->err);
    return rc;
}

/* A fresh start's weights from init.from, as a run starts (tr_init_from_load): every rank reads them, and which
 * checkpoint a run directory stood for is said as a warning is. */
static int init_from(trainrun_trainer *tr, dir_warnings *w)
{
    char path[TR_PATH_MAX];
    const char *which = NULL;
    tr_torch_enter(NULL, 0);
    const int rc = tr_init_from_load(&tr->cfg, tr->core.model, keep_warning, w, path, &which, &tr->err);
    tr_torch_leave(NULL, 0);
    if (!rc && which) {
        char msg[TR_PATH_MAX + 96];
        snprintf(msg, sizeof msg, "init.from is a run directory: its %s checkpoint %s", which, path);
        keep_warning(w, msg);
    }
    return rc;
}

int trainrun_trainer_open_dir(trainrun_trainer *tr, const char *dir, int *resumed)
{
    int rc = trainer_begin(tr, dir, "open_dir: dir is NULL", 1);
    if (rc) return rc;
    if (resumed) *resumed = 0;
    if (tr->dir.path[0])
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "open_dir: the trainer already uses %s", tr->dir.path);
    if (tr->p.step != 0) /* resuming over steps already taken would lose them */
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "open_dir: %lld steps were taken or loaded already: call "
                            "it before the first step", (long long)tr->p.step);
    if (!dir[0] || strlen(dir) >= sizeof tr->dir.path)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "open_dir: dir is %zu bytes long: a path has 1 to %zu",
                            strlen(dir), sizeof tr->dir.path - 1);
    char ckpt[TR_PATH_MAX] = "";
    dir_warnings w = {0};
    char path[TR_PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    rc = tr_dist_is_main(&tr->dist) ? claim(tr, dir, ckpt, &w) : TRAINRUN_OK; /* rank 0 owns the directory */
    rc = tr_dist_agree(&tr->dist, rc, &tr->err); /* in a group: rank 0's refusal stops every rank */
    if (!rc) rc = tr_dist_share_paths(&tr->dist, path, ckpt, &tr->err); /* ... and its choice is every rank's */
    if (!rc && ckpt[0]) rc = trainer_load_checkpoint(tr, ckpt);
    else if (!rc && tr->cfg.init.from[0]) rc = init_from(tr, &w); /* a resume ignores init.from, as a run's */
    if (ckpt[0] || tr->cfg.init.from[0]) rc = tr_dist_agree(&tr->dist, rc, &tr->err);
    /* config.yaml and the model's copy, as a run's directory holds them: `trainrun predict DIR` and `trainrun
     * DIR/config.yaml` work on a trainer's directory too (rank 0's, as every file of it) */
    if (!rc && tr_dist_is_main(&tr->dist))
        rc = tr_run_dir_write_config(&tr->cfg, path, ckpt[0] != '\0', tr->log.open ? &tr->log.log : NULL, &tr->err);
    report_warnings(tr, &w);
    if (rc) {
        tr_run_lock_release(&tr->dir.lock); /* nothing of the directory is the trainer's: another may take it */
        return rc;
    }
    snprintf(tr->dir.path, sizeof tr->dir.path, "%s", path);
    if (ckpt[0]) {
        snprintf(tr->dir.resumed_from, sizeof tr->dir.resumed_from, "%s", ckpt);
        tr->dir.resumed_at = tr->p.step;
        tr->dir.resumed_same_config = tr_checkpoint_same_config(ckpt, &tr->cfg);
    }
    if (resumed) *resumed = ckpt[0] != '\0';
    return TRAINRUN_OK;
}

int trainer_first_step_failed(trainrun_trainer *tr, int rc, trs_status st)
{
    if (tr->dir.resumed_at < 0 || tr->p.step != tr->dir.resumed_at || !tr->dir.resumed_same_config ||
        !(st == TRS_E_NONFINITE || st == TRS_E_RUNTIME))
        return rc;
    /* The trainer cannot tell a checkpoint at fault from a batch at fault: it says what the caller may do. */
    char msg[sizeof tr->err.msg];
    snprintf(msg, sizeof msg, "%s", tr->err.msg);
    return tr_error_set(&tr->err, rc, "%s (the first step after resuming from %s, with the config that saved it: if "
                        "this batch is the one the step took before, the checkpoint is what is wrong, and "
                        "trainrun_trainer_set_aside_resumed sets it aside)", msg, tr->dir.resumed_from);
}

int trainrun_trainer_set_aside_resumed(trainrun_trainer *tr, char *path_out, size_t path_size)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (!tr->dir.resumed_from[0])
        return tr_api_invalid(&tr->err, "set_aside_resumed: open_dir resumed no checkpoint (or it is set aside)");
    char to[TR_PATH_MAX + 96];
    if (tr_checkpoint_set_aside(tr->dir.resumed_from, "unresumable", to, sizeof to, &tr->err)) return tr->err.code;
    if (path_out && path_size) snprintf(path_out, path_size, "%s", to);
    tr->dir.resumed_from[0] = '\0';
    tr->dir.set_aside_step = tr->dir.resumed_at;
    tr->dir.resumed_at = -1;
    return TRAINRUN_OK;
}

void trainrun_trainer_request_stop(trainrun_trainer *tr)
{
    if (tr) tr->stop = 1;
}

int trainrun_trainer_set_data_position(trainrun_trainer *tr, int64_t epoch, int64_t position)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (epoch < 0 || position < 0 || epoch > TR_CKPT_MAX_COUNT || position > TR_CKPT_MAX_COUNT)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "set_data_position: epoch %lld, position %lld: each must "
                            "be in [0, %lld]", (long long)epoch, (long long)position, (long long)TR_CKPT_MAX_COUNT);
    tr->p.epoch = epoch;
    tr->p.pos = position;
    return TRAINRUN_OK;
}

int trainrun_trainer_data_position(trainrun_trainer *tr, int64_t *epoch, int64_t *position)
{
    const int rc = trainer_begin(tr, epoch && position ? tr : NULL, "data_position: epoch or position is NULL", 0);
    if (rc) return rc;
    *epoch = tr->p.epoch;
    *position = tr->p.pos;
    return TRAINRUN_OK;
}
