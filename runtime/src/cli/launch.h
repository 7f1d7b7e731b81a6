/*
 * launch.h -- `trainrun --nproc N CONFIG [key=value ...]`: N local ranks of one data-parallel run (dist.h).
 */
#ifndef TR_LAUNCH_H
#define TR_LAUNCH_H

/**
 * Start `nproc` copies of the executable `self` with arguments argv[0..argc) (CONFIG and overrides), each with
 * the environment torchrun sets (RANK = LOCAL_RANK = 0..N-1, WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1, MASTER_PORT
 * = a free TCP port), in a process group of its own and with SIGTERM as its parent-death signal. SIGINT, SIGHUP and
 * SIGTERM sent to the launcher are forwarded to every rank (which then stop together at the same step and save
 * a checkpoint). When a rank fails (killed by a signal, or an exit code other than 0, 3 and 4), the others are
 * given the config's dist.timeout_seconds + 1 s to notice on their own (their collectives fail at once when a peer's
 * sockets close, and time out after dist.timeout_seconds at worst), then get SIGTERM, and SIGKILL 10 seconds
 * later; all are reaped. The config (argv[0] with the key=value overrides) is loaded first: an error in it is
 * reported once, with exit code 2, before any rank starts.
 * Returns the exit code: the first failed rank's code (128 + signal for a rank killed by a signal), otherwise
 * rank 0's (0, 3 watchdog, 4 interrupted). Usage errors (bad N, fork failure) return 2 or 1 with a message.
 */
int tr_cli_launch(const char *self, const char *nproc, int argc, char **argv);

#endif
