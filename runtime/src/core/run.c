/*
 * run.c -- the training loop, as open / step / finish / close so that a caller (the CLI's tr_run, the embedding
 * API) can drive it a step at a time. step_locked() ("THE STEP" below) is the loop's body on one screen: one
 * optimizer step, then each concern -- EMA, log, evaluation, watchdog, checkpoint -- as
 * `if (!rc && X_due(t)) rc = X(t, err);`. Each concern owns its state (a member of tr_run_state) and lives in one
 * file: evaluation run_eval.c (and model selection after it, run_select.c), the watchdog run_watchdog.c, the
 * checkpoint policy ckpt_policy.c. What a run reports goes through the event path (event.h, run_events.c).
 * tr_run_finish() saves the last checkpoint and tests; tr_run_close() reports and frees. Set-up is in
 * run_setup.c (a resume in run_restore.c), the run directory's files in run_dir.c, the batches in run_loader.c, the
 * summary in summary.c.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "trace.h"

int run_stop_requested(void *ctx)
{
    const tr_run_state *t = ctx;
    return t->stop || (t->data.stop && *t->data.stop);
}

/* Whether this is the step at whose end the process is to send itself SIGKILL: the environment variable
 * TRAINRUN_KILL_AT_STEP (read once; a positive step), which `trainrun check` sets in the run it kills and resumes,
 * and the test suite's resume tests the same way -- a kill at an exact, reproducible step, where killing the run from
 * outside, or polling metrics.jsonl, lands wherever the scheduler let it. Unset: one comparison per step. */
static int kill_due(const tr_run_state *t)
{
    static int64_t kill_at = -2; /* -2: not read yet; -1: not set */
    if (kill_at == -2) {
        const char *s = getenv("TRAINRUN_KILL_AT_STEP");
        char *end = NULL;
        const long long v = s && *s ? strtoll(s, &end, 10) : -1;
        kill_at = end && *end == '\0' && v > 0 ? (int64_t)v : -1;
    }
    return t->p.step == kill_at;
}

/* ---------------------------------------------------------------------------------------------------- log window */

/* Close the open log window into a train record. */
static void log_window(tr_run_state *t, int partial)
{
    tr_ckpt_progress *p = &t->p;
    if (p->win_steps == 0) return;
    const double now = run_now(t);
    /* token data: correct counts positions, block of them per window */
    const tr_event ev = tr_log_window_close(p, t->last.lr, now - t->clock.win_t0,
                                            (double)(t->shape.block ? t->shape.block : 1), partial);
    p->last_loss = ev.loss; /* the window's mean loss */
    run_emit(t, &ev);
    t->clock.win_t0 = run_now(t);
}

/* ---------------------------------------------------------------------------------------------------- requests */

/* What this process asks for as it stands (TR_DIST_* bits): a stop (tr_run_request_stop, or the caller's flag
 * tr_run_data.stop: a signal handler, trainrun_run_stop), the watchdog's stop, an interval checkpoint
 * (checkpoint.every_seconds). */
static int own_requests(const tr_run_state *t)
{
    return (run_stop_requested((void *)t) ? TR_DIST_STOP : 0) | (t->wd.pending ? TR_DIST_WATCHDOG : 0) |
           (run_ckpt_interval_due(t) ? TR_DIST_CHECKPOINT : 0);
}

/* What the run acts on. Several processes: what the ranks agreed on at this step (agree_on_step: the OR over
 * ranks), so that all stop or save at the same step, a rank's own request taking effect at the next step's
 * agreement. One process: its own requests, at once. The concerns ask this alone. */
int run_requests(const tr_run_state *t) { return t->dist.pg ? t->dist.agreed : own_requests(t); }

/* Once per step, after the train step: the ranks all-reduce the step's loss and counts and agree on the requests
 * (one process: nothing to agree with). */
static int agree_on_step(tr_run_state *t, trs_step_result *r, tr_error *err)
{
    return tr_dist_reduce_step(&t->dist, r, own_requests(t), err);
}

/* ---------------------------------------------------------------------------------------------------- log, EMA */

static int log_due(const tr_run_state *t)
{
    return t->p.step % t->cfg->log.every_steps == 0 || t->p.step == t->shape.total_steps;
}

/* The EMA after optimizer step p.step (tr_core_ema_due: the trainer's rule too). */
static int ema_due(const tr_run_state *t) { return tr_core_ema_due(&t->core, t->cfg, t->p.step, NULL); }

