/*
 * test_cli_ux.c -- what a new user hit (issue 18), run the way they ran it: a pipe whose reader exits and a
 * terminal that hangs up (a pty whose master closes) stop the run cleanly with exit 4; the progress line fits an
 * 80- and a 160-column terminal (a pty of that size); plain lines carry a timestamp; `verify` without the
 * recording's command line; extending a finished run; config-level data errors.
 * No test sleeps to synchronise: each waits for a line or record to appear, with a bounded poll.
 */
#define _GNU_SOURCE /* forkpty */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "npy.h"
#include "support.h"
#include "trace.h"

TestSuite(cli_ux, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

static char out[1 << 17];

/* A small, fast run: 600 training samples, no validation, no test. */
#define SMALL "data.train_subset=700 data.val_size=100 eval.every_epoch=false eval.test_at_end=false"

/* Wait for `pid` to exit, at most `limit_s` seconds (a bounded poll, not a synchronisation sleep). Returns the
 * exit code, 128 + signal, or -1 on timeout (the process is then killed). */
static int wait_bounded(pid_t pid, double limit_s)
{
    struct timespec t0, now, nap = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st = 0;
        const pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        nanosleep(&nap, NULL);
    }
}

/* Read from fd into buf (appending at *len) until `needle` appears or the limit passes. 1 when found. */
static int read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle, double limit_s)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!strstr(buf, needle)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) > 0) {
            const ssize_t n = read(fd, buf + *len, cap - 1 - *len);
            if (n <= 0) return 0; /* EOF, or EIO once the slave side is gone */
            *len += (size_t)n;
            buf[*len] = '\0';
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) > limit_s || *len + 1 >= cap) return 0;
    }
    return 1;
}

/* Read whatever remains until EOF or EIO (the child exited). */
static void read_rest(int fd, char *buf, size_t cap, size_t *len)
{
    for (;;) {
        if (*len + 1 >= cap) return;
        const ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
}

/* argv for the CLI: the program then the words of `args` split at blanks (no quoting needed here). */
static void cli_argv(char *args, const char **argv, int max)
{
    int n = 0;
    argv[n++] = TR_CLI;
    for (char *save = NULL, *w = strtok_r(args, " ", &save); w && n < max - 1; w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
}

/* A finished or stopped run directory: its summary.json's status and whether it holds a checkpoint. */
static void expect_clean_stop(const char *run_dir, const char *why)
{
    char path[1024];
    static char text[1 << 16];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "\"status\":\"interrupted\"") != NULL, "%s: summary.json: %s", why, text);
    snprintf(path, sizeof path, "%s/checkpoints/step-*", run_dir);
    glob_t g;
    cr_expect_eq(glob(path, 0, NULL, &g), 0, "%s: no checkpoint in %s", why, run_dir);
    globfree(&g);
    cr_expect_geq(support_count_records(run_dir, "\"reason\":\"signal\""), 1, "%s: no signal checkpoint record", why);
}

/* 1. `trainrun ... 2>&1 | tee log`, and tee exits: the next write raises SIGPIPE, which must stop the run cleanly
 * (exit 4, checkpoint, summary.json), not kill it with status 141. */
Test(cli_ux, a_pipe_whose_reader_exits_stops_the_run_cleanly)
{
    support_require_fmnist();
    char args[1024];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml " SMALL " train.max_steps=1000000 log.every_steps=1 "
             "log.progress=always run.dir=%s run.name=pipe", support_tmpdir);
    const char *argv[64];
    cli_argv(args, argv, 64);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL); /* as a shell leaves it */
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (chdir(TR_SOURCE_DIR) != 0) _exit(126);
        execv(TR_CLI, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    out[0] = '\0';
    /* the reader sees training under way (a live progress line: "\r\033[Kstep ..."), then exits */
    const int seen = read_until(fds[0], out, sizeof out, &len, "\033[Kstep ", 300);
    close(fds[0]);
    const int code = wait_bounded(pid, 300);
    cr_assert(seen, "no progress line before the reader exited: %s", out);
    cr_assert_eq(code, 4, "exit %d (141 = killed by SIGPIPE) after the pipe's reader exited", code);
    expect_clean_stop(support_path("pipe"), "SIGPIPE");
}

