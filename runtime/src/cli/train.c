/*
 * train.c -- `trainrun CONFIG.yaml`: a run driven through the embedding API (train.h), its summary printed.
 */
#include "train.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainrun/trainrun.h"
#include "units.h"

/* The run the signal handler stops; set once the run is open. */
static trainrun_run *volatile current_run;

/*
 * Stopping. SIGINT, SIGTERM, SIGHUP (the terminal or SSH session went away) and SIGPIPE (a pipe reader such as
 * `tee` exited) all ask for the same clean stop: finish the step, save a checkpoint and summary.json, exit 4.
 * Only a second SIGINT/SIGTERM at least a second after the first exits at once (128+signal; complete checkpoints
 * are never touched): `timeout` and terminals signal the whole process group, so one request often arrives twice
 * within that second, and SIGHUP and SIGPIPE are never a person insisting -- a dead pipe raises SIGPIPE at every
 * later write. Writes to a dead stdout/stderr then fail with EPIPE/EIO, which nothing treats as fatal
 * (tr_log_message and the summary printer ignore write errors). clock_gettime is async-signal-safe.
 */
static void on_signal(int sig)
{
    static volatile sig_atomic_t seen;
    static struct timespec first;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int insisting = sig == SIGINT || sig == SIGTERM;
    if (seen) {
        const double dt = (double)(now.tv_sec - first.tv_sec) + (double)(now.tv_nsec - first.tv_nsec) * 1e-9;
        if (insisting && seen == 2 && dt >= 1.0) _exit(128 + sig);
        if (insisting && seen != 2) { /* the first insisting signal after a SIGHUP/SIGPIPE stop starts the clock */
            first = now;
            seen = 2;
        }
        return;
    }
    first = now;
    seen = insisting ? 2 : 1;
    if (current_run) trainrun_run_stop(current_run); /* sets a flag: async-signal-safe */
}

/* The summary of an ended run on stdout (rank 0): where it is, what it trained, its evaluations, memory, the best
 * checkpoint, and how to continue a stopped run. */
static void print_summary(const trainrun_summary *sum, int rc)
{
    if (sum->already_complete) {
        printf("\nrun directory   %s: already complete (%lld steps); its summary.json is unchanged\n", sum->run_dir,
               (long long)sum->steps);
        return;
    }
    /* with eval.split: test the periodic evaluation (the "val" figures) ran on the test set */
    const int on_test = strcmp(sum->eval_split, "test") == 0;
    printf("\nrun directory   %s\n", sum->run_dir);
    printf("parameters      %lld\n", (long long)sum->params);
    if (sum->epochs_completed > 0) /* epochs' worth of batches, not epochs started */
        printf("steps           %lld (%.2f epochs)\n", (long long)sum->steps, sum->epochs_completed);
    else
        printf("steps           %lld\n", (long long)sum->steps);
    printf("train time      %.1f s (%.0f samples/s in train steps)\n", sum->train_seconds, sum->samples_per_s);
    printf("last train loss %.4g\n", sum->last_loss); /* significant digits: 4e-5 is not 0.0000 */
    /* figures of this process's evaluations; the val line of a checkpoint otherwise */
    if (sum->has_val && !sum->has_val_live && !sum->has_val_ema)
        printf("%s loss %.4f  accuracy %.4f  (an evaluation before this process resumed the run)\n",
               on_test ? "last eval, test" : "val            ", sum->val_loss, sum->val_accuracy);
    const trainrun_eval_result *figs[] = {&sum->val_live, &sum->val_ema, &sum->test_live, &sum->test_ema};
    const int has[] = {sum->has_val_live, sum->has_val_ema, sum->has_test_live, sum->has_test_ema};
    const char *const fig_names[] = {on_test ? "eval (test)" : "val", on_test ? "eval (test, EMA)" : "val (EMA)",
                                     "test", "test (EMA)"};
    for (int i = 0; i < 4; i++) {
        const trainrun_eval_result *e = figs[i];
        if (!has[i]) continue;
        printf("%-15s loss %.4f", fig_names[i], e->loss);
        if (sum->task == TRAINRUN_TASK_CLASSIFICATION) printf("  accuracy %.4f", e->accuracy);
        if (sum->task == TRAINRUN_TASK_CLASSIFICATION && sum->top_k > 0)
            printf("  top-%d %.4f", sum->top_k, e->top_k_accuracy);
        if (sum->task == TRAINRUN_TASK_MULTILABEL)
            printf("  subset accuracy %.4f  micro-F1 %.4f  macro-F1 %.4f", e->accuracy, e->micro_f1, e->macro_f1);
        if (sum->task == TRAINRUN_TASK_REGRESSION) printf("  MSE %.5g  MAE %.5g", e->mse, e->mae);
        printf("  (%lld samples, after step %lld)\n", (long long)e->samples, (long long)e->step);
    }
    if (sum->has_test && !sum->has_test_live && !sum->has_test_ema)
        printf("test            loss %.4f  accuracy %.4f (%lld samples)\n", sum->test_loss, sum->test_accuracy,
               (long long)sum->test_samples);
    char base[32], fin[32], peak[32], growth[32], res[32], pres[32], rss[32], prss[32];
    tr_format_bytes((double)sum->baseline_bytes, base, sizeof base);
    tr_format_bytes((double)sum->final_bytes, fin, sizeof fin);
    tr_format_bytes((double)sum->peak_bytes, peak, sizeof peak);
    tr_format_bytes(sum->growth_per_step, growth, sizeof growth);
    tr_format_bytes((double)sum->final_reserved_bytes, res, sizeof res);
    tr_format_bytes((double)sum->peak_reserved_bytes, pres, sizeof pres);
    tr_format_bytes((double)sum->final_rss_bytes, rss, sizeof rss);
    tr_format_bytes((double)sum->peak_rss_bytes, prss, sizeof prss);
    if (sum->baseline_bytes > 0)
        printf("memory          allocated: baseline %s (step %lld), final %s, peak %s, growth %s/step\n", base,
               (long long)sum->baseline_step, fin, peak, growth);
    else
        printf("memory          allocated: final %s, peak %s (no baseline: the run ended during the watchdog's "
               "warm-up, which lasts watchdog.warmup_steps = %lld steps and until the first optimizer step, "
               "evaluation and checkpoint, where configured, have happened)\n",
               fin, peak, (long long)sum->warmup_steps);
    printf("                reserved: final %s, peak %s; RSS: final %s, peak %s\n", res, pres, rss, prss);
    if (sum->world_size > 1)
        printf("ranks           %d (all-reduce %.2f s, %.1f%% of rank 0's step time)\n", sum->world_size,
               sum->allreduce_seconds, 100.0 * sum->allreduce_share);
    if (sum->best_step >= 0)
        printf("best            %s %.6g after step %lld: %s/checkpoints/step-%010lld (best.json)\n",
               sum->best_monitor, sum->best_score, (long long)sum->best_step, sum->run_dir, (long long)sum->best_step);
    if (sum->early_stopped) printf("stopped early   %s\n", sum->stop_reason);
    if (rc == TRAINRUN_E_STOPPED) printf("interrupted by a signal; checkpoint saved\n");
    if (rc == TRAINRUN_E_WATCHDOG) printf("stopped by the memory watchdog (exit code 3); checkpoint saved\n");
    if (rc == TRAINRUN_E_STOPPED || rc == TRAINRUN_E_WATCHDOG)
        printf("continue with: trainrun %s/config.yaml   (or the same command with run.name=%s)\n", sum->run_dir,
               strrchr(sum->run_dir, '/') ? strrchr(sum->run_dir, '/') + 1 : sum->run_dir);
}