/* Add one step's scalars to the run's totals and the open log window. */
static void accumulate(tr_run_state *t, const trs_step_result *r, double lr)
{
    t->p.step++;
    t->last.loss = r->loss;
    t->p.samples_total += r->samples;
    tr_log_window_add(&t->p, r);
    run_emit(t, &(tr_event){.kind = TR_EV_STEP, .step = t->p.step, .epoch = t->p.epoch, .loss = r->loss, .lr = lr,
                            .grad_norm = r->grad_norm, .samples = r->samples, .correct = r->correct,
                            .targets = r->targets});
}

/* The EMA's update after a step (ema_due): at ema.start_step (> 0) a fresh copy of the weights. */
static int update_ema(tr_run_state *t, tr_error *err)
{
    int fresh = 0;
    tr_core_ema_due(&t->core, t->cfg, t->p.step, &fresh);
    return tr_core_update_ema(&t->core, fresh, err, "step %lld: ema", (long long)t->p.step);
}

/* ---------------------------------------------------------------------------------------------------- the run */

/* Fill the summary from where the run stands and write summary.json (once; after the loop or on an error). */
static void conclude(tr_run_state *t, int rc, const tr_error *err)
{
    if (t->phase == RUN_REPORTED) return;
    t->phase = RUN_REPORTED;
    run_watchdog_stop_recording(t);
    if (tr_ckpt_policy_busy(&t->ckpt)) { /* an error ended the run while a save was in flight: let it complete */
        tr_error serr = {0};
        if (tr_ckpt_policy_settle(&t->ckpt, 1, &serr) != TR_OK && t->sinks.log_open)
            tr_log_message(&t->sinks.log, "%s", serr.msg);
    }
    run_emit(t, &(tr_event){.kind = TR_EV_END, .step = t->p.step, .epoch = t->p.epoch, .rc = rc, .err = err});
}

/* The loop is over before another step: every planned step taken, early stopping, the watchdog, or a stop asked
 * for (run_stop_requested). */
static int loop_over(tr_run_state *t)
{
    if (run_complete(t) || t->sum.watchdog_stopped) return 1;
    if (!(run_requests(t) & TR_DIST_STOP)) return 0;
    t->sum.stopped = 1;
    tr_log_message(&t->sinks.log, "stop requested: stopping after step %lld", (long long)t->p.step);
    return 1;
}

/*
 * The first step after a resume failed with what the checkpoint's state can cause (a non-finite loss, a libtorch
 * error in the lr or the step; not memory, not a peer): with the config that saved it (tr_checkpoint_same_config:
 * only the run's length may differ), the same state produced finite steps before it was saved, so the checkpoint
 * is what is wrong -- and resuming it again would fail the
 * same way forever. It is set aside (RUN_DIR/checkpoints/step-N.unresumable, kept), so that the next start resumes
 * from the next older checkpoint (tr_run starts it at once in a one-process run). With another config the failure
 * is the config's: reported as it is, nothing renamed. Returns rc, with err saying what was done.
 */
static int first_resumed_step_failed(tr_run_state *t, int rc, trs_status st, tr_error *err)
{
    if (t->dir.resumed_at < 0 || t->p.step != t->dir.resumed_at || !t->dir.resumed_same_config ||
        !(st == TRS_E_NONFINITE || st == TRS_E_RUNTIME || st == TRS_E_INVALID) || !tr_dist_is_main(&t->dist))
        return rc;
    char msg[sizeof err->msg], to[TR_PATH_MAX + 96];
    snprintf(msg, sizeof msg, "%s", err->msg);
    tr_error serr = {0};
    if (tr_checkpoint_set_aside(t->dir.resume_from, "unresumable", to, sizeof to, &serr))
        return tr_error_set(err, rc, "%s (the first step after resuming from %s; setting it aside failed: %s)", msg,
                            t->dir.resume_from, serr.msg);
    t->dir.fell_back = 1;
    return tr_error_set(err, rc,
                        "%s: the first step after resuming from %s failed with the config that saved it, "
                        "so the checkpoint cannot be resumed: it is set aside as %s (kept), and the next start "
                        "resumes from the next older checkpoint",
                        msg, t->dir.resume_from, to);
}

/* A non-finite loss in a run that was training: it diverged. The records so far stay (the open window is logged,
 * marked partial), and the message says where, from what, and what to try. Returns rc. */