/* A pty of `cols` columns with the CLI on its slave side (stdin, stdout, stderr: a terminal, as a user's). */
static pid_t spawn_on_pty(int cols, char *args, int *master)
{
    struct winsize ws = {.ws_row = 40, .ws_col = (unsigned short)cols};
    struct termios tio;
    memset(&tio, 0, sizeof tio);
    cfmakeraw(&tio); /* no \n -> \r\n translation: the bytes are the program's */
    const char *argv[64];
    cli_argv(args, argv, 64);
    const pid_t pid = forkpty(master, NULL, &tio, &ws);
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        unsetenv("COLUMNS");
        if (chdir(TR_SOURCE_DIR) != 0) _exit(126);
        execv(TR_CLI, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* 1. A dropped SSH session: the terminal hangs up (its master side closes), the kernel sends SIGHUP, and later
 * writes to it fail with EIO. The run must stop as on SIGINT: exit 4 with a checkpoint and summary.json. */
Test(cli_ux, a_terminal_hangup_stops_the_run_cleanly)
{
    support_require_fmnist();
    char args[1024];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml " SMALL " train.max_steps=1000000 log.every_steps=1 "
             "run.dir=%s run.name=hup", support_tmpdir);
    int master = -1;
    const pid_t pid = spawn_on_pty(100, args, &master);
    size_t len = 0;
    out[0] = '\0';
    const int seen = read_until(master, out, sizeof out, &len, "\033[Kstep ", 300);
    close(master); /* the hangup */
    const int code = wait_bounded(pid, 300);
    cr_assert(seen, "no progress line on the terminal: %s", out);
    cr_assert_eq(code, 4, "exit %d (129 = killed by SIGHUP) after the terminal hung up", code);
    expect_clean_stop(support_path("hup"), "SIGHUP");
}

/* The progress lines a live terminal got: each "\r\033[K" starts one; it ends at the next \r or \n. Writes them,
 * NUL-separated, into lines[] and returns how many, with the longest's length in *longest. */
static int progress_segments(const char *text, char lines[][512], int max, size_t *longest)
{
    int n = 0;
    *longest = 0;
    for (const char *p = strstr(text, "\r\033[K"); p && n < max; p = strstr(p + 1, "\r\033[K")) {
        const char *s = p + 4;
        const size_t len = strcspn(s, "\r\n");
        if (len == 0 || strncmp(s, "step ", 5) != 0) continue;
        snprintf(lines[n], 512, "%.*s", (int)(len < 511 ? len : 511), s);
        if (len > *longest) *longest = len;
        n++;
    }
    return n;
}

static void run_on_terminal(int cols, const char *name, char lines[][512], int *n, size_t *longest)
{
    support_require_fmnist();
    char args[1024];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml " SMALL " train.max_steps=40 log.every_steps=1 "
             "run.dir=%s run.name=%s", support_tmpdir, name);
    int master = -1;
    const pid_t pid = spawn_on_pty(cols, args, &master);
    size_t len = 0;
    out[0] = '\0';
    read_rest(master, out, sizeof out, &len);
    const int code = wait_bounded(pid, 300);
    close(master);
    cr_assert_eq(code, 0, "exit %d: %s", code, out);
    *n = progress_segments(out, lines, 64, longest);
    cr_assert_geq(*n, 1, "no progress line: %s", out);
}

/* 2. An 80-column terminal: every progress line fits in 79 columns (no wrap, no scrolling) and keeps step, loss
 * and the ETA; a 160-column one also shows the elapsed time and a bar. */
Test(cli_ux, the_progress_line_fits_80_and_160_columns)
{
    static char lines[64][512];
    int n = 0;
    size_t longest = 0;
    run_on_terminal(80, "w80", lines, &n, &longest);
    const char *last = lines[n - 1];
    cr_expect_leq(longest, 79, "a progress line of %zu columns on an 80-column terminal: '%s'", longest, last);
    cr_expect(strstr(last, "step 40/40") && strstr(last, "loss ") && strstr(last, "ETA "), "'%s'", last);

    run_on_terminal(160, "w160", lines, &n, &longest);
    last = lines[n - 1];
    cr_expect_leq(longest, 159, "'%s'", last);
    cr_expect_gt(strlen(last), 80, "the 160-column line uses the room: '%s'", last);
    cr_expect(strstr(last, "elapsed ") && strstr(last, "[") && strstr(last, "100%") && strstr(last, "ETA ") &&
                  strstr(last, "samples/s") && strstr(last, "epoch "),
              "'%s'", last);
}

