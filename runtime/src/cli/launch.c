/*
 * launch.c -- `trainrun --nproc N`: fork/exec N local ranks, forward signals, reap them (see launch.h).
 */
#define _GNU_SOURCE /* prctl's PR_SET_PDEATHSIG, sigtimedwait */
#include "launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "error.h"

#define TR_LAUNCH_MAX 256

/* A TCP port on 127.0.0.1 that is free now (bound to port 0, read back, closed); rank 0's TCPStore takes it. */
static int free_port(void)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An exit that is part of the run's plan: success, watchdog stop, interrupted (checkpoint saved). */
static int orderly(int code) { return code == TR_OK || code == TR_E_WATCHDOG || code == TR_E_SIGNAL; }

/* One launcher option's value: `--name V` or `--name=V`, the name with '-' or '_' (torchrun accepts both). Returns
 * 1 and moves *i past it when argv[*i] is the option `name` (given with '-'), 0 otherwise; *value is NULL when the
 * value is missing. */
static int option(const char *name, int argc, char **argv, int *i, const char **value)
{
    const char *a = argv[*i];
    size_t k = 0;
    for (; name[k]; k++)
        if (a[k] != name[k] && !(name[k] == '-' && k > 1 && a[k] == '_')) return 0;
    if (a[k] == '=') {
        *value = a + k + 1;
        return 1;
    }
    if (a[k] != '\0') return 0;
    *value = *i + 1 < argc ? argv[++*i] : NULL;
    return 1;
}

/* An option's integer value in [lo, hi], or -1 after a message naming the option. */
static long option_int(const char *name, const char *value, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    const long x = value ? strtol(value, &end, 10) : 0;
    if (!value || errno || end == value || *end || x < lo || x > hi) {
        fprintf(stderr, "trainrun: %s takes an integer in [%ld, %ld], got '%s'\n", name, lo, hi, value ? value : "");
        return -1;
    }
    return x;
}

