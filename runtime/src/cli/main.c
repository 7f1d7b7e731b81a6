/*
 * main.c -- the trainrun command line: trainrun CONFIG [key=value ...].
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "error.h"
#include "export.h"
#include "launch.h"
#include "log.h"
#include "plot.h"
#include "predict.h"
#include "run.h"
#include "sample.h"
#include "trainrun_shim.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: trainrun CONFIG.yaml [key.path=value ...] [--trace FILE]\n"
            "       trainrun --nproc N [--nnodes M --node-rank K --master-addr HOST --master-port PORT]\n"
            "                CONFIG.yaml [key.path=value ...]\n"
            "       trainrun verify CONFIG.yaml TRACE [--rtol X] [key.path=value ...]\n"
            "       trainrun check CONFIG.yaml [--steps N] [--seed S] [key.path=value ...]\n"
            "       trainrun predict RUN_DIR_OR_CHECKPOINT [key.path=value ...] -o PREDS.csv\n"
            "       trainrun plot RUN_DIR [RUN_DIR ...] [-o FILE.png] [--x step|fraction]\n"
            "       trainrun export RUN_DIR_OR_CHECKPOINT [-o MODEL.pt] [--weights live|ema] [key.path=value ...]\n"
            "       trainrun sample RUN_DIR_OR_CHECKPOINT [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
            "                       [--prompt TEXT]\n"
            "       trainrun --help | --version | --config-reference\n"
            "\n"
            "Trains the model described by CONFIG.yaml through libtorch and writes config.yaml, metrics.jsonl and\n"
            "summary.json into the run directory (run.dir/run.name). Arguments after the config override keys,\n"
            "e.g. `trainrun configs/fashion_mnist_mlp.yaml train.max_steps=50 optim.lr=1e-3`; they are checked\n"
            "against the same schema as the file. `--config-reference` prints every key as a Markdown table.\n"
            "--trace FILE records every step's exact loss and lr, eval counts, a checksum of the final\n"
            "parameters and the effective config (its folder is created); `verify` re-runs a config with the\n"
            "recording's overrides and compares with such a trace (bit for bit, or --rtol), refusing at once a\n"
            "config whose keys differ from the recording's;\n"
            "`check` runs a config twice, kills and resumes it, and watches allocated memory. `predict` writes a\n"
            "trained run's predictions for its test data (its config's, or the overrides') as CSV, with the\n"
            "run's best checkpoint (best.json, checkpoint.monitor) or else its newest. `plot` draws the\n"
            "curves of one or more runs, overlaid, into one PNG (default curves.png). `sample` prints a language\n"
            "model's continuation of a prompt (data.format text or tokens runs; defaults: 500 tokens,\n"
            "temperature 0.8, top-k 200, seed 0, prompt a newline). `export` writes a TorchScript run's module with\n"
            "its trained weights as an archive that torch.jit.load opens (docs/torchscript.md).\n"
            "--nproc N trains with N local ranks (data-parallel over libtorch's c10d/Gloo on 127.0.0.1): each rank\n"
            "takes train.batch_size samples per step (global batch = batch_size x N) and rank 0 writes the run\n"
            "directory. A plain `trainrun CONFIG.yaml` started with torchrun's variables (RANK, WORLD_SIZE > 1,\n"
            "MASTER_ADDR, MASTER_PORT) joins such a group. Several machines: run the launcher on each with\n"
            "torchrun's options, --nnodes M --node-rank K (0 .. M-1) --master-addr HOST (node 0's address) and\n"
            "--master-port PORT (default 29500 with M > 1); node K's ranks are K x N .. K x N + N - 1.\n"
            "\n"
            "exit codes:\n"
            "  0  success\n"
            "  1  a fault of the machine (I/O error, full disk, out of memory, libtorch failing), or a run that\n"
            "     diverged (a non-finite loss: the message says at which step and what to try)\n"
            "  2  the user's input: usage, the config, a data or model file it names (missing, malformed,\n"
            "     a bad label or count); the message names the file and the config key that gave it\n"
            "  3  stopped by the memory watchdog\n"
            "  4  interrupted by SIGINT/SIGTERM/SIGHUP/SIGPIPE: the current step finishes and a checkpoint and\n"
            "     summary.json are saved (a second SIGINT/SIGTERM, a second or more later, exits at once with\n"
            "     128+signal); a closed terminal or pipe never kills the run\n"
            "  5  verify/check: a trace differed, a resume diverged or memory grew\n"
            "  9  distributed run: another rank failed or hung (a collective failed, or waited longer than\n"
            "     dist.timeout_seconds); --nproc returns the first failed rank's code (128+signal if killed)\n"
            " 11  the run directory is in use: another trainrun holds its lock (RUN_DIR/trainrun.lock; the message\n"
            "     names its pid and host); nothing was written. predict, sample, plot and verify never take it\n"
            "\n"
            "A run with run.name set continues from its newest valid checkpoint when started again (run.resume: auto).\n");
}

/* This executable, for `check` to start fresh copies of itself. */
static const char *self_path(const char *argv0)
{
    static char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return argv0;
    buf[n] = '\0';
    return buf;
}

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
    tr_request_stop();
}

