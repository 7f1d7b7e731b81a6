/*
 * check.h -- `trainrun verify` and `trainrun check`: trainrun as a reproducible, leak-free reference.
 *
 *   trainrun verify CONFIG TRACE [--rtol X] [key=value ...]
 *       re-runs CONFIG (in a temporary run directory) and compares its trace with the recorded TRACE: bit for bit
 *       by default, or losses and lrs within a relative X. Prints the first step that differs and by how much.
 *   trainrun check CONFIG [--steps N] [key=value ...]
 *       runs N steps (default 400) twice in fresh processes and compares the traces bit for bit; runs it again,
 *       kills it with SIGKILL at a random step and resumes it, and compares; checks that allocated bytes never
 *       grow after the watchdog baseline; prints one table of what held and what didn't.
 * Both return 0 when everything held, TR_E_DIFFERENCE (5) when something differed, or another TR_* code when a
 * run could not be made at all.
 */
#ifndef TR_CHECK_H
#define TR_CHECK_H

/** Exit code of verify/check when a difference, a broken resume or memory growth was found. */
#define TR_E_DIFFERENCE 5

/** `trainrun verify ...`: argv[0] is "verify". `self` is the trainrun executable. */
int tr_cli_verify(int argc, char **argv);

/** `trainrun check ...`: argv[0] is "check". `self` is the path of the trainrun executable to run. */
int tr_cli_check(const char *self, int argc, char **argv);

#endif
