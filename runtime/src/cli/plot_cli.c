/*
 * plot_cli.c -- `trainrun plot RUN_DIR [RUN_DIR ...] [-o FILE]` (plot.h): the command line's part of the curves,
 * built into the trainrun executable only (libtrainrun draws, the CLI parses arguments and prints).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

int tr_cli_plot(int argc, char **argv)
{
    const char *out = "curves.png";
    tr_plot_options opt = {0};
    double ratio = 1;
    int x_given = 0;
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    int n = 0;
    if (!dirs) return TR_E_RUNTIME;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: trainrun plot RUN_DIR [RUN_DIR ...] [-o FILE] [--x step|fraction]\n"
                   "Draws the curves of one or more runs, overlaid, from their metrics.jsonl into one PNG (default\n"
                   "curves.png): loss (on a log axis when it spans more than two decades), accuracy or the task's\n"
                   "metric, the learning rate, and allocated and reserved memory, over the optimizer step; a dotted\n"
                   "line marks each step a run resumed from. --x fraction puts each run over its own length (step /\n"
                   "its last step), so runs of very different lengths can be compared.\n");
            free(dirs);
            return TR_OK;
        }
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--x") == 0 && i + 1 < argc) {
            const char *x = argv[++i];
            if (strcmp(x, "step") != 0 && strcmp(x, "fraction") != 0) {
                fprintf(stderr, "trainrun plot: --x: '%s' is not step or fraction\n", x);
                free(dirs);
                return TR_E_CONFIG;
            }
            opt.x_fraction = strcmp(x, "fraction") == 0;
            x_given = 1;
        } else if (argv[i][0] == '-') {
            fprintf(stderr,
                    "trainrun plot: unknown option '%s'\nusage: trainrun plot RUN_DIR [RUN_DIR ...] [-o FILE] [--x "
                    "step|fraction]\n",
                    argv[i]);
            free(dirs);
            return TR_E_CONFIG;
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (n == 0) {
        fprintf(stderr, "trainrun plot: no run directory given\nusage: trainrun plot RUN_DIR [RUN_DIR ...] [-o FILE]\n");
        free(dirs);
        return TR_E_CONFIG;
    }
    tr_error err = {0};
    opt.length_ratio = &ratio;
    const int rc = tr_plot_runs_with(dirs, n, out, &opt, &err);
    free(dirs);
    if (rc) {
        fprintf(stderr, "trainrun plot: %s\n", err.msg);
        return rc;
    }
    printf("%d run%s -> %s\n", n, n == 1 ? "" : "s", out);
    if (!x_given && ratio >= 10)
        printf("hint: the longest run is %.0fx the shortest; --x fraction draws each over its own length\n", ratio);
    return TR_OK;
}