static int diverged(tr_run_state *t, int rc, long long step, tr_error *err)
{
    char msg[sizeof err->msg], last[96] = "at its first step", hint[160];
    snprintf(msg, sizeof msg, "%s", err->msg);
    if (t->p.step > 0 && t->p.step > t->dir.resumed_at)
        snprintf(last, sizeof last, "the last finite loss was %.6g, at step %lld", t->last.loss,
                 (long long)t->p.step);
    log_window(t, 1);
    return tr_error_set(err, rc,
                        "%s: the run diverged at step %lld (%s) and stopped; its records so far are in "
                        "metrics.jsonl. %s",
                        msg, step, last, tr_core_divergence_hint(t->cfg, t->last.lr, hint, sizeof hint));
}

/* One optimizer step: the batch, the scheduled lr, the train step (only scalars come back), the agreement. */
static int train_step(tr_run_state *t, tr_error *err)
{
    trs_batch b;
    int rc = run_next_batch(t, &b, err);
    if (rc) return rc;
    t->last.lr = run_scheduled_lr(t);
    const long long step = (long long)t->p.step + 1; /* the one being taken, for messages */
    trs_status st = TRS_OK;
    if ((rc = tr_core_set_lr(&t->core, t->last.lr, &st, err, "step %lld: lr %g", step, t->last.lr)))
        return first_resumed_step_failed(t, rc, st, err);
    trs_step_result r;
    const double s0 = run_now(t);
    if ((rc = tr_core_train_step(&t->core, &b, &r, &st, err, "step %lld", step))) {
        if (st == TRS_E_NONFINITE && t->p.step != t->dir.resumed_at) return diverged(t, rc, step, err);
        return first_resumed_step_failed(t, rc, st, err);
    }
    if ((rc = agree_on_step(t, &r, err))) return rc;
    t->p.step_seconds += run_now(t) - s0;
    t->clock.step_seconds_here += run_now(t) - s0;
    accumulate(t, &r, t->last.lr);
    return TR_OK;
}

/*
 * THE STEP: one optimizer step, then every concern in order, each done when it is due. The requests a
 * multi-process run agrees on (a stop, the watchdog's stop, an interval checkpoint) reach the concerns the way a
 * one-process run's own do (requests), so no concern asks how many processes there are. TR_OK or an error.
 */
static int step_locked(tr_run_state *t, tr_error *err)
{
    int rc = train_step(t, err);
    if (!rc && ema_due(t)) rc = update_ema(t, err);
    if (!rc && log_due(t)) log_window(t, 0);
    if (!rc && run_eval_due(t)) rc = run_validate(t, err);
    if (!rc && run_watchdog_due(t)) run_watchdog_sample(t);
    if (!rc && run_watchdog_stop_due(t)) return run_watchdog_stop(t);
    if (!rc && tr_ckpt_policy_busy(&t->ckpt)) rc = tr_ckpt_policy_settle(&t->ckpt, 0, err);
    if (!rc && run_ckpt_due(t)) rc = run_ckpt_save(t, run_ckpt_due(t), 0, err);
    if (!rc && kill_due(t)) raise(SIGKILL); /* `trainrun check`'s resume test: TRAINRUN_KILL_AT_STEP */
    return rc;
}

int tr_run_step(tr_run_state *t, tr_error *err)
{
    if (t->phase != RUN_STEPPING) return t->rc ? t->rc : TR_RUN_DONE;
    if (tr_core_enter(&t->core)) {
        t->phase = RUN_OVER;
        return t->rc = tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
    }
    const int over = loop_over(t);
    const int rc = over ? TR_OK : step_locked(t, err);
    tr_core_leave(&t->core);
    if (over || rc) t->phase = RUN_OVER;
    return over ? TR_RUN_DONE : (t->rc = rc);
}

