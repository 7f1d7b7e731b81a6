/*
 * main.c -- the trainrun command line: its usage, and which subcommand an argument list is (train.h for
 * `trainrun CONFIG [key=value ...]`, check.h, predict.h, plot.h, export.h, sample.h, launch.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "error.h"
#include "export.h"
#include "launch.h"
#include "plot.h"
#include "predict.h"
#include "sample.h"
#include "train.h"
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
    return tr_cli_train(argc, argv);
}
