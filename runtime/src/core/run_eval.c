/*
 * run_eval.c -- evaluation in a run: a whole split in eval-batch chunks under no_grad with the live weights, the
 * EMA's or both (eval.weights), when the periodic one is due, what follows it (model selection, curves.png), and
 * the caching allocators' release at the phase change around it. Its state is tr_run_state.eval (run_eval,
 * run_internal.h).
 */
#include <stdio.h>
#include <string.h>

#include "run_internal.h"
#include "text.h"

/* What evaluate_weights hands tr_core_evaluate: the run and the data set. */
typedef struct eval_source {
    tr_run_state *t;
    const tr_dataset *ds;
} eval_source;

/* Samples i .. i + n - 1 of the data set as the run's batch view: token data as the fixed windows i, i + 1, ...
 * starting at multiples of block; other data as rows, in memory without a gather or a copy. */
static int eval_batch(void *ctx, int64_t i, int64_t n, trs_batch *b, tr_error *err)
{
    eval_source *src = ctx;
    tr_run_state *t = src->t;
    const tr_dataset *ds = src->ds;
    *b = run_batch_view(t, NULL, n);
    if (t->shape.block) {
        int64_t *starts = t->eval.starts;
        for (int64_t j = 0; j < n; j++) starts[j] = (i + j) * t->shape.block;
        tr_window_cut(ds->tokens, starts, n, t->shape.block, t->eval.ids, t->eval.y);
        b->x_ids = t->eval.ids;
        b->y = t->eval.y;
        return TR_OK;
    }
    b->x = tr_dataset_rows(ds, i, n, &t->eval.buf, err);
    if (!b->x) return err->code;
    b->y = ds->y + i;
    b->target = ds->t ? ds->t + (size_t)i * (size_t)ds->t_cols : NULL;
    return TR_OK;
}

/* Evaluate a whole data set in order, in eval-batch-sized chunks, with the live weights (ema NULL) or the EMA's
 * (tr_core_evaluate: the shim returns counts per batch and they are accumulated in C). */
static int evaluate_weights(tr_run_state *t, const tr_dataset *ds, const char *split, trs_ema *ema, tr_eval_figures *fig,
                            tr_error *err)
{
    const double t0 = run_now(t);
    tr_metrics *m = &t->eval.metrics;
    eval_source src = {t, ds};
    const int rc = tr_core_evaluate(&t->core, ema, ds->n, t->cfg->eval.batch_size, eval_batch, &src, m, split, NULL,
                                    err);
    if (rc) return rc;
    const double secs = run_now(t) - t0;
    run_emit(t, &(tr_event){.kind = TR_EV_EVAL, .step = t->p.step, .epoch = t->p.epoch, .split = split,
                            .weights = ema ? "ema" : "live", .metrics = m, .top_k = t->cfg->eval.top_k,
                            .loss = tr_metrics_loss(m), .accuracy = tr_metrics_accuracy(m), .correct = m->correct,
                            .samples = m->samples, .seconds = secs,
                            /* the caller hears of the weights run_evaluate() returns */
                            .reported = !ema || t->cfg->eval.weights == TR_WEIGHTS_EMA});
    *fig = tr_metrics_figures(m, t->p.step);
    /* the run directory keeps the latest confusion matrix of each split and weights */
    return m->confusion ? tr_run_dir_write_confusion(t->dir.path, split, ema != NULL, m, err) : TR_OK;
}

/* Evaluate with the weights eval.weights names: live, EMA or both. *loss_out / *acc_out get the live figures (the
 * EMA's when only those are evaluated); every figure goes into t->eval.fig. */
int run_evaluate(tr_run_state *t, const tr_dataset *ds, const char *split, double *loss_out, double *acc_out,
                    tr_error *err)
{
    const int s = strcmp(split, "test") == 0;
    const tr_eval_weights w = t->cfg->eval.weights;
    int rc = TR_OK;
    /* Phase changes, train to eval and back: the training step's cached blocks go back before the pass (whose
     * activations at eval.batch_size are other sizes), and the pass's after it. Never inside the loop of steps. */
    trs_memory_empty_cache(NULL);
    if (w != TR_WEIGHTS_EMA) rc = evaluate_weights(t, ds, split, NULL, &t->eval.fig[s][0], err);
    if (!rc && w != TR_WEIGHTS_LIVE) rc = evaluate_weights(t, ds, split, t->core.ema, &t->eval.fig[s][1], err);
    tr_core_phase_change(&t->core);
    if (rc) return rc;
    const tr_eval_figures *f = &t->eval.fig[s][w == TR_WEIGHTS_EMA ? 1 : 0];
    if (loss_out) *loss_out = f->loss;
    if (acc_out) *acc_out = f->accuracy;
    return TR_OK;
}

/* A validation pass; its time is left out of the open train window's samples/s. */
int run_validate(tr_run_state *t, tr_error *err)
{
    const double e0 = run_now(t);
    const int rc = run_evaluate(t, run_eval_set(t), t->cfg->eval.split == TR_EVAL_TEST ? "test" : "val", &t->p.val_loss, &t->p.val_accuracy, err);
    if (rc) return rc;
    t->p.has_val = 1;
    t->p.evals_done++;
    run_select_after_eval(t);
    run_draw_curves(t);
    t->clock.win_t0 += run_now(t) - e0;
    return TR_OK;
}

int run_eval_due(const tr_run_state *t)
{
    const tr_config *cfg = t->cfg;
    return run_eval_set(t)->n > 0 && ((cfg->eval.every_steps > 0 && t->p.step % cfg->eval.every_steps == 0) ||
                            (cfg->eval.every_epoch && run_epoch_done(t)));
}

int tr_run_evaluate(tr_run_state *t, int test, tr_eval_figures *out, tr_error *err)
{
    if (t->phase != RUN_STEPPING)
        return tr_error_set(err, TR_E_CONFIG, "evaluate: the run has ended; evaluate before its last step");
    const tr_dataset *ds = test ? &t->test : &t->val;
    if (ds->n == 0)
        return tr_error_set(err, TR_E_CONFIG, "evaluate: the run has no %s data (%s)", test ? "test" : "validation",
                            test ? "a test set of the config's data with eval.test_at_end, or trainrun_run_set_data "
                                   "TRAINRUN_TEST"
                                 : "data.val_size, or trainrun_run_set_data TRAINRUN_VAL");
    if (tr_core_enter(&t->core))
        return tr_error_set(err, TR_E_RUNTIME, "restoring the run's generator: %s", trs_last_error());
    /* the scheduled pass itself (eval mode, no_grad, eval.weights, an eval record and event), left out of the
     * train window's samples/s; model selection and early stopping follow only the scheduled evaluations */
    const double e0 = run_now(t);
    const int rc = run_evaluate(t, ds, test ? "test" : "val", NULL, NULL, err);
    t->clock.win_t0 += run_now(t) - e0;
    tr_core_leave(&t->core);
    if (!rc && out) *out = t->eval.fig[test][t->cfg->eval.weights == TR_WEIGHTS_EMA ? 1 : 0];
    return rc;
}