int tr_cli_launch(const char *self, int argc, char **argv)
{
    long n = 0, nnodes = 1, node_rank = 0, master_port = 0;
    const char *master_addr = NULL;
    int ai = 0;
    for (; ai < argc && strncmp(argv[ai], "--", 2) == 0; ai++) {
        const char *v = NULL;
        if (option("--nproc", argc, argv, &ai, &v) || option("--nproc-per-node", argc, argv, &ai, &v)) {
            if ((n = option_int("--nproc", v, 1, TR_LAUNCH_MAX)) < 0) return TR_E_CONFIG;
        } else if (option("--nnodes", argc, argv, &ai, &v)) {
            if ((nnodes = option_int("--nnodes", v, 1, 65536)) < 0) return TR_E_CONFIG;
        } else if (option("--node-rank", argc, argv, &ai, &v)) {
            if ((node_rank = option_int("--node-rank", v, 0, 65535)) < 0) return TR_E_CONFIG;
        } else if (option("--master-port", argc, argv, &ai, &v)) {
            if ((master_port = option_int("--master-port", v, 1, 65535)) < 0) return TR_E_CONFIG;
        } else if (option("--master-addr", argc, argv, &ai, &v)) {
            if (!v || !*v) {
                fprintf(stderr, "trainrun: --master-addr takes a host name or address\n");
                return TR_E_CONFIG;
            }
            master_addr = v;
        } else {
            fprintf(stderr,
                    "trainrun: unknown launcher option '%s' (--nproc, --nnodes, --node-rank, --master-addr, "
                    "--master-port)\n",
                    argv[ai]);
            return TR_E_CONFIG;
        }
    }
    if (n == 0) {
        fprintf(stderr, "trainrun: the launcher needs --nproc N, the ranks of this node\n");
        return TR_E_CONFIG;
    }
    if (node_rank >= nnodes) {
        fprintf(stderr, "trainrun: --node-rank %ld is not below --nnodes %ld\n", node_rank, nnodes);
        return TR_E_CONFIG;
    }
    if (nnodes * n > (1L << 20)) {
        fprintf(stderr, "trainrun: --nnodes x --nproc is %ld ranks, more than %ld\n", nnodes * n, 1L << 20);
        return TR_E_CONFIG;
    }
    argc -= ai;
    argv += ai;
    if (argc < 1 || argv[0][0] == '-') {
        fprintf(stderr, "usage: trainrun --nproc N [--nnodes M --node-rank K --master-addr HOST --master-port PORT] "
                        "CONFIG.yaml [key.path=value ...]\n");
        return TR_E_CONFIG;
    }
    /* The config is loaded here first: its errors are reported once, not by every rank, and dist.timeout_seconds
     * sets how long the other ranks get to notice a failed one on their own (a collective fails at once when a
     * peer's sockets close, and times out after dist.timeout_seconds at worst) before they are sent SIGTERM. */
    tr_config *cfg = malloc(sizeof *cfg);
    char **overrides = calloc((size_t)argc, sizeof *overrides);
    if (!cfg || !overrides) {
        free(cfg);
        free(overrides);
        return TR_E_RUNTIME;
    }
    int n_over = 0;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-' && strchr(argv[i], '=')) overrides[n_over++] = argv[i];
        else if (strcmp(argv[i], "--trace") == 0) i++; /* --trace FILE: the ranks' business */
    tr_error err = {0};
    const int load_rc = tr_config_load_cli(cfg, argv[0], overrides, n_over, &err);
    const double grace = cfg->dist.timeout_seconds + 1.0; /* + 1 s: a rank timing out itself wins the race */
    free(cfg);
    free(overrides);
    if (load_rc) {
        fprintf(stderr, "trainrun: %s\n", err.msg);
        return load_rc;
    }
    /* torchrun's defaults: 127.0.0.1 and port 29500 -- except that one node without --master-port takes a free
     * port, so that runs side by side on one machine do not collide */
    if (!master_addr) master_addr = "127.0.0.1";
    const int port = master_port ? (int)master_port : nnodes > 1 ? 29500 : free_port();
    if (port <= 0) {
        fprintf(stderr, "trainrun: --nproc: no free TCP port on 127.0.0.1: %s\n", strerror(errno));
        return TR_E_RUNTIME;
    }
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return TR_E_RUNTIME;
    args[0] = (char *)self;
    for (int i = 0; i < argc; i++) args[i + 1] = argv[i];

    /* Signals are taken synchronously (sigtimedwait) in the launcher; each rank gets the default mask back. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);  /* a closed terminal: forwarded, the ranks stop cleanly as on SIGINT */
    sigaddset(&set, SIGPIPE); /* a closed pipe: taken here and dropped; each rank meets it on its own writes */
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);

    pid_t pids[TR_LAUNCH_MAX];
    int codes[TR_LAUNCH_MAX], alive = 0;
    const pid_t launcher = getpid();
    for (int r = 0; r < n; r++) {
        codes[r] = -1;
        const pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "trainrun: --nproc: fork: %s\n", strerror(errno));
            for (int k = 0; k < r; k++) kill(pids[k], SIGKILL);
            for (int k = 0; k < r; k++) waitpid(pids[k], NULL, 0);
            free(args);
            return TR_E_RUNTIME;
        }
        if (pid == 0) {
            char v[32];
            setpgid(0, 0); /* a terminal's Ctrl-C reaches the launcher only; it forwards it once */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != launcher) _exit(TR_E_RUNTIME); /* the launcher died before prctl */
            snprintf(v, sizeof v, "%ld", node_rank * n + r);
            setenv("RANK", v, 1);
            snprintf(v, sizeof v, "%d", r);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%ld", nnodes * n);
            setenv("WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%ld", n);
            setenv("LOCAL_WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%ld", node_rank);
            setenv("GROUP_RANK", v, 1);
            setenv("MASTER_ADDR", master_addr, 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            sigprocmask(SIG_SETMASK, &old, NULL);
            execv(self, args);
            fprintf(stderr, "trainrun: --nproc: cannot run %s: %s\n", self, strerror(errno));
            _exit(TR_E_RUNTIME);
        }
        pids[r] = pid;
        alive++;
    }
    free(args);

    int first_failed = -1, failure_code = 0, termed = 0, killed = 0;
    double failed_at = 0.0;
    while (alive > 0) {
        const struct timespec tick = {0, 200 * 1000 * 1000};
        siginfo_t info;
        const int sig = sigtimedwait(&set, &info, &tick);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            for (int r = 0; r < n; r++)
                if (codes[r] < 0) kill(pids[r], sig);
        }
        pid_t pid;
        int status;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int r = 0; r < n; r++) {
                if (pids[r] != pid || codes[r] >= 0) continue;
                codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                alive--;
                if (first_failed < 0 && (WIFSIGNALED(status) || !orderly(codes[r]))) {
                    first_failed = r;
                    failure_code = codes[r];
                    failed_at = mono_now();
                    if (WIFSIGNALED(status))
                        fprintf(stderr,
                                "trainrun: rank %ld (pid %ld) was killed by signal %d; stopping the other "
                                "ranks\n",
                                node_rank * n + r, (long)pid, WTERMSIG(status));
                    else
                        fprintf(stderr, "trainrun: rank %ld (pid %ld) exited with code %d; stopping the other ranks\n",
                                node_rank * n + r, (long)pid, codes[r]);
                }
            }
        }
        if (first_failed >= 0 && alive > 0) {
            const double waited = mono_now() - failed_at;
            const int sig_now = waited >= grace + 10.0 && !killed ? SIGKILL : waited >= grace && !termed ? SIGTERM : 0;
            if (sig_now) {
                for (int r = 0; r < n; r++)
                    if (codes[r] < 0) kill(pids[r], sig_now);
                if (sig_now == SIGKILL) killed = 1;
                else termed = 1;
            }
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (first_failed >= 0) {
        for (int r = 0; r < n; r++)
            if (r != first_failed)
                fprintf(stderr, "trainrun: rank %ld exited with code %d\n", node_rank * n + r, codes[r]);
        return failure_code;
    }
    return codes[0];
}