/* 2. The formatter alone, with fixed figures: what each width keeps, and the order fields are dropped in. */
Test(cli_ux, progress_fields_drop_lowest_priority_first)
{
    const tr_progress p = {.step = 1234, .total = 5148, .epoch = 1, .loss = 0.41234, .accuracy = 0.8512,
                           .val_accuracy = 0.8601, .lr = 1.5e-4, .samples_per_s = 34210, .elapsed_s = 62,
                           .eta_s = 123};
    char line[512];
    tr_progress_format(&p, 160, line, sizeof line);
    cr_expect_str_eq(line, "step 1234/5148  [#######.......................]  24%  epoch 1  loss 0.4123  acc 0.8512  "
                           "val_acc 0.8601  lr 0.00015  34210 samples/s  elapsed 1m02s  ETA 2m03s");
    tr_progress_format(&p, 80, line, sizeof line);
    cr_expect_str_eq(line, "step 1234/5148  loss 0.4123  val_acc 0.8601  elapsed 1m02s  ETA 2m03s", "80 columns: '%s'",
                     line);
    cr_expect_leq(strlen(line), 79);
    tr_progress_format(&p, 40, line, sizeof line);
    cr_expect_str_eq(line, "step 1234/5148  loss 0.4123  ETA 2m03s");
    tr_progress_format(&p, 20, line, sizeof line);
    cr_expect_eq(strlen(line), 19, "a terminal too narrow: cut at 19 columns: '%s'", line);

    /* plain lines start with the local time */
    char plain[512];
    const time_t wall = 86400 * 365;
    tr_progress_format_plain(&p, wall, plain, sizeof plain);
    struct tm tm;
    char stamp[32];
    localtime_r(&wall, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    cr_expect(strncmp(plain, stamp, strlen(stamp)) == 0 && strstr(plain, "  step 1234/5148  epoch 1  loss 0.4123"),
              "'%s'", plain);
}

/* A 20-step SMALL run named `name` with the overrides `extra`, not on a terminal; what it printed into out[]. */
static void run_20_steps(const char *name, const char *extra)
{
    support_require_fmnist();
    char args[1024];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml " SMALL " train.max_steps=20 %s run.dir='%s' "
             "run.name=%s", extra, support_tmpdir, name);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
}

/* 2. Not a terminal: plain progress lines, each with a timestamp. */
Test(cli_ux, plain_progress_lines_are_timestamped)
{
    run_20_steps("plain", "");
    const char *line = strstr(out, "  step 20/20  epoch ");
    cr_assert_not_null(line, "%s", out);
    const char *bol = line;
    while (bol > out && bol[-1] != '\n') bol--;
    int y, mo, d, h, mi, s;
    cr_expect_eq(sscanf(bol, "%4d-%2d-%2d %2d:%2d:%2d  step", &y, &mo, &d, &h, &mi, &s), 6, "'%.120s'", bol);
    cr_expect_eq(line - bol, 19, "'%.120s'", bol);
}

/* 2. log.progress: never -- no progress line at all, not even the plain one; the summary still comes. */
Test(cli_ux, progress_never_prints_no_progress_line)
{
    run_20_steps("never", "log.progress=never");
    cr_expect_null(strstr(out, "step 20/20"), "%s", out);
    cr_expect_not_null(strstr(out, "steps           20"), "%s", out);
}

/* 3. `verify CONFIG TRACE` repeats the recording's overrides on its own, refuses a different config at once naming
 * the keys, and `--trace` into a folder that does not exist creates it. */
