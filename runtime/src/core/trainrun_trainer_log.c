/*
 * trainrun_trainer_log.c -- a trainer's log (trainrun_trainer_open_log): its events into the sinks a run writes,
 * in the run's formats -- metrics.jsonl (log.h: train windows every log.every_steps steps, evaluations, saves,
 * watchdog reports, a resume), metrics.csv beside it (history.h), TensorBoard's events file with log.tensorboard
 * (tensorboard.h), the console's progress line -- so that `trainrun plot`, `trainrun compare` and TensorBoard read
 * a custom loop's run directory as they read a run's.
 */
#include "trainrun_trainer_internal.h"

#include <math.h>
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
    tr->p.last_loss = ev.loss; /* the window's mean loss (summary.json's last_loss), as a run's */
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

/* How the loop ended, in summary.json's terms: the watchdog's stop, a stop request, the last call's failure (its
 * message), closed before open_log's total_steps ("interrupted"), or completed. */
static int end_status(const trainrun_trainer *tr, const char **error)
{
    *error = NULL;
    if (tr->wd_stopped) return TR_E_WATCHDOG;
    if (tr->stop) return TR_E_SIGNAL;
    if (tr->err.code) {
        *error = tr->err.msg;
        return tr->err.code == TRAINRUN_E_CONFIG ? TR_E_CONFIG : TR_E_RUNTIME;
    }
    if (tr->log.total_steps > 0 && tr->p.step < tr->log.total_steps && !tr->p.sel.es.stopped) return TR_E_SIGNAL;
    return TR_OK;
}

/* RUN_DIR/summary.json at close, as a run writes it at its end (tr_summary_write): the loop's figures from where
 * the trainer stands. */
static void write_summary(trainrun_trainer *tr)
{
    tr_summary s;
    memset(&s, 0, sizeof s);
    const tr_ckpt_progress *p = &tr->p;
    snprintf(s.run_dir, sizeof s.run_dir, "%s", tr->dir.path);
    trs_model_param_count(tr->core.model, &s.params);
    s.steps = p->step;
    s.epochs = p->epoch + 1;
    const int64_t per_epoch = tr->batches.data ? tr->batches.loader.o.steps_per_epoch : 0;
    s.epochs_completed = per_epoch > 0 ? (double)p->step / (double)per_epoch : 0.0;
    s.train_seconds = trainer_elapsed(tr);
    s.samples_per_s = p->step_seconds > 0 ? (double)p->samples_total / p->step_seconds : 0.0;
    s.last_loss = p->last_loss;
    s.baseline_bytes = tr->wd.has_baseline ? tr->wd.baseline : 0;
    s.baseline_step = tr->wd.has_baseline ? tr->wd.baseline_step : 0;
    s.growth_per_step = tr->wd.last.growth_per_step;
    tr_summary_memory(&s, &tr->core.device);
    tr_device_name(&tr->core.device, s.device, sizeof s.device);
    /* val_loss / test_loss: the live weights' last figures, the EMA's where only those were evaluated */
    const tr_eval_figures *val = tr->figs[0][0].has ? &tr->figs[0][0] : &tr->figs[0][1];
    const tr_eval_figures *test = tr->figs[1][0].has ? &tr->figs[1][0] : &tr->figs[1][1];
    s.has_val = val->has;
    s.val_loss = val->loss;
    s.val_accuracy = val->accuracy;
    s.has_test = test->has;
    s.test_loss = test->loss;
    s.test_accuracy = test->accuracy;
    s.test_samples = test->samples;
    s.val_live = tr->figs[0][0];
    s.val_ema = tr->figs[0][1];
    s.test_live = tr->figs[1][0];
    s.test_ema = tr->figs[1][1];
    s.world_size = tr->dist.world_size;
    s.rank = tr->dist.rank;
    if (tr->dist.pg) {
        trs_dist_stats(tr->dist.pg, &s.allreduce_seconds, NULL, NULL, NULL);
        s.allreduce_share = tr->step_seconds_here > 0 ? s.allreduce_seconds / tr->step_seconds_here : 0.0;
    }
    s.early_stopped = p->sel.es.stopped;
    snprintf(s.stop_reason, sizeof s.stop_reason, "%s", tr->stop_reason);
    s.best_step = p->sel.topk.n > 0 ? p->sel.topk.step[0] : -1;
    s.best_score = p->sel.topk.n > 0 ? p->sel.topk.score[0] : NAN;
    snprintf(s.best_monitor, sizeof s.best_monitor, "%s", p->sel.topk_metric);
    const tr_dataset *train = tr->batches.data ? &tr->batches.data->ds : NULL;
    const tr_summary_context c = {.cfg = &tr->cfg, .block = train ? train->block : 0, .metrics = &tr->metrics,
                                  .malloc_tuning = tr->core.malloc_tuned, .sets = {train, NULL, NULL}};
    const char *error = NULL;
    const int rc = end_status(tr, &error);
    tr_summary_write(tr->dir.path, &s, &c, rc, error, &tr->log.log);
}

void trainer_log_close(trainrun_trainer *tr)
{
    if (!tr->log.open) return;
    double lr = 0.0;
    if (tr->p.win_steps && trs_optimizer_get_lr(tr->core.opt, &lr) != TRS_OK) lr = 0.0;
    log_window(tr, lr, 1);
    if (tr_dist_is_main(&tr->dist)) { /* with the last window, as a run's at its end */
        tr_run_dir_draw_curves(tr->dir.path, &tr->log.curves_failed, &tr->log.log);
        write_summary(tr);
    }
    tr_tb_close(&tr->log.tb);
    tr_log_close(&tr->log.log);
    tr_csv_sink_close(&tr->log.csv);
    tr->log.open = 0;
}
