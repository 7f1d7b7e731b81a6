/*
 * launch.h -- `trainrun --nproc N [--nnodes M --node-rank K --master-addr HOST --master-port PORT] CONFIG
 * [key=value ...]`: this node's N ranks of one data-parallel run (dist.h).
 */
#ifndef TR_LAUNCH_H
#define TR_LAUNCH_H

/**
 * argv[0..argc) are the launcher's options followed by CONFIG and its overrides. Options, with torchrun's names and
 * meanings (`--name V` or `--name=V`, '-' or '_' inside the name): --nproc N (or --nproc-per-node N, required, in
 * [1, 256]) ranks on this node; --nnodes M (default 1) nodes in all; --node-rank K (default 0, below M) this node's
 * index; --master-addr HOST (default 127.0.0.1) where rank 0 (on node 0) serves the store; --master-port PORT
 * (default: 29500 when M > 1, else a free port on 127.0.0.1).
 * Starts N copies of the executable `self` with CONFIG and the overrides, each with the environment torchrun sets
 * (RANK = K x N + LOCAL_RANK, LOCAL_RANK = 0..N-1, WORLD_SIZE = M x N, LOCAL_WORLD_SIZE = N, GROUP_RANK = K,
 * MASTER_ADDR, MASTER_PORT), in a process group of its own and with SIGTERM as its parent-death signal. SIGINT,
 * SIGHUP and SIGTERM sent to the launcher are forwarded to every local rank (which then stop together with the
 * other nodes' at the same step and save a checkpoint). When a local rank fails (killed by a signal, or an exit
 * code other than 0, 3 and 4), the others are given the config's dist.timeout_seconds + 1 s to notice on their own
 * (their collectives fail at once when a peer's sockets close, and time out after dist.timeout_seconds at worst),
 * then get SIGTERM, and SIGKILL 10 seconds later; all are reaped. A rank on another node that fails makes this
 * node's ranks fail in their next collective (exit code 9). The config (CONFIG with the key=value overrides) is
 * loaded first: an error in it is reported once, with exit code 2, before any rank starts.
 * Returns the exit code: the first failed local rank's code (128 + signal for a rank killed by a signal),
 * otherwise the first local rank's (0, 3 watchdog, 4 interrupted). Usage errors (a bad option, fork failure)
 * return 2 or 1 with a message.
 */
int tr_cli_launch(const char *self, int argc, char **argv);

#endif
