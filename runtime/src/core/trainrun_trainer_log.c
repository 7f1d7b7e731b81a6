/*
 * trainrun_trainer_log.c -- a trainer's log (trainrun_trainer_open_log): its events into the sinks a run writes,
 * in the run's formats -- metrics.jsonl (log.h: train windows every log.every_steps steps, evaluations, saves,
 * watchdog reports, a resume), metrics.csv beside it (history.h), TensorBoard's events file with log.tensorboard
 * (tensorboard.h), the console's progress line -- so that `trainrun plot`, `trainrun compare` and TensorBoard read
 * a custom loop's run directory as they read a run's.
 */
#include "trainrun_trainer_internal.h"

#include <stdio.h>
#include <string.h>

#include "dist.h"
#include "run.h"

static void log_warning(void *ctx, const char *msg) { tr_log_message(ctx, "warning: %s", msg); }

static void on_record(void *ctx, const char *line)
{
    trainrun_trainer *tr = ctx;
    tr_csv_sink_record(&tr->log.csv, line);
}

void trainer_log_event(trainrun_trainer *tr, const tr_event *e)
{
    if (!tr->log.open) return;
    tr_log_event(&tr->log.log, e);
    if (tr_tb_event(&tr->log.tb, e)) tr_log_message(&tr->log.log, "warning: %s", tr->log.tb.warning);
}

/* Close the open window into a train record (tr_log_window_close, as a run closes its own). */
static void log_window(trainrun_trainer *tr, double lr, int partial)
{
    if (tr->p.win_steps == 0) return;
    const double now = trainer_now(tr);
    const tr_event ev = tr_log_window_close(&tr->p, lr, now - tr->log.win_t0, tr->log.labels_per_sample, partial);
    trainer_log_event(tr, &ev);
    tr->log.win_t0 = now;
}

void trainer_log_step(trainrun_trainer *tr, const trs_step_result *r, double lr)
{
    if (!tr->log.open) return;
    /* token data: accuracy counts positions (the step's targets per sample) */
    if (r->samples > 0 && r->targets > 0) tr->log.labels_per_sample = (double)r->targets / (double)r->samples;
    tr->p.samples_total += r->samples;
    tr_log_window_add(&tr->p, r);
    if (tr->p.step % tr->cfg.log.every_steps == 0 || tr->p.step == tr->log.total_steps) log_window(tr, lr, 0);
}

int trainrun_trainer_open_log(trainrun_trainer *tr, int64_t total_steps)
{
    int rc = trainer_begin(tr, NULL, NULL, 1);
    if (rc) return rc;
    if (!tr->dir.path[0])
        return tr_api_invalid(&tr->err, "open_log: the trainer has no run directory (trainrun_trainer_open_dir)");
    if (tr->log.open) return tr_api_invalid(&tr->err, "open_log: the log is open already");
    if (total_steps < 0)
        return tr_error_set(&tr->err, TRAINRUN_E_INVALID, "open_log: total_steps is %lld, not 0 (unknown) or more",
                            (long long)total_steps);
    tr_log *log = &tr->log.log;
    log->clock = tr->clock;
    log->sink = tr_api_log_sink(&tr->console);
    /* in a group rank 0 logs; the others' records and console lines go nowhere */
    if ((rc = tr_dist_log_open(&tr->dist, log, &tr->cfg, tr->dir.path, total_steps, &tr->err))) return rc;
    log->memory_device = tr->core.device; /* records carry the memory figures of the trainer's device */
    log->step0 = tr->p.step;              /* the progress line's ETA counts this process's pace */
    log->elapsed0 = tr->p.elapsed;
    const int main_rank = tr_dist_is_main(&tr->dist);
    if (main_rank) {
        tr_csv_sink_open(&tr->log.csv, tr->dir.path, log_warning, log);
        log->on_record = on_record;
        log->record_ctx = tr;
    }
    tr->log.open = 1;
    tr->log.total_steps = total_steps;
    tr->log.win_t0 = trainer_now(tr);
    tr->log.labels_per_sample = 1.0;
    const int resumed = tr->dir.resumed_from[0] != '\0';
    if (tr->cfg.log.tensorboard && main_rank) {
        tr_error terr = {0};
        if (tr_tb_open(&tr->log.tb, tr->dir.path, &tr->cfg, tr->p.step, !resumed, &tr->core.device, NULL, &terr))
            tr_log_message(log, "warning: log.tensorboard: %s; the loop goes on without TensorBoard events", terr.msg);
    }
    if (resumed) /* readers drop what a killed predecessor logged after this step (history.h) */
        trainer_log_event(tr, &(tr_event){.kind = TR_EV_RESUME, .step = tr->p.step, .epoch = tr->p.epoch,
                                           .position = tr->p.pos, .path = tr->dir.resumed_from});
    return TRAINRUN_OK;
}

int trainrun_trainer_set_log(trainrun_trainer *tr, trainrun_log_fn fn, void *ctx)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (tr->log.open) return tr_api_invalid(&tr->err, "set_log: the log is open already (call it before open_log)");
    tr->console = (tr_api_log){.set = 1, .fn = fn, .ctx = ctx};
    return TRAINRUN_OK;
}

int trainrun_trainer_set_clock(trainrun_trainer *tr, trainrun_clock_fn now, void *ctx)
{
    const int rc = trainer_begin(tr, NULL, NULL, 0);
    if (rc) return rc;
    if (tr->log.open) return tr_api_invalid(&tr->err, "set_clock: the log is open already (call it before open_log)");
    if (tr_ckpt_policy_busy(&tr->ckpt))
        return tr_api_invalid(&tr->err, "set_clock: a background save is in flight (trainrun_trainer_save_wait)");
    /* The training seconds so far stay and go on from the new clock's now; before a step since open or load the
     * old clock counted no training, so a fake clock set then starts from exactly the seconds carried. */
    if (tr->p.step > tr->clock_step) tr->elapsed0 += trainer_now(tr) - tr->clock0;
    tr->clock = (tr_clock){.now = now, .ctx = now ? ctx : NULL};
    tr->clock0 = trainer_now(tr);
    tr->clock_step = tr->p.step;
    return TRAINRUN_OK;
}

void trainer_log_close(trainrun_trainer *tr)
{
    if (!tr->log.open) return;
    double lr = 0.0;
    if (tr->p.win_steps && trs_optimizer_get_lr(tr->core.opt, &lr) != TRS_OK) lr = 0.0;
    log_window(tr, lr, 1);
    if (tr_dist_is_main(&tr->dist)) /* with the last window, as a run's at its end */
        tr_run_dir_draw_curves(tr->dir.path, &tr->log.curves_failed, &tr->log.log);
    tr_tb_close(&tr->log.tb);
    tr_log_close(&tr->log.log);
    tr_csv_sink_close(&tr->log.csv);
    tr->log.open = 0;
}
