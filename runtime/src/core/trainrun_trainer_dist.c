/*
 * trainrun_trainer_dist.c -- a trainer in a data-parallel group (trainrun_trainer_init_process_group): the
 * semantics of a run's (dist.h, after DistributedDataParallel) for the caller's loop. Every rank builds the same
 * model and takes rank 0's parameters; a train step averages the gradients over the ranks and all-reduces its
 * scalars (the loss over every rank's samples, the counts summed) together with each rank's requests -- a stop,
 * the watchdog's limit, the checkpoint interval -- so every rank decides the same thing at the same step; rank 0
 * alone writes the run directory, the log and the checkpoints, which carry every rank's generator.
 */
#include "trainrun_trainer_internal.h"

#include <string.h>

#include "dist.h"

int trainrun_trainer_init_process_group(trainrun_trainer *tr)
{
    int rc = trainer_begin(tr, NULL, NULL, 1);
    if (rc) return rc;
    if (tr->dist.world_size > 0) return tr_api_invalid(&tr->err, "init_process_group: called already");
    if (tr->p.step != 0 || tr->dir.path[0])
        return tr_api_invalid(&tr->err, "init_process_group: call it after open, before open_dir and the first step");
    if ((rc = tr_dist_open(&tr->dist, &tr->cfg, NULL, NULL, &tr->err))) return rc;
    tr_torch_enter(NULL, 0);
    rc = tr_dist_sync_model(&tr->dist, tr->core.model, &tr->err); /* rank 0's parameters and buffers */
    tr_torch_leave(NULL, 0);
    if (rc) return rc;
    tr->core.step_opts.dist = tr->dist.pg; /* NULL alone: the train step averages over this group */
    tr->core.step_opts.dist_bucket_bytes = (size_t)(tr->cfg.dist.bucket_cap_mb * 1024.0 * 1024.0);
    return TRAINRUN_OK;
}

int trainrun_trainer_rank(trainrun_trainer *tr, int *rank, int *world_size)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (rank) *rank = tr->dist.rank;
    if (world_size) *world_size = tr->dist.world_size > 0 ? tr->dist.world_size : 1;
    return TRAINRUN_OK;
}

int trainer_requests(const trainrun_trainer *tr, double elapsed)
{
    return (tr->stop ? TR_DIST_STOP : 0) | (tr->wd_pending ? TR_DIST_WATCHDOG : 0) |
           (tr_ckpt_policy_interval_due(&tr->ckpt, elapsed) ? TR_DIST_CHECKPOINT : 0);
}

int trainer_agreed(const trainrun_trainer *tr, int request, double elapsed)
{
    return (tr->dist.pg ? tr->dist.agreed : trainer_requests(tr, elapsed)) & request;
}