Test(cli_ux, verify_uses_the_recorded_config)
{
    support_require_fmnist();
    char args[2048], trace[600];
    /* a folder that does not exist yet, two levels deep */
    snprintf(trace, sizeof trace, "%s/golden/new/mlp.trace", support_tmpdir);
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml train.max_steps=30 " SMALL " run.dir='%s' "
             "run.name=rec --trace '%s'", support_tmpdir, trace);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);

    tr_trace t = {0};
    tr_error err = {0};
    cr_assert_eq(tr_trace_read(trace, &t, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(strlen(t.config_fingerprint), 64);
    cr_assert_not_null(t.config_yaml);
    cr_expect(strstr(t.config_yaml, "  max_steps: 30\n") != NULL, "%s", t.config_yaml);
    char joined[1024] = "";
    for (int i = 0; i < t.n_overrides; i++) {
        strcat(joined, t.overrides[i]);
        strcat(joined, " ");
    }
    cr_expect_str_eq(joined, "data.val_size=100 data.train_subset=700 train.max_steps=30 eval.every_epoch=false "
                             "eval.test_at_end=false ");
    tr_trace_free(&t);

    /* no overrides on the command line: the recorded ones are used, and it verifies bit for bit */
    snprintf(args, sizeof args, "verify configs/fashion_mnist_mlp.yaml '%s'", trace);
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "with the recording's overrides: ") && strstr(out, " train.max_steps=30 "), "%s", out);
    cr_expect(strstr(out, "verify: OK: 30 steps") != NULL, "%s", out);

    /* a different config fails at once, naming the keys, before any data is read or step taken */
    snprintf(args, sizeof args, "verify configs/fashion_mnist_mlp.yaml '%s' optim.lr=0.002 train.batch_size=32",
             trace);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "optim.lr 0.001 -> 0.002") && strstr(out, "train.batch_size 128 -> 32"), "%s", out);
    cr_expect_null(strstr(out, "parameters,"), "nothing may train: %s", out);

    /* --trace where no folder can be made: a config error naming log.trace, before the first step */
    support_write_file(support_path("file"), "x");
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml train.max_steps=30 " SMALL " run.dir='%s' "
             "run.name=bad --trace '%s/file/sub/x.trace'", support_tmpdir, support_tmpdir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "log.trace: ") && strstr(out, "cannot create directory"), "%s", out);
    cr_expect_eq(support_last_step(support_path("bad"), "train"), -1, "trained before failing: %s", out);
}

/* 3. Traces without the config records (written before they existed, or by PyTorch) still read and verify with
 * the overrides given on the command line. */
Test(cli_ux, verify_reads_traces_without_a_recorded_config)
{
    static const char *const refs[] = {"mlp_adamw_constant", "cnn_sgd_nesterov_cosine", "mlp_adam_clip_wd"};
    for (size_t i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/reference/%s.trace", TR_SOURCE_DIR, refs[i]);
        tr_trace t = {0};
        tr_error err = {0};
        cr_assert_eq(tr_trace_read(path, &t, &err), TR_OK, "%s", err.msg);
        cr_expect_eq(t.n_steps, 300, "%s", refs[i]);
        cr_expect_null(t.config_yaml);
        cr_expect_eq(t.n_overrides, 0);
        tr_trace_free(&t);
    }
    support_require_fmnist();
    char args[2048], trace[600], old_trace[600];
    snprintf(trace, sizeof trace, "%s/new.trace", support_tmpdir);
    snprintf(old_trace, sizeof old_trace, "%s/old.trace", support_tmpdir);
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml train.max_steps=20 " SMALL " run.dir='%s' "
             "run.name=rec --trace '%s'", support_tmpdir, trace);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    /* the old format: the same trace without its config, override and fingerprint records */
    snprintf(args, sizeof args, "grep -v -e '^config' -e '^override ' -e '^meta config_fingerprint' '%s' > '%s'",
             trace, old_trace);
    cr_assert_eq(system(args), 0);
    snprintf(args, sizeof args, "verify configs/fashion_mnist_mlp.yaml '%s' train.max_steps=20 " SMALL, old_trace);
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "verify: OK: 20 steps") != NULL, "%s", out);
    /* without them, a trace that holds no config is refused once the run is set up, before its first step */
    snprintf(args, sizeof args, "verify configs/fashion_mnist_mlp.yaml '%s' " SMALL, old_trace);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "holds 20 steps; this config trains 48") != NULL, "%s", out);
}

/* 4. Extending a finished run: config.yaml says what the run now is, the checkpoint warning names the keys, a
 * restarted cosine schedule is warned about, and the run's own config.yaml then finds it complete. */
Test(cli_ux, extending_a_finished_run_updates_its_config)
{
    support_require_fmnist();
    char args[2048];
    const char *run = support_path("ext");
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml train.max_steps=20 schedule.name=cosine "
             "schedule.warmup_steps=0 " SMALL " run.dir='%s' run.name=ext", support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml train.max_steps=30 schedule.name=cosine "
             "schedule.warmup_steps=0 " SMALL " run.dir='%s' run.name=ext", support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "the config differs from the checkpoint's: train.max_steps 20 -> 30 (checkpoint -> now)"),
              "%s", out);
    cr_expect(strstr(out, "warning: extending a finished run from 20 to 30 steps restarts its schedule: the cosine "
                          "schedule was planned for 20 steps"), "%s", out);
    cr_expect(strstr(out, "config.yaml updated: train.max_steps 20 -> 30") != NULL, "%s", out);
    char path[1024];
    static char text[1 << 16];
    snprintf(path, sizeof path, "%s/config.yaml", run);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "  max_steps: 30\n") != NULL, "%s", text);

    /* the run's own config: complete at 30, no warning about a differing config */
    snprintf(args, sizeof args, "'%s'", path);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "already complete (30 steps)") != NULL, "%s", out);
    cr_expect_null(strstr(out, "differs"), "%s", out);
}

