/*
 * main.c -- the trainrun command line: trainrun CONFIG [key=value ...].
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "log.h"
#include "run.h"
#include "trainrun_shim.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: trainrun CONFIG.yaml [key.path=value ...]\n"
            "       trainrun --help | --version | --config-reference\n"
            "\n"
            "Trains the model described by CONFIG.yaml through libtorch and writes config.yaml, metrics.jsonl and\n"
            "summary.json into the run directory (run.dir/run.name). Arguments after the config override keys,\n"
            "e.g. `trainrun configs/fashion_mnist_mlp.yaml train.max_steps=50 optim.lr=1e-3`; they are checked\n"
            "against the same schema as the file. `--config-reference` prints every key as a Markdown table.\n"
            "\n"
            "exit codes:\n"
            "  0  success\n"
            "  1  runtime error (I/O, data, libtorch)\n"
            "  2  usage or configuration error, reported before any training starts\n"
            "  3  stopped by the memory watchdog\n"
            "  4  interrupted by SIGINT/SIGTERM after finishing the current step (a second signal exits at once\n"
            "     with 128+signal)\n");
}

static void on_signal(int sig)
{
    static volatile sig_atomic_t seen;
    if (seen) _exit(128 + sig);
    seen = 1;
    tr_request_stop();
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
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2) fprintf(stderr, "trainrun: unknown option '%s'\n", argv[1]);
        usage(stderr);
        return TR_E_CONFIG;
    }

    tr_config cfg;
    tr_error err = {0};
    tr_config_defaults(&cfg);
    int rc = tr_config_load_file(&cfg, argv[1], &err);
    for (int i = 2; rc == TR_OK && i < argc; i++) rc = tr_config_override(&cfg, argv[i], &err);
    if (rc == TR_OK) rc = tr_config_validate(&cfg, &err);
    if (rc != TR_OK) {
        fprintf(stderr, "trainrun: %s\n", err.msg);
        return TR_E_CONFIG;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    tr_summary sum;
    rc = tr_run(&cfg, &sum, &err);
    if (rc != TR_OK && rc != TR_E_SIGNAL && rc != TR_E_WATCHDOG) {
        fprintf(stderr, "trainrun: %s\n", err.msg);
        return rc;
    }
    printf("\nrun directory   %s\n", sum.run_dir);
    printf("parameters      %lld\n", (long long)sum.params);
    printf("steps           %lld (%lld epochs)\n", (long long)sum.steps, (long long)sum.epochs);
    printf("train time      %.1f s (%.0f samples/s in train steps)\n", sum.train_seconds, sum.samples_per_s);
    printf("last train loss %.4f\n", sum.last_loss);
    if (sum.has_val) printf("val             loss %.4f  accuracy %.4f\n", sum.val_loss, sum.val_accuracy);
    if (sum.has_test)
        printf("test            loss %.4f  accuracy %.4f (%lld samples)\n", sum.test_loss, sum.test_accuracy,
               (long long)sum.test_samples);
    char base[32], fin[32], peak[32], growth[32];
    tr_format_bytes((double)sum.baseline_bytes, base, sizeof base);
    tr_format_bytes((double)sum.final_bytes, fin, sizeof fin);
    tr_format_bytes((double)sum.peak_bytes, peak, sizeof peak);
    tr_format_bytes(sum.growth_per_step, growth, sizeof growth);
    if (sum.baseline_bytes > 0)
        printf("memory          baseline %s (step %lld), final %s, peak %s, growth %s/step\n", base,
               (long long)sum.baseline_step, fin, peak, growth);
    else
        printf("memory          final %s, peak %s (no baseline: the run ended during warm-up)\n", fin, peak);
    if (rc == TR_E_SIGNAL) printf("interrupted: stopped early by a signal\n");
    if (rc == TR_E_WATCHDOG) printf("stopped by the memory watchdog (exit code 3)\n");
    return rc;
}