static int finish_locked(tr_run_state *t, tr_error *err)
{
    const tr_config *cfg = t->cfg;
    tr_summary *sum = &t->sum;
    const int early = sum->stopped || sum->watchdog_stopped;
    /* The checkpoint keeps the open log window, so a resumed run's records equal an uninterrupted run's; the
     * partial window is logged after it, for the people watching this process. */
    int rc = TR_OK;
    run_watchdog_report(t, sum->watchdog_stopped ? "limit" : "end", 0); /* the loop's last word on memory */
    if (cfg->checkpoint.at_end || early)
        rc = run_ckpt_save(t, sum->watchdog_stopped ? "watchdog" : sum->stopped ? "signal" : "end", 1, err);
    else
        rc = tr_ckpt_policy_settle(&t->ckpt, 1, err); /* the last interval save, still in flight */
    if (rc) goto out;
    if (early) log_window(t, 1);
    else if (t->p.sel.es.stopped) log_window(t, 0); /* early stopping ended the run here: its last window, whole */
    sum->train_seconds = run_elapsed(t);
    sum->samples_per_s = t->p.step_seconds > 0 ? (double)t->p.samples_total / t->p.step_seconds : 0.0;
    if (t->dist.pg) {
        trs_dist_stats(t->dist.pg, &sum->allreduce_seconds, NULL, NULL, NULL);
        sum->allreduce_seconds -= t->clock.allreduce0; /* the loop's: set-up's agreement waits for the slowest rank */
        sum->allreduce_share = t->clock.step_seconds_here > 0 ? sum->allreduce_seconds / t->clock.step_seconds_here : 0.0;
    }
    tr_summary_memory(sum, &t->core.device);
    if (!early) { /* the final parameters' digest (the trace's last lines: one per state_dict entry too) */
        tr_event ev = {.kind = TR_EV_TRAINED, .step = t->p.step, .epoch = t->p.epoch};
        trs_model_digest(t->core.model, TRS_DIGEST_PARAMS, &ev.crc, &ev.abs_sum, NULL);
        tr_param_digest *params = NULL;
        tr_error perr = {0};
        if (t->sinks.trace && tr_param_digests(t->core.model, &params, &ev.n_params, &perr) != TR_OK)
            tr_log_message(&t->sinks.log, "trace: no per-tensor records: %s", perr.msg);
        ev.params = params;
        run_emit(t, &ev);
        free(params);
    }
    if (!early && t->test.n > 0) {
        rc = run_evaluate(t, &t->test, "test", &sum->test_loss, &sum->test_accuracy, err);
        if (rc) goto out;
        sum->has_test = 1;
        sum->test_samples = t->test.n;
    }
    run_draw_curves(t);
    rc = sum->watchdog_stopped ? TR_E_WATCHDOG : sum->stopped ? TR_E_SIGNAL : TR_OK;
out:
    conclude(t, rc, err);
    return t->rc = rc;
}

int tr_run_finish(tr_run_state *t, tr_error *err)
{
    if (t->phase >= RUN_FINISHED) return t->rc;
    t->phase = RUN_FINISHED;
    if (tr_core_enter(&t->core)) {
        const int rc = tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
        conclude(t, rc, err);
        return t->rc = rc;
    }
    const int rc = finish_locked(t, err);
    tr_core_leave(&t->core);
    return rc;
}

void tr_run_request_stop(tr_run_state *t) { t->stop = 1; }

void tr_run_set_event_hook(tr_run_state *t, tr_run_event_fn fn, void *ctx)
{
    t->sinks.on_event = fn;
    t->sinks.event_ctx = ctx;
}

const tr_summary *tr_run_summary(const tr_run_state *t) { return &t->sum; }

int64_t tr_run_total_steps(const tr_run_state *t) { return t->shape.total_steps; }

int tr_run_close(tr_run_state *t, int rc, const tr_error *err, tr_summary *sum_out)
{
    if (!t) {
        if (sum_out) memset(sum_out, 0, sizeof *sum_out);
        return rc;
    }
    conclude(t, rc, err);
    tr_torch_enter(NULL, 0);
    run_teardown(t);
    tr_torch_leave(NULL, 0);
    if (sum_out) *sum_out = t->sum;
    free(t);
    return rc;
}

void tr_run_end(tr_run_state *t, int rc, const tr_error *err)
{
    if (t) conclude(t, rc, err);
}

int tr_run_restart_due(tr_run_state *t, int rc, const tr_error *err)
{
    const int due = rc != TR_OK && t && t->dir.fell_back && t->dist.world_size == 1 && !run_stop_requested(t);
    if (due) tr_log_message(&t->sinks.log, "%s; starting again", err->msg);
    return due;
}

int tr_run(const tr_config *cfg, tr_summary *sum, tr_error *err)
{
    for (;;) {
        tr_run_state *run = NULL;
        int rc = tr_run_open(cfg, NULL, &run, err);
        while (rc == TR_OK) rc = tr_run_step(run, err);
        if (rc == TR_RUN_DONE) rc = tr_run_finish(run, err);
        const int again = tr_run_restart_due(run, rc, err);
        rc = tr_run_close(run, rc, err, sum);
        if (!again) return rc;
        memset(err, 0, sizeof *err);
    }
}
