/*
 * train.h -- `trainrun CONFIG.yaml [key.path=value ...] [--trace FILE]`: one training run, and its summary on stdout.
 *
 * Written over the embedding API alone (trainrun.h: trainrun_run_open / _wait / _summary / _close), as any C
 * application would drive a run; the signals SIGINT, SIGTERM, SIGHUP and SIGPIPE ask it to stop cleanly
 * (trainrun_run_stop). Exit codes: the run's status (trainrun.h's codes, which are the command line's: usage in
 * main.c), 2 for a bad option, config or override.
 */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

/** `trainrun CONFIG.yaml ...`: argv[1] is the config's path. Returns the process's exit code. */
int tr_cli_train(int argc, char **argv);

#endif