int tr_cli_train(int argc, char **argv)
{
    /* CONFIG [key=value ...] [--trace FILE]: --trace is log.trace=FILE */
    const char **overrides = calloc((size_t)argc, sizeof *overrides);
    if (!overrides) {
        fprintf(stderr, "trainrun: out of memory\n");
        return TRAINRUN_E_RUNTIME;
    }
    char trace_kv[4096 + 16];
    int n = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
            snprintf(trace_kv, sizeof trace_kv, "log.trace=%s", argv[++i]);
            overrides[n++] = trace_kv;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "trainrun: unknown option '%s'\n", argv[i]);
            free(overrides);
            return TRAINRUN_E_CONFIG;
        } else {
            overrides[n++] = argv[i];
        }
    }
    trainrun_run *run = NULL;
    int rc = trainrun_run_open(argv[1], overrides, n, &run);
    free(overrides);
    if (rc != TRAINRUN_OK) {
        fprintf(stderr, "trainrun: %s\n", trainrun_run_errmsg(run));
        trainrun_run_close(run);
        return TRAINRUN_E_CONFIG;
    }

    current_run = run;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* a signal mid-write (a console, a checkpoint file) must not fail that write */
    sigemptyset(&sa.sa_mask);
    const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) /* one handler at a time: the second */
        sigaddset(&sa.sa_mask, stop_signals[i]);                           /* never sees half the first's state */
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) sigaction(stop_signals[i], &sa, NULL);

    rc = trainrun_run_wait(run);
    trainrun_summary sum;
    memset(&sum, 0, sizeof sum);
    const int have_sum = trainrun_run_summary(run, &sum) == TRAINRUN_OK;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", trainrun_run_errmsg(run));
    trainrun_run_close(run); /* writes summary.json if the run has not */
    /* an error, or a stop before there was a run directory (a signal during the rendezvous): the message alone */
    const int stopped = rc == TRAINRUN_E_STOPPED || rc == TRAINRUN_E_WATCHDOG;
    if ((rc != TRAINRUN_OK && !stopped) || (rc != TRAINRUN_OK && !sum.run_dir[0]) || !have_sum) {
        if (sum.world_size > 1) fprintf(stderr, "trainrun: rank %d: %s\n", sum.rank, msg);
        else fprintf(stderr, "trainrun: %s\n", msg);
        return rc;
    }
    if (sum.rank == 0) print_summary(&sum, rc); /* rank 0 reports a multi-process run */
    return rc;
}
