/*
 * dist.c -- data-parallel runs over the shim's process group (see dist.h).
 */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int tr_dist_code(trs_status st) { return st == TRS_E_DIST ? TR_E_PEER : TR_E_RUNTIME; }

static int dist_fail(const tr_dist *d, trs_status st, const char *what, tr_error *err)
{
    return tr_error_set(err, tr_dist_code(st), "%s: %s", what, trs_dist_errmsg(d->pg));
}

int tr_dist_open(tr_dist *d, const tr_config *cfg, int (*should_stop)(void *ctx), void *ctx, tr_error *err)
{
    memset(d, 0, sizeof *d);
    d->world_size = 1;
    const char *ws = getenv("WORLD_SIZE");
    if (!ws || !*ws || strcmp(ws, "1") == 0) return TR_OK;
    const trs_status st = trs_dist_create_from_env(cfg->dist.timeout_seconds, should_stop, ctx, &d->pg);
    if (st != TRS_OK)
        return tr_error_set(err,
                            st == TRS_E_INVALID   ? TR_E_CONFIG
                            : st == TRS_E_STOPPED ? TR_E_SIGNAL
                                                  : tr_dist_code(st),
                            "distributed set-up: %s", trs_last_error());
    trs_dist_info(d->pg, &d->rank, &d->world_size, NULL);
    return TR_OK;
}

void tr_dist_close(tr_dist *d)
{
    trs_dist_free(d->pg);
    d->pg = NULL;
}

int tr_dist_is_main(const tr_dist *d) { return d->rank == 0; }

int tr_dist_agree(tr_dist *d, int rc, tr_error *err)
{
    if (!d->pg) return rc;
    int64_t *codes = calloc((size_t)d->world_size, sizeof *codes);
    if (!codes) return tr_error_set(err, TR_E_RUNTIME, "out of memory");
    codes[d->rank] = rc;
    const trs_status st = trs_dist_allreduce_int64(d->pg, codes, (size_t)d->world_size);
    int out = rc;
    if (st != TRS_OK) {
        if (!rc) out = dist_fail(d, st, "agreeing on set-up", err);
    } else if (!rc) {
        for (int r = 0; r < d->world_size && !out; r++)
            if (codes[r]) out = tr_error_set(err, (int)codes[r], "rank %d failed during set-up (exit code %d); see "
                                                                 "its message", r, (int)codes[r]);
    }
    free(codes);
    return out;
}

/* All-gather n bytes from every rank into a new buffer (*all), or an error naming `what`. */
static int gather_bytes(tr_dist *d, const void *mine, size_t n, unsigned char **all, const char *what, tr_error *err)
{
    *all = malloc(n * (size_t)d->world_size);
    if (!*all) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", what);
    const trs_status st = trs_dist_allgather_bytes(d->pg, mine, n, *all);
    if (st == TRS_OK) return TR_OK;
    free(*all);
    *all = NULL;
    return dist_fail(d, st, what, err);
}

int tr_dist_share_paths(tr_dist *d, char *run_dir, char *resume_from, tr_error *err)
{
    if (!d->pg) return TR_OK;
    const size_t n = 2 * TR_PATH_MAX;
    char *mine = calloc(1, n);
    unsigned char *all = NULL;
    if (!mine) return tr_error_set(err, TR_E_RUNTIME, "sharing the run directory: out of memory");
    memcpy(mine, run_dir, strnlen(run_dir, TR_PATH_MAX - 1));
    memcpy(mine + TR_PATH_MAX, resume_from, strnlen(resume_from, TR_PATH_MAX - 1));
    const int rc = gather_bytes(d, mine, n, &all, "sharing the run directory", err);
    free(mine);
    if (rc) return rc;
    memcpy(run_dir, all, TR_PATH_MAX); /* rank 0's strings, at the start of `all` */
    memcpy(resume_from, all + TR_PATH_MAX, TR_PATH_MAX);
    run_dir[TR_PATH_MAX - 1] = resume_from[TR_PATH_MAX - 1] = '\0';
    free(all);
    return TR_OK;
}

