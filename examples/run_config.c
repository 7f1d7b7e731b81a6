/*
 * run_config.c -- run a trainrun config file, as the command line does, and print its events as they come.
 * SIGINT stops it cleanly (a checkpoint is saved; run it again to resume). The run's log lines (what the command
 * line prints on stderr) come to print_log and are printed on stdout with a "log " prefix; `--quiet` first
 * silences them (trainrun_run_set_log with NULL).
 *
 *   cc run_config.c $(pkg-config --cflags --libs trainrun) -o run_config
 *   ./run_config configs/fashion_mnist_mlp.yaml train.max_steps=200 log.progress=never
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <trainrun/trainrun.h>

static trainrun_run *g_run;

static void on_sigint(int sig)
{
    (void)sig;
    trainrun_run_stop(g_run); /* only sets a flag: safe in a signal handler */
}

static void print_event(void *ctx, const trainrun_event *ev)
{
    (void)ctx;
    static const char *const wd[] = {"", "baseline", "warn", "limit"};
    switch (ev->kind) {
    case TRAINRUN_EVENT_STEP:
        printf("event step %lld epoch %lld loss %.6f lr %g\n", (long long)ev->step, (long long)ev->epoch, ev->loss,
               ev->lr);
        break;
    case TRAINRUN_EVENT_EVAL:
        printf("event eval %s step %lld loss %.6f accuracy %.4f (%lld samples)\n", ev->split, (long long)ev->step,
               ev->loss, ev->accuracy, (long long)ev->samples);
        break;
    case TRAINRUN_EVENT_CHECKPOINT:
        printf("event checkpoint step %lld reason %s bytes %lld path %s\n", (long long)ev->step, ev->reason,
               (long long)ev->bytes, ev->path);
        break;
    case TRAINRUN_EVENT_WATCHDOG:
        printf("event watchdog %s step %lld allocated %lld baseline %lld growth %.1f B/step\n", wd[ev->watchdog],
               (long long)ev->step, (long long)ev->allocated_bytes, (long long)ev->baseline_bytes,
               ev->growth_per_step);
        break;
    }
}

static void print_log(void *ctx, int kind, const char *line)
{
    (void)ctx;
    printf("log %s %s\n", kind == TRAINRUN_LOG_PROGRESS ? "progress" : "message", line);
}

int main(int argc, char **argv)
{
    const int quiet = argc >= 2 && strcmp(argv[1], "--quiet") == 0;
    argc -= quiet;
    argv += quiet;
    if (argc < 2) {
        fprintf(stderr, "usage: run_config [--quiet] CONFIG.yaml [key.path=value ...]\n");
        return 2;
    }
    int rc = trainrun_run_open(argv[1], (const char *const *)argv + 2, argc - 2, &g_run);
    if (rc == TRAINRUN_OK) rc = trainrun_run_set_log(g_run, quiet ? NULL : print_log, NULL);
    if (rc == TRAINRUN_OK) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigaction(SIGINT, &sa, NULL);
        trainrun_run_set_callback(g_run, print_event, NULL);
        rc = trainrun_run_wait(g_run);
    }
    trainrun_summary s;
    if (trainrun_run_summary(g_run, &s) == TRAINRUN_OK)
        printf("summary status %s steps %lld last_loss %.6f test_accuracy %.4f run_dir %s\n", trainrun_errstr(s.status),
               (long long)s.steps, s.last_loss, s.test_accuracy, s.run_dir);
    else
        fprintf(stderr, "run_config: %s: %s\n", trainrun_errstr(rc), trainrun_run_errmsg(g_run));
    trainrun_run_close(g_run);
    return rc;
}