/* 6. A data.root that does not exist is a config error naming the key (exit 2), like every config problem. */
Test(cli_ux, a_missing_data_root_names_the_key)
{
    char args[1024];
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml data.root=/nonexistent/fmnist run.dir='%s'",
             support_tmpdir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.root: /nonexistent/fmnist: No such file or directory") != NULL, "%s", out);
}

/* 6. The summary: the val figures say after which step they were taken, epochs are counted as trained. */
Test(cli_ux, the_summary_names_the_val_step_and_epochs_trained)
{
    support_require_fmnist();
    char args[1024];
    /* 1000 samples, 600 of them carved for validation: 400 to train on (warned), batch 64: 6 steps an epoch; 20
     * steps = 3.33 epochs (4 started) */
    snprintf(args, sizeof args, "configs/fashion_mnist_mlp.yaml train.batch_size=64 data.train_subset=1000 "
             "data.val_size=600 eval.test_at_end=false eval.every_epoch=false eval.every_steps=15 train.max_steps=20 "
             "run.dir='%s' run.name=sum", support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "warning: data.val_size 600 is carved from data.train_subset 1000: 400 samples are left "
                          "to train on") != NULL, "%s", out);
    cr_expect(strstr(out, "steps           20 (3.33 epochs)") != NULL, "%s", out);
    cr_expect(strstr(out, "(600 samples, after step 15)") != NULL, "%s", out);
}

/* The exit-code rule (trainrun --help, docs/exit_codes.md): every error caused by the user's input -- the config, a
 * data file, a model file -- exits 2 and names the config key that pointed at the file; 1 is for faults of the
 * machine (I/O, a full disk). One case per code of that pair here; 3, 4, 5, 9 and 11 have their own tests
 * (test_watchdog, this file's signal tests, test_reference, test_dist, test_run_dir). */
static const char *npy_config(const char *name, const char *inputs, const char *targets, const char *model)
{
    static char path[600];
    char text[2400];
    snprintf(text, sizeof text,
             "seed: 1\ndata: {format: npy, root: %s, train_inputs: %s, train_targets: %s, val_size: 0}\n"
             "model: {%s}\noptim: {name: sgd, lr: 0.05}\ntrain: {batch_size: 16, max_steps: 4}\n"
             "eval: {every_epoch: false, test_at_end: false}\nlog: {progress: never}\n"
             "checkpoint: {every_seconds: 0}\nrun: {dir: %s, name: %s}\n",
             support_tmpdir, inputs, targets, model, support_tmpdir, name);
    snprintf(path, sizeof path, "%s/%s.yaml", support_tmpdir, name);
    support_write_file(path, text);
    return path;
}