int64_t tr_dist_shard_size(const tr_dist *d, int64_t n)
{
    return d->world_size > 1 ? (n + d->world_size - 1) / d->world_size : n; /* zeroed: one process */
}

int64_t tr_dist_shard(const tr_dist *d, int64_t *order, int64_t n, int64_t *scratch)
{
    if (d->world_size <= 1 || n <= 0) return n;
    memcpy(scratch, order, (size_t)n * sizeof *scratch);
    const int64_t len = tr_dist_shard_size(d, n), w = d->world_size;
    for (int64_t i = 0; i < len; i++) order[i] = scratch[(i * w + d->rank) % n];
    return len;
}

int tr_dist_sync_model(tr_dist *d, trs_model *model, tr_error *err)
{
    if (!d->pg) return TR_OK;
    const trs_status st = trs_dist_broadcast_model(d->pg, model);
    return st == TRS_OK ? TR_OK : dist_fail(d, st, "broadcasting rank 0's parameters", err);
}

int tr_dist_reduce_step(tr_dist *d, trs_step_result *r, int requests, tr_error *err)
{
    d->agreed = requests;
    if (!d->pg) return TR_OK;
    const double t0 = tr_now();
    /* One all-reduce of doubles per step (each collective costs a round trip): the loss sum, then counts and
     * request flags, which are integers far below 2^53 and so add exactly in double. */
    double all[7] = {r->loss * (double)r->samples, (double)r->samples, (double)r->correct,
                     requests & TR_DIST_STOP ? 1.0 : 0.0, requests & TR_DIST_WATCHDOG ? 1.0 : 0.0,
                     requests & TR_DIST_CHECKPOINT ? 1.0 : 0.0, (double)r->targets};
    const trs_status st = trs_dist_allreduce_double(d->pg, all, 7);
    d->scalar_seconds += tr_now() - t0;
    if (st != TRS_OK) return dist_fail(d, st, "all-reducing the step's loss and counts", err);
    r->samples = (int64_t)all[1];
    r->correct = (int64_t)all[2];
    r->targets = (int64_t)all[6]; /* the labels counted: a step's accuracy is correct over these, every rank's */
    r->loss = all[1] > 0 ? all[0] / all[1] : 0.0;
    d->agreed = (all[3] > 0 ? TR_DIST_STOP : 0) | (all[4] > 0 ? TR_DIST_WATCHDOG : 0) |
                (all[5] > 0 ? TR_DIST_CHECKPOINT : 0);
    return TR_OK;
}

/* Every rank's own CUDA device's generator state into p->rank_cuda_rng. */
static int gather_cuda_rng(tr_dist *d, tr_ckpt_progress *p, int cuda_index, tr_error *err)
{
    size_t n = 0;
    if (trs_cuda_rng_state_size(cuda_index, &n) != TRS_OK)
        return tr_error_set(err, TR_E_RUNTIME, "rng: CUDA generator %d: %s", cuda_index, trs_last_error());
    unsigned char *mine = malloc(n), *all = NULL;
    int rc = mine ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "rng: out of memory");
    if (!rc && trs_cuda_rng_get_state(cuda_index, mine, n) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "rng: CUDA generator %d: %s", cuda_index, trs_last_error());
    if (!rc) rc = gather_bytes(d, mine, n, &all, "gathering every rank's CUDA generator state", err);
    free(mine);
    if (rc) return rc;
    p->rank_cuda_rng = all;
    p->rank_cuda_rng_bytes = n;
    return TR_OK;
}

