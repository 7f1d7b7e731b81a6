/*
 * plot.h -- a run's curves as a picture (RUN_DIR/curves.png, `trainrun plot`), drawn with cairo.
 *
 * Four panels over one shared x axis (optimizer steps): loss (train, val, EMA, test), the task's metric
 * (accuracy; micro/macro-F1 for multi-label; MSE/MAE for regression), the learning rate, and allocated and
 * reserved memory (MiB). Each run's series come from its metrics.jsonl with the resume rule applied
 * (history.h), so a resumed run is one continuous curve without a duplicated segment. Several runs are
 * overlaid: a colour per run, a line style per series. Evaluation series carry markers (they are sparse).
 */
#ifndef TR_PLOT_H
#define TR_PLOT_H

#include "error.h"
#include "history.h"

#define TR_PLOT_WIDTH 1200       /**< pixels                                                              */
#define TR_PLOT_HEIGHT 1240      /**< pixels, one run (several runs add a legend row of 22 px per line)     */

/** How `trainrun plot` draws (NULL everywhere: the defaults). */
typedef struct tr_plot_options {
    int x_fraction;       /**< 1: each run's x is its step / its last step (runs of different lengths compared) */
    double *length_ratio; /**< when not NULL: the longest run's last step / the shortest's, set by tr_plot_runs_with */
} tr_plot_options;

/** 1 when the loss panel draws values from lo to hi (the finite extremes) on a log axis: all > 0, spanning more
 *  than two decades (hi / lo > 100); else 0 (a linear axis). */
int tr_plot_log_axis(double lo, double hi);

/**
 * Draw the histories `h[n]` (labels[n]: run names for the legend) into a PNG at `out_path`, replaced atomically.
 * *width / *height (may be NULL) get the picture's size. TR_OK; TR_E_RUNTIME naming the file (cairo or I/O).
 */
int tr_plot_histories(const tr_history *h, const char *const *labels, int n, const char *out_path, int *width,
                      int *height, tr_error *err);

/** tr_plot_histories with options (NULL: the defaults). Resume records are drawn as dotted lines either way. */
int tr_plot_histories_with(const tr_history *h, const char *const *labels, int n, const char *out_path,
                           const tr_plot_options *opt, int *width, int *height, tr_error *err);

/**
 * Read RUN_DIR/metrics.jsonl of each of `n` run directories and draw them (tr_plot_histories), labelled with
 * the directories' last components. Errors: TR_E_CONFIG naming a metrics.jsonl that is not there (not a run
 * directory), TR_E_RUNTIME for a file that cannot be read or written.
 */
int tr_plot_runs(const char *const *run_dirs, int n, const char *out_path, tr_error *err);

/** tr_plot_runs with options (NULL: the defaults); sets *opt->length_ratio when it is not NULL and n > 1. */
int tr_plot_runs_with(const char *const *run_dirs, int n, const char *out_path, const tr_plot_options *opt,
                      tr_error *err);

/**
 * `trainrun plot RUN_DIR [RUN_DIR ...] [-o FILE]` (argv[0] = "plot"). Returns an exit code (0, 1 or 2).
 * Command line only: defined in plot_cli.c, which is built into the trainrun executable, not into libtrainrun.
 */
int tr_cli_plot(int argc, char **argv);

#endif