Test(cli_ux, exit_codes_user_input_is_2_naming_the_key_machine_faults_are_1)
{
    enum { n = 64, d = 4 };
    static float x[n * d];
    static int64_t y[n];
    static float yf[n];
    support_make_blobs(n, d, 2, 5, x, y);
    for (int i = 0; i < n; i++) yf[i] = (float)y[i];
    tr_error err = {0};
    const int64_t xs[] = {n, d}, ys[] = {n}, ys_short[] = {n - 1};
    cr_assert_eq(tr_npy_save(support_path("x.npy"), TR_NPY_FLOAT32, xs, 2, x, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("y.npy"), TR_NPY_INT64, ys, 1, y, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("yf.npy"), TR_NPY_FLOAT32, ys, 1, yf, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_npy_save(support_path("short.npy"), TR_NPY_INT64, ys_short, 1, y, &err), TR_OK, "%s", err.msg);
    y[7] = -1;
    cr_assert_eq(tr_npy_save(support_path("neg.npy"), TR_NPY_INT64, ys, 1, y, &err), TR_OK, "%s", err.msg);
    y[7] = 5; /* a class the 2-output model does not have */
    cr_assert_eq(tr_npy_save(support_path("five.npy"), TR_NPY_INT64, ys, 1, y, &err), TR_OK, "%s", err.msg);
    support_write_file(support_path("m.yaml"), "input: [4]\nlayers:\n  - linear: {in: 4, out: 2}\n");
    char model[700], args[1200];
    snprintf(model, sizeof model, "spec: %s", support_path("m.yaml"));

    static const struct {
        const char *inputs, *targets, *needle;
    } user[] = {
        {"./trian_x.npy", "y.npy", "data.train_inputs: "},
        {"x.npy", "neg.npy", "data.train_targets: "},
        {"x.npy", "yf.npy", "data.train_targets: "},
        {"x.npy", "short.npy", "data.train_targets: "},
    };
    static const char *const why[] = {"trian_x.npy: cannot open: No such file or directory", "is negative",
                                      "data.target: class needs [N] integer class indices", "63 targets but"};
    for (size_t i = 0; i < sizeof user / sizeof *user; i++) {
        snprintf(args, sizeof args, "'%s'", npy_config("u", user[i].inputs, user[i].targets, model));
        cr_expect_eq(support_cli(args, out, sizeof out), 2, "case %zu: %s", i, out);
        cr_expect(strstr(out, user[i].needle) && strstr(out, why[i]), "case %zu: '%s' ... '%s' in %s", i,
                  user[i].needle, why[i], out);
    }
    /* a label outside the model's classes names the file, the sample and the class */
    snprintf(args, sizeof args, "'%s'", npy_config("u", "x.npy", "five.npy", model));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "data.train_targets (five.npy): the training labels go up to 5, but the model (") &&
                  strstr(out, "has 2 outputs, classes 0 to 1; the first is training sample 7, class 5"),
              "%s", out);

    /* a model file that is not there: said as such, with its key */
    snprintf(args, sizeof args, "'%s'", npy_config("u", "x.npy", "y.npy", "torchscript: ./nope.pt"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "model.torchscript: ") && strstr(out, "nope.pt: No such file or directory"), "%s", out);
    cr_expect_null(strstr(out, "not a TorchScript archive"), "%s", out);

    /* a run that diverges says at which step, from what loss, and what to try; the records so far stay */
    support_write_file(support_path("m1.yaml"), "input: [4]\nlayers:\n  - linear: {in: 4, out: 1}\n");
    char model1[700];
    snprintf(model1, sizeof model1, "spec: %s", support_path("m1.yaml"));
    snprintf(args, sizeof args, "'%s' data.target=regression train.loss=mse optim.lr=1e3 train.max_steps=60 "
             "log.every_steps=100", npy_config("div", "x.npy", "yf.npy", model1));
    cr_expect_eq(support_cli(args, out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "the run diverged at step ") && strstr(out, "the last finite loss was ") &&
                  strstr(out, "Try a lower optim.lr (1000 now) or gradient clipping, optim.grad_clip_norm (e.g. 1.0)"),
              "%s", out);
    cr_expect_gt(support_count_records(support_path("div"), "\"type\":\"train\""), 0,
                 "the steps before the divergence are logged");

    /* the machine's fault: a full disk at the first checkpoint save exits 1 */
    snprintf(args, sizeof args, "'%s'", npy_config("disk", "x.npy", "y.npy", model));
    setenv("TRAINRUN_TEST_IO_FAULT", "1:1:ENOSPC:sticky", 1);
    const int code = support_cli(args, out, sizeof out);
    unsetenv("TRAINRUN_TEST_IO_FAULT");
    cr_expect_eq(code, 1, "%s", out);
    cr_expect(strstr(out, "No space left on device") != NULL, "%s", out);
}

/* A run that ends before the watchdog's warm-up is over says which warm-up it was and how long it lasts; the last
 * train loss is printed with significant digits. */
Test(cli_ux, a_run_shorter_than_the_watchdog_warmup_says_which_warmup)
{
    support_require_fmnist();
    char args[1024];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml " SMALL " train.max_steps=5 log.progress=never "
             "watchdog.warmup_steps=50 run.dir='%s' run.name=w",
             support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "no baseline: the run ended during the watchdog's warm-up, which lasts "
                          "watchdog.warmup_steps = 50 steps") != NULL,
              "%s", out);
    const char *l = strstr(out, "last train loss ");
    cr_assert_not_null(l, "%s", out);
    char want[64], path[600], json[1 << 14];
    snprintf(path, sizeof path, "%s/w/summary.json", support_tmpdir);
    support_read_file(path, json, sizeof json);
    const char *v = strstr(json, "\"last_loss\":");
    cr_assert_not_null(v, "%s", json);
    snprintf(want, sizeof want, "last train loss %.4g\n", strtod(v + 12, NULL));
    cr_expect(strncmp(l, want, strlen(want)) == 0, "want '%s' in %s", want, l);
}