int tr_dist_gather_rng(tr_dist *d, tr_ckpt_progress *p, int cuda_index, tr_error *err)
{
    p->world_size = d->world_size;
    if (!d->pg) return TR_OK;
    size_t n = 0;
    if (trs_rng_state_size(&n) != TRS_OK) return tr_error_set(err, TR_E_RUNTIME, "rng: %s", trs_last_error());
    unsigned char *mine = malloc(n), *all = NULL;
    int rc = mine ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "rng: out of memory");
    if (!rc && trs_rng_get_state(mine, n) != TRS_OK) rc = tr_error_set(err, TR_E_RUNTIME, "rng: %s", trs_last_error());
    if (!rc) rc = gather_bytes(d, mine, n, &all, "gathering every rank's generator state", err);
    free(mine);
    if (rc) return rc;
    tr_dist_free_rng(p);
    p->rank_rng = all;
    p->rank_rng_bytes = n;
    return cuda_index >= 0 ? gather_cuda_rng(d, p, cuda_index, err) : TR_OK;
}

void tr_dist_free_rng(tr_ckpt_progress *p)
{
    free((void *)p->rank_rng);
    free((void *)p->rank_cuda_rng);
    p->rank_rng = p->rank_cuda_rng = NULL;
    p->rank_rng_bytes = p->rank_cuda_rng_bytes = 0;
}

int tr_dist_restore_rng(tr_dist *d, const char *ckpt_dir, int saved_world_size, int cuda_index, tr_ckpt_warn_fn warn,
                        void *ctx, tr_error *err)
{
    if (saved_world_size != d->world_size && (saved_world_size > 1 || d->world_size > 1)) {
        char msg[256];
        snprintf(msg, sizeof msg, "the checkpoint was saved by %d rank(s), this run has %d: every rank continues "
                                  "from rank 0's generator state, and the global batch and data shards differ",
                 saved_world_size, d->world_size);
        if (warn) warn(ctx, msg);
        return TR_OK;
    }
    if (d->rank == 0) return TR_OK; /* tr_checkpoint_load restored "cpu_generator", rank 0's */
    char file[TR_PATH_MAX + 32], name[48];
    snprintf(file, sizeof file, "%s/rng.safetensors", ckpt_dir);
    snprintf(name, sizeof name, "cpu_generator.rank%d", d->rank);
    tr_st_file f = {0};
    int rc = tr_st_read(file, &f, err);
    if (rc) return rc;
    const tr_st_tensor *t = tr_st_find(&f, name);
    if (!t || t->dtype != TR_ST_U8) rc = tr_error_set(err, TR_E_RUNTIME, "%s: no U8 tensor '%s'", file, name);
    else if (trs_rng_set_state(tr_st_data(&f, t), t->nbytes) != TRS_OK)
        rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s: %s", file, name, trs_last_error());
    if (!rc && cuda_index >= 0) { /* this rank's own device's generator, saved by the gather */
        snprintf(name, sizeof name, "cuda_generator.rank%d", d->rank);
        if (!(t = tr_st_find(&f, name))) {
            char msg[TR_PATH_MAX + 256];
            snprintf(msg, sizeof msg, "%s holds no '%s' (saved on the CPU or by an older trainrun): rank %d's CUDA "
                                      "generator continues from rank 0's view of device %d", file, name, d->rank,
                     cuda_index);
            if (warn) warn(ctx, msg);
        } else if (t->dtype != TR_ST_U8 || trs_cuda_rng_set_state(cuda_index, tr_st_data(&f, t), t->nbytes) != TRS_OK) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: %s: %s", file, name, trs_last_error());
        }
    }
    tr_st_close(&f);
    return rc;
}

int tr_dist_log_open(const tr_dist *d, tr_log *log, const tr_config *cfg, const char *run_dir, int64_t total_steps,
                     tr_error *err)
{
    if (d->rank == 0) return tr_log_open(log, cfg, run_dir, total_steps, err);
    tr_log_reset(log);
    log->jsonl = fopen("/dev/null", "w");
    if (!log->jsonl) return tr_error_set(err, TR_E_RUNTIME, "/dev/null: cannot open for writing");
    log->console = log->jsonl;
    log->total_steps = total_steps;
    log->t_start = log->t_last_print = tr_clock_now(&log->clock);
    log->last_val_acc = -1.0;
    return TR_OK;
}