/* Whether `a` is one of the launcher's options (launch.h), which start a launcher command line. */
static int is_launcher_option(const char *a)
{
    static const char *const names[] = {"--nproc", "--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank",
                                        "--node_rank", "--master-addr", "--master_addr", "--master-port",
                                        "--master_port"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const size_t k = strlen(names[i]);
        if (strncmp(a, names[i], k) == 0 && (a[k] == '\0' || a[k] == '=')) return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return TR_OK;
    }
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("trainrun %s (libtorch %s)\n", TR_VERSION, trs_torch_version());
        return TR_OK;
    }
    if (argc >= 2 && strcmp(argv[1], "--config-reference") == 0) {
        tr_config_write_reference(stdout);
        return TR_OK;
    }
    if (argc >= 2 && strcmp(argv[1], "verify") == 0) return tr_cli_verify(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "predict") == 0) return tr_cli_predict(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "plot") == 0) return tr_cli_plot(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "export") == 0) return tr_cli_export(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "sample") == 0) return tr_cli_sample(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "check") == 0) return tr_cli_check(self_path(argv[0]), argc - 1, argv + 1);
    if (argc >= 2 && is_launcher_option(argv[1])) return tr_cli_launch(self_path(argv[0]), argc - 1, argv + 1);
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2) fprintf(stderr, "trainrun: unknown option '%s'\n", argv[1]);
        usage(stderr);
        return TR_E_CONFIG;
    }

    /* CONFIG [key=value ...] [--trace FILE]: --trace is log.trace=FILE */
    char **overrides = calloc((size_t)argc, sizeof *overrides);
    char trace_kv[TR_PATH_MAX + 16];
    int n = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
            snprintf(trace_kv, sizeof trace_kv, "log.trace=%s", argv[++i]);
            overrides[n++] = trace_kv;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "trainrun: unknown option '%s'\n", argv[i]);
            free(overrides);
            return TR_E_CONFIG;
        } else {
            overrides[n++] = argv[i];
        }
    }
    tr_config cfg;
    tr_error err = {0};
    int rc = tr_config_load_cli(&cfg, argv[1], overrides, n, &err);
    free(overrides);
    if (rc != TR_OK) {
        fprintf(stderr, "trainrun: %s\n", err.msg);
        return TR_E_CONFIG;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* a signal mid-write (a console, a checkpoint file) must not fail that write */
    sigemptyset(&sa.sa_mask);
    const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) /* one handler at a time: the second */
        sigaddset(&sa.sa_mask, stop_signals[i]);                           /* never sees half the first's state */
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) sigaction(stop_signals[i], &sa, NULL);

    tr_summary sum;
    rc = tr_run(&cfg, &sum, &err);
    /* an error, or a stop before there was a run directory (a signal during the rendezvous): the message alone */
    if ((rc != TR_OK && rc != TR_E_SIGNAL && rc != TR_E_WATCHDOG) || (rc != TR_OK && !sum.run_dir[0])) {
        if (sum.world_size > 1) fprintf(stderr, "trainrun: rank %d: %s\n", sum.rank, err.msg);
        else fprintf(stderr, "trainrun: %s\n", err.msg);
        return rc;
    }
    if (sum.rank != 0) return rc; /* rank 0 reports a multi-process run */
    if (sum.already_complete) {
        printf("\nrun directory   %s: already complete (%lld steps); its summary.json is unchanged\n", sum.run_dir,
               (long long)sum.steps);
        return TR_OK;
    }
    printf("\nrun directory   %s\n", sum.run_dir);
    printf("parameters      %lld\n", (long long)sum.params);
    if (sum.epochs_completed > 0) /* epochs' worth of batches, not epochs started */
        printf("steps           %lld (%.2f epochs)\n", (long long)sum.steps, sum.epochs_completed);
    else
        printf("steps           %lld\n", (long long)sum.steps);
    printf("train time      %.1f s (%.0f samples/s in train steps)\n", sum.train_seconds, sum.samples_per_s);
    printf("last train loss %.4g\n", sum.last_loss); /* significant digits: 4e-5 is not 0.0000 */
    /* figures of this process's evaluations; the val line of a checkpoint otherwise */
    if (sum.has_val && !sum.val_live.has && !sum.val_ema.has)
        printf("%s loss %.4f  accuracy %.4f  (an evaluation before this process resumed the run)\n",
               cfg.eval.split == TR_EVAL_TEST ? "last eval, test" : "val            ", sum.val_loss, sum.val_accuracy);
    const tr_eval_figures *figs[] = {&sum.val_live, &sum.val_ema, &sum.test_live, &sum.test_ema};
    /* with eval.split: test the periodic evaluation (the "val" figures) ran on the test set */
    const int on_test = cfg.eval.split == TR_EVAL_TEST;
    const char *const fig_names[] = {on_test ? "eval (test)" : "val", on_test ? "eval (test, EMA)" : "val (EMA)",
                                     "test", "test (EMA)"};
    for (int i = 0; i < 4; i++) {
        const tr_eval_figures *e = figs[i];
        if (!e->has) continue;
        printf("%-15s loss %.4f", fig_names[i], e->loss);
        if (sum.task == 0) printf("  accuracy %.4f", e->accuracy);
        if (sum.task == 0 && sum.top_k > 0) printf("  top-%d %.4f", sum.top_k, e->top_k_accuracy);
        if (sum.task == 1)
            printf("  subset accuracy %.4f  micro-F1 %.4f  macro-F1 %.4f", e->accuracy, e->micro_f1, e->macro_f1);
        if (sum.task == 2) printf("  MSE %.5g  MAE %.5g", e->mse, e->mae);
        printf("  (%lld samples, after step %lld)\n", (long long)e->samples, (long long)e->step);
    }
    if (sum.has_test && !sum.test_live.has && !sum.test_ema.has)
        printf("test            loss %.4f  accuracy %.4f (%lld samples)\n", sum.test_loss, sum.test_accuracy,
               (long long)sum.test_samples);
    char base[32], fin[32], peak[32], growth[32], res[32], pres[32], rss[32], prss[32];
    tr_format_bytes((double)sum.baseline_bytes, base, sizeof base);
    tr_format_bytes((double)sum.final_bytes, fin, sizeof fin);
    tr_format_bytes((double)sum.peak_bytes, peak, sizeof peak);
    tr_format_bytes(sum.growth_per_step, growth, sizeof growth);
    tr_format_bytes((double)sum.final_reserved_bytes, res, sizeof res);
    tr_format_bytes((double)sum.peak_reserved_bytes, pres, sizeof pres);
    tr_format_bytes((double)sum.final_rss_bytes, rss, sizeof rss);
    tr_format_bytes((double)sum.peak_rss_bytes, prss, sizeof prss);
    if (sum.baseline_bytes > 0)
        printf("memory          allocated: baseline %s (step %lld), final %s, peak %s, growth %s/step\n", base,
               (long long)sum.baseline_step, fin, peak, growth);
    else
        printf("memory          allocated: final %s, peak %s (no baseline: the run ended during the watchdog's "
               "warm-up, which lasts watchdog.warmup_steps = %lld steps and until the first optimizer step, "
               "evaluation and checkpoint, where configured, have happened)\n",
               fin, peak, (long long)cfg.watchdog.warmup_steps);
    printf("                reserved: final %s, peak %s; RSS: final %s, peak %s\n", res, pres, rss, prss);
    if (sum.world_size > 1)
        printf("ranks           %d (all-reduce %.2f s, %.1f%% of rank 0's step time)\n", sum.world_size,
               sum.allreduce_seconds, 100.0 * sum.allreduce_share);
    if (sum.best_step >= 0)
        printf("best            %s %.6g after step %lld: %s/checkpoints/step-%010lld (best.json)\n",
               sum.best_monitor, sum.best_score, (long long)sum.best_step, sum.run_dir, (long long)sum.best_step);
    if (sum.early_stopped) printf("stopped early   %s\n", sum.stop_reason);
    if (rc == TR_E_SIGNAL) printf("interrupted by a signal; checkpoint saved\n");
    if (rc == TR_E_WATCHDOG) printf("stopped by the memory watchdog (exit code 3); checkpoint saved\n");
    if (rc == TR_E_SIGNAL || rc == TR_E_WATCHDOG)
        printf("continue with: trainrun %s/config.yaml   (or the same command with run.name=%s)\n", sum.run_dir,
               strrchr(sum.run_dir, '/') ? strrchr(sum.run_dir, '/') + 1 : sum.run_dir);
    return rc;
}
