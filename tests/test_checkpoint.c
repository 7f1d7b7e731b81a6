/*
 * test_checkpoint.c -- a killed run resumes bit for bit; no kill leaves an unloadable checkpoint; corrupt
 * checkpoints are detected and skipped; time-based checkpoints come at exact steps of a fake clock and carry their
 * timer across a resume, and progress lines follow the same clock; generator state round-trips; saving keeps no
 * memory; a checkpoint of another model is refused key by key.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "run.h"
#include "safetensors.h"
#include "support.h"
#include "trainrun_shim.h"

TestSuite(checkpoint, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

#define MAX_ARGS 40

/* argv for the CLI: the MLP config on a subset, every record logged, into the temp dir as run `name`. */
static void base_args(const char **argv, char *buf, size_t bufsize, const char *name, const char *const *extra)
{
    int n = 0;
    argv[n++] = "configs/fashion_mnist_mlp.yaml";
    static const char *const common[] = {"data.train_subset=3000", "data.val_size=500", "eval.test_at_end=false",
                                         "train.batch_size=64",    "log.every_steps=1", "log.progress=never",
                                         "eval.every_epoch=false", "eval.every_steps=100", NULL};
    for (int i = 0; common[i]; i++) {
        /* a key that `extra` sets is left out here: the CLI refuses the same key twice */
        const size_t klen = strcspn(common[i], "=");
        int overridden = 0;
        for (int j = 0; extra && extra[j] && !overridden; j++)
            overridden = strncmp(common[i], extra[j], klen) == 0 && extra[j][klen] == '=';
        if (!overridden) argv[n++] = common[i];
    }
    for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
    snprintf(buf, bufsize, "run.dir=%s", support_tmpdir);
    argv[n++] = buf;
    snprintf(buf + 512, bufsize - 512, "run.name=%s", name);
    argv[n++] = buf + 512;
    argv[n] = NULL;
}

static void run_dir_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", support_tmpdir, name); }

static void log_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s.log", support_tmpdir, name); }

/* Run to the end; assert exit code. */
static void run_cli(const char *name, const char *const *extra, int expect)
{
    const char *argv[MAX_ARGS];
    char buf[1024], log[600];
    base_args(argv, buf, sizeof buf, name, extra);
    log_of(log, sizeof log, name);
    const int code = support_wait(support_spawn(argv, log));
    cr_assert_eq(code, expect, "trainrun %s exited %d (log %s)", name, code, log);
}

/* Run until the end of step `kill_step`, where the run sends itself SIGKILL (TRAINRUN_KILL_AT_STEP, run.c): an
 * exact step, however loaded the machine. Returns the step of the last train record (the kill step). */
static long long run_and_kill(const char *name, const char *const *extra, long long kill_step)
{
    const char *argv[MAX_ARGS];
    char buf[1024], log[600], dir[600], at_step[32];
    base_args(argv, buf, sizeof buf, name, extra);
    log_of(log, sizeof log, name);
    run_dir_of(dir, sizeof dir, name);
    snprintf(at_step, sizeof at_step, "%lld", kill_step);
    setenv("TRAINRUN_KILL_AT_STEP", at_step, 1);
    const int code = support_wait(support_spawn(argv, log));
    unsetenv("TRAINRUN_KILL_AT_STEP");
    cr_assert_eq(code, 128 + SIGKILL, "%s: exit %d, not killed at step %lld (log %s)", name, code, kill_step, log);
    return support_last_step(dir, "train");
}

/* The final checkpoint's model.safetensors digest from its manifest. */
static void final_model_sha(const char *name, long long step, char *out, size_t n)
{
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s/checkpoints/step-%010lld", support_tmpdir, name, step);
    support_manifest_digest(dir, "model.safetensors", out);
    cr_assert_eq(strlen(out), 32, "no XXH3-128 model digest in %s/MANIFEST.json", dir);
    (void)n;
}

/* Field `field` of every train record after the last resume record (or of all when there is none), by step. */
static int records_after_resume(const char *dir, const char *field, double *val, double *steps, int max)
{
    static double all_v[8192], all_s[8192];
    const int n = support_read_field(dir, "train", field, all_v, all_s, 8192);
    double resume_step[16];
    const int nr = support_read_field(dir, "resume", "step", resume_step, NULL, 16);
    cr_assert_geq(nr, 1, "%s shows no resume", dir);
    /* records are appended: those written after the resume are the last ones with step > the resume step, and
     * they form the run's tail; find the start of that tail */
    int start = n - 1;
    while (start > 0 && all_s[start - 1] == all_s[start] - 1 && all_s[start - 1] > resume_step[nr - 1]) start--;
    int k = 0;
    for (int i = start; i < n && k < max; i++, k++) {
        val[k] = all_v[i];
        steps[k] = all_s[i];
    }
    return k;
}

static void check_resume_case(const char *name, const char *const *extra)
{
    support_require_fmnist();
    char straight[64], killed[64], dir_s[600], dir_k[600];
    snprintf(straight, sizeof straight, "%s-straight", name);
    snprintf(killed, sizeof killed, "%s-killed", name);
    const char *args[16];
    int n = 0;
    args[n++] = "train.max_steps=600";
    args[n++] = "checkpoint.every_steps=50";
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;

    run_cli(straight, args, 0);
    support_seed(name);
    const long long target = 100 + rand() % 401; /* a random step in [100, 500] */
    fprintf(stderr, "%s: SIGKILL at the end of step %lld\n", name, target);
    const long long at = run_and_kill(killed, args, target);
    cr_assert_eq(at, target, "the last train record is of step %lld", at);
    run_cli(killed, args, 0);

    run_dir_of(dir_s, sizeof dir_s, straight);
    run_dir_of(dir_k, sizeof dir_k, killed);
    double resume_step[4], resume_pos[4];
    cr_assert_eq(support_read_field(dir_k, "resume", "step", resume_step, NULL, 4), 1);
    support_read_field(dir_k, "resume", "position", resume_pos, NULL, 4);
    cr_expect_gt(resume_pos[0], 0.0, "the resume lands mid-epoch (39 steps an epoch, checkpoints every 50)");
    /* checkpoints every 50 steps, written in the background (checkpoint.async, the default): the newest one at or
     * before the kill, c, may still have been in flight when the kill landed, so the resume is from c or from the
     * one before it (a save waits for the previous one to complete before it starts) */
    const double c = (double)(at / 50 * 50);
    cr_expect(resume_step[0] == c || resume_step[0] == c - 50, "killed at the end of step %lld: resumed from step %.0f",
              at, resume_step[0]);

    /* every logged loss and lr after the resume point equals the uninterrupted run's, bit for bit */
    static double ls[1024], ss[1024], lk[1024], sk[1024], lrs[1024], lrk[1024], es[1024], ek[1024];
    cr_assert_eq(support_read_field(dir_s, "train", "loss", ls, ss, 1024), 600);
    support_read_field(dir_s, "train", "lr", lrs, NULL, 1024);
    support_read_field(dir_s, "train", "epoch", es, NULL, 1024);
    const int nk = records_after_resume(dir_k, "loss", lk, sk, 1024);
    records_after_resume(dir_k, "lr", lrk, sk, 1024);
    records_after_resume(dir_k, "epoch", ek, sk, 1024);
    cr_assert_eq(nk, 600 - (int)resume_step[0]);
    for (int i = 0; i < nk; i++) {
        const int s = (int)sk[i] - 1;
        cr_assert_eq(sk[i], ss[s]);
        cr_assert_eq(lk[i], ls[s], "%s step %d: loss %a resumed vs %a straight", name, s + 1, lk[i], ls[s]);
        cr_assert_eq(lrk[i], lrs[s], "%s step %d: lr %a vs %a", name, s + 1, lrk[i], lrs[s]);
        cr_assert_eq(ek[i], es[s], "%s step %d: epoch %g vs %g", name, s + 1, ek[i], es[s]);
    }
    /* final parameters byte-identical */
    char sha_s[65], sha_k[65];
    final_model_sha(straight, 600, sha_s, sizeof sha_s);
    final_model_sha(killed, 600, sha_k, sizeof sha_k);
    cr_expect_str_eq(sha_k, sha_s, "%s: final parameters differ", name);
}

/* The config fingerprint follows the model file although it is remembered between saves: a changed content (same
 * size), a changed content with its mtime set back to the remembered one by hand, and a changed config key each
 * give another fingerprint; the unchanged file and config give the same one again. */
static void write_spec(const char *path, const char *text, time_t mtime)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
    const struct timespec t[2] = {{.tv_sec = mtime}, {.tv_sec = mtime}};
    cr_assert_eq(utimensat(AT_FDCWD, path, t, 0), 0, "%s", path);
}

Test(checkpoint, fingerprint_follows_the_model_file)
{
    const char *spec = support_path("fp_model.yaml");
    const time_t past = 1577836800; /* 2020-01-01: settled, so the fingerprint is remembered */
    write_spec(spec, "input: [4]\nlayers:\n  - linear: {in: 4, out: 2}\n", past);
    tr_config cfg;
    tr_config_defaults(&cfg);
    snprintf(cfg.model.spec, sizeof cfg.model.spec, "%s", spec);
    tr_error err = {0};
    char a[65], b[65], c[65], d[65], e[65];
    cr_assert_eq(tr_config_fingerprint(&cfg, a, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_config_fingerprint(&cfg, b, &err), TR_OK, "%s", err.msg);
    cr_expect_str_eq(a, b, "the same config and file: the same fingerprint");
    write_spec(spec, "input: [4]\nlayers:\n  - linear: {in: 4, out: 3}\n", past); /* same size, mtime set back */
    cr_assert_eq(tr_config_fingerprint(&cfg, c, &err), TR_OK, "%s", err.msg);
    cr_expect_str_neq(c, a, "the file changed (its ctime did): another fingerprint");
    write_spec(spec, "input: [4]\nlayers:\n  - linear: {in: 4, out: 5}\n", time(NULL)); /* a fresh change */
    cr_assert_eq(tr_config_fingerprint(&cfg, d, &err), TR_OK, "%s", err.msg);
    cr_expect_str_neq(d, c);
    cr_expect_str_neq(d, a);
    cfg.optim.lr *= 2;
    cr_assert_eq(tr_config_fingerprint(&cfg, e, &err), TR_OK, "%s", err.msg);
    cr_expect_str_neq(e, d, "optim.lr changed: another fingerprint");
    cfg.optim.lr /= 2;
    write_spec(spec, "input: [4]\nlayers:\n  - linear: {in: 4, out: 2}\n", past);
    cr_assert_eq(tr_config_fingerprint(&cfg, b, &err), TR_OK, "%s", err.msg);
    cr_expect_str_eq(b, a, "the first file and config again: the first fingerprint");
}

Test(checkpoint, resume_is_bit_identical_sgd_momentum_dampening)
{
    const char *const extra[] = {"optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.dampening=0.1",
                                 "optim.weight_decay=1e-4", NULL};
    check_resume_case("sgd", extra);
}

Test(checkpoint, resume_is_bit_identical_sgd_nesterov)
{
    const char *const extra[] = {"optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.nesterov=true",
                                 NULL};
    check_resume_case("nesterov", extra);
}

/* With data augmentation: its draws depend on (seed, epoch, sample) only, so the resumed run's batches match too. */
Test(checkpoint, resume_is_bit_identical_adam_augmented)
{
    const char *const extra[] = {"optim.name=adam", "optim.weight_decay=1e-4", "data.augment.crop_padding=2",
                                 "data.augment.hflip=0.5", NULL};
    check_resume_case("adam", extra);
}

Test(checkpoint, resume_is_bit_identical_adamw_cosine_warmup_dropout)
{
    /* configs/fashion_mnist_mlp.yaml: AdamW, cosine with 200 warm-up steps, dropout 0.2 in models/mlp.yaml; amsgrad adds
 * the max_exp_avg_sq state */
    const char *const extra[] = {"optim.name=adamw", "optim.amsgrad=true", "schedule.name=cosine",
                                 "schedule.warmup_steps=200", NULL};
    check_resume_case("adamw", extra);
}

/* ------------------------------------------------------------------------------------------------ crash safety */

static int newest_complete(const char *run_dir, long long *step)
{
    char path[TR_PATH_MAX];
    tr_error err = {0};
    tr_checkpoint_find_latest(run_dir, path, NULL, NULL, &err);
    if (!path[0]) return 0;
    *step = strtoll(strrchr(path, '-') + 1, NULL, 10);
    return 1;
}

Test(checkpoint, fifty_kills_never_leave_an_unloadable_checkpoint)
{
    support_require_fmnist();
    char model[600], kv[700], dir[600], log[600];
    snprintf(model, sizeof model, "%s/tiny.yaml", support_tmpdir);
    support_write_file(model, "input: [1, 28, 28]\nlayers:\n  - flatten\n  - linear: {in: 784, out: 32}\n"
                              "  - relu\n  - dropout: {p: 0.1}\n  - linear: {in: 32, out: 10}\n");
    snprintf(kv, sizeof kv, "model.spec=%s", model);
    const char *const extra[] = {"train.max_steps=100000", "checkpoint.every_steps=1", "checkpoint.keep_last=2",
                                 "data.train_subset=1000", "data.val_size=100", "log.every_steps=10", kv, NULL};
    const char *argv[MAX_ARGS];
    char buf[1024];
    base_args(argv, buf, sizeof buf, "crash", extra);
    run_dir_of(dir, sizeof dir, "crash");
    log_of(log, sizeof log, "crash");
    support_seed("fifty kills: kill moments"); /* the moments are drawn; where each lands still depends on timing */
    int resumed = 0;
    for (int k = 0; k < 50; k++) {
        long long expect = -1;
        const int had = newest_complete(dir, &expect);
        const int pid = support_spawn(argv, log);
        /* Let it get past start-up (it has resumed, or on the first start written a checkpoint), so every kill
         * lands while checkpoints are being written, at a random moment up to 200 ms into training. */
        const struct timespec poll = {0, 2000000};
        long long dummy;
        for (int i = 0; i < 10000; i++) {
            double rs[256];
            const int nr = had ? support_read_field(dir, "resume", "step", rs, NULL, 256) : 0;
            if ((had && nr > resumed) || (!had && newest_complete(dir, &dummy))) break;
            nanosleep(&poll, NULL);
        }
        const struct timespec wait = {0, (long)(rand() % 200) * 1000000L};
        nanosleep(&wait, NULL);
        kill(pid, SIGKILL);
        support_wait(pid);
        /* every complete checkpoint verifies; the newest is what the next start resumes from */
        DIR *d = NULL;
        char root[700];
        snprintf(root, sizeof root, "%s/checkpoints", dir);
        if ((d = opendir(root))) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (strncmp(e->d_name, "step-", 5) != 0) continue;
                char p[1000];
                tr_error err = {0};
                snprintf(p, sizeof p, "%s/%s", root, e->d_name);
                cr_assert_eq(tr_checkpoint_verify(p, &err), TR_OK, "after kill %d: %s", k, err.msg);
            }
            closedir(d);
        }
        if (had) {
            double rs[256];
            const int nr = support_read_field(dir, "resume", "step", rs, NULL, 256);
            if (nr > resumed) { /* this start got as far as resuming */
                cr_assert_eq((long long)rs[nr - 1], expect, "kill %d: resumed from step %.0f, newest complete was %lld",
                             k, rs[nr - 1], expect);
                resumed = nr;
            }
        }
    }
    cr_expect_eq(resumed, 49, "every restart after the first resumes: %d of 49 did", resumed);
}

static void append(void *ctx, const char *msg)
{
    strncat(ctx, msg, 4096 - strlen(ctx) - 2);
    strcat(ctx, "\n");
}

Test(checkpoint, corrupt_and_truncated_checkpoints_are_detected_and_skipped)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=150", "checkpoint.every_steps=50", NULL};
    run_cli("corrupt", extra, 0);
    char dir[600], p[900], latest[TR_PATH_MAX];
    run_dir_of(dir, sizeof dir, "corrupt");
    tr_error err = {0};
    cr_assert_eq(tr_checkpoint_find_latest(dir, latest, NULL, NULL, &err), TR_OK);
    cr_assert(strstr(latest, "step-0000000150") != NULL, "%s", latest);

    /* flip one byte in the newest checkpoint's parameters */
    snprintf(p, sizeof p, "%s/checkpoints/step-0000000150/model.safetensors", dir);
    support_flip_byte(p, 5000, SEEK_SET, 0x01);
    /* truncate the next one's optimizer state */
    snprintf(p, sizeof p, "%s/checkpoints/step-0000000100/optimizer.safetensors", dir);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, st.st_size / 2), 0);

    static char warnings[4096];
    warnings[0] = '\0';
    cr_assert_eq(tr_checkpoint_find_latest(dir, latest, append, warnings, &err), TR_OK);
    cr_expect(strstr(latest, "step-0000000050") != NULL, "fell back to %s", latest);
    cr_expect(strstr(warnings, "step-0000000150") && strstr(warnings, "model.safetensors") &&
                  strstr(warnings, "corrupted"),
              "%s", warnings);
    cr_expect(strstr(warnings, "step-0000000100") && strstr(warnings, "optimizer.safetensors") &&
                  strstr(warnings, "truncated"),
              "%s", warnings);

    /* and the CLI resumes from the good one, naming the bad ones */
    const char *const more[] = {"train.max_steps=200", "checkpoint.every_steps=50", NULL};
    run_cli("corrupt", more, 0);
    double rs[4];
    cr_assert_eq(support_read_field(dir, "resume", "step", rs, NULL, 4), 1);
    cr_expect_eq(rs[0], 50.0);
    char log[600], out[16384];
    log_of(log, sizeof log, "corrupt");
    support_read_file(log, out, sizeof out);
    cr_expect(strstr(out, "skipping checkpoint") && strstr(out, "step-0000000150"), "%s", out);
}

/* ------------------------------------------------------------------------------------------------ wall clock */

/* A fake clock (tr_run_data.clock): the test sets the time; the run reads nothing else. */
typedef struct fake_clock {
    double now;
} fake_clock;

static double fake_now(void *ctx) { return ((fake_clock *)ctx)->now; }

/* Take steps until the run's step is `to`, the clock standing at origin + (step - from) * dt during each step. */
static void steps_at(tr_run_state *run, fake_clock *clk, double origin, long long from, long long to, double dt)
{
    tr_error err = {0};
    for (long long k = from + 1; k <= to; k++) {
        clk->now = origin + (double)(k - from) * dt;
        cr_assert_eq(tr_run_step(run, &err), TR_OK, "step %lld: %s", k, err.msg);
    }
}

Test(checkpoint, every_seconds_saves_at_exact_steps_and_the_timer_survives_resume)
{
    support_require_fmnist();
    /* 0.25 s a step (exact in binary) and a checkpoint every second of training time: steps 4 and 8; a stop at
     * step 10 saves there (2.5 s); the resumed process starts its clock at 1000 s, and its first interval
     * checkpoint is due one second of training after the saved 2.5 s: step 14 (3.5 s), then 18, then the end. A
     * resume that lost the training time would report 1 s at step 14 (or never save again: 24), one that lost the
     * last checkpoint's time would save at step 11. */
    const char *const extra[] = {"train.max_steps=20", "checkpoint.every_seconds=1", "checkpoint.every_steps=0",
                                 "checkpoint.keep_last=20", "eval.test_at_end=false", NULL};
    tr_config cfg;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "clock", extra);
    fake_clock clk = {0.0};
    const tr_run_data data = {.clock = {fake_now, &clk}};

    tr_run_state *run = NULL;
    cr_assert_eq(tr_run_open(&cfg, &data, &run, &err), TR_OK, "%s", err.msg);
    steps_at(run, &clk, 0.0, 0, 10, 0.25);
    tr_run_request_stop(run);
    cr_assert_eq(tr_run_step(run, &err), TR_RUN_DONE, "%s", err.msg);
    int rc = tr_run_finish(run, &err);
    cr_assert_eq(tr_run_close(run, rc, &err, NULL), TR_E_SIGNAL, "%s", err.msg);

    clk.now = 1000.0;
    cr_assert_eq(tr_run_open(&cfg, &data, &run, &err), TR_OK, "%s", err.msg);
    steps_at(run, &clk, 1000.0, 10, 20, 0.25);
    cr_assert_eq(tr_run_step(run, &err), TR_RUN_DONE, "%s", err.msg);
    rc = tr_run_finish(run, &err);
    tr_summary s;
    cr_assert_eq(tr_run_close(run, rc, &err, &s), TR_OK, "%s", err.msg);

    static const double want_step[] = {4, 8, 10, 14, 18, 20}, want_elapsed[] = {1.0, 2.0, 2.5, 3.5, 4.5, 5.0};
    static const char *const want_reason[] = {"interval", "interval", "signal", "interval", "interval", "end"};
    double el[16], steps[16];
    const int n = support_read_field(s.run_dir, "checkpoint", "elapsed_s", el, steps, 16);
    cr_assert_eq(n, 6, "6 checkpoints, got %d", n);
    for (int i = 0; i < n; i++) {
        cr_expect_eq(steps[i], want_step[i], "checkpoint %d at step %.0f, want %.0f", i, steps[i], want_step[i]);
        cr_expect_eq(el[i], want_elapsed[i], "checkpoint %d at %.17g s, want %g", i, el[i], want_elapsed[i]);
        char needle[64];
        snprintf(needle, sizeof needle, "\"step\":%.0f,\"reason\":\"%s\"", want_step[i], want_reason[i]);
        cr_expect_eq(support_count_records(s.run_dir, needle), 1, "no record with %s", needle);
    }
    cr_expect_eq(s.train_seconds, 5.0, "training seconds over both processes: %.17g", s.train_seconds);
}

/* The plain progress line of a log sink: the step of each line, into steps[] (the sink's ctx). */
typedef struct progress_steps {
    long long step[64];
    int n;
} progress_steps;

static void progress_sink(void *ctx, tr_log_kind kind, const char *line)
{
    progress_steps *p = ctx;
    const char *s = strstr(line, "step ");
    if (kind == TR_LOG_PROGRESS && s && p->n < 64) p->step[p->n++] = strtoll(s + 5, NULL, 10);
}

Test(checkpoint, progress_lines_and_time_fields_follow_the_runs_clock)
{
    support_require_fmnist();
    /* 3.5 s a step: a plain progress line once 10 s have passed since the last (steps 3, 6, ... 18) and always the
     * last step; every train record's time_s is the clock's seconds since the start, exactly */
    const char *const extra[] = {"train.max_steps=20", "log.progress=always", "eval.test_at_end=false",
                                 "checkpoint.at_end=false", NULL};
    tr_config cfg;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "progress", extra);
    fake_clock clk = {50.0};
    progress_steps seen = {.n = 0};
    const tr_run_data data = {.clock = {fake_now, &clk}, .log = {.set = 1, .fn = progress_sink, .ctx = &seen}};
    tr_run_state *run = NULL;
    cr_assert_eq(tr_run_open(&cfg, &data, &run, &err), TR_OK, "%s", err.msg);
    steps_at(run, &clk, 50.0, 0, 20, 3.5);
    cr_assert_eq(tr_run_step(run, &err), TR_RUN_DONE, "%s", err.msg);
    const int rc = tr_run_finish(run, &err);
    tr_summary s;
    cr_assert_eq(tr_run_close(run, rc, &err, &s), TR_OK, "%s", err.msg);

    static const long long want[] = {3, 6, 9, 12, 15, 18, 20};
    cr_assert_eq(seen.n, 7, "7 progress lines, got %d", seen.n);
    for (int i = 0; i < 7; i++) cr_expect_eq(seen.step[i], want[i], "line %d at step %lld", i, seen.step[i]);
    double ts[32], steps[32];
    cr_assert_eq(support_read_field(s.run_dir, "train", "time_s", ts, steps, 32), 20);
    for (int i = 0; i < 20; i++) cr_expect_eq(ts[i], 3.5 * steps[i], "step %.0f: time_s %.17g", steps[i], ts[i]);
    cr_expect_eq(s.train_seconds, 70.0, "%.17g", s.train_seconds);
}

/* ------------------------------------------------------------------------------------------------ pieces */

Test(checkpoint, generator_state_round_trips_after_an_odd_number_of_normal_draws)
{
    cr_assert_eq(trs_manual_seed(123), TRS_OK);
    double warm[3], a[7], b[7];
    cr_assert_eq(trs_rng_normal(warm, 3), TRS_OK); /* odd: a Box-Muller value is cached in the state */
    size_t n = 0;
    cr_assert_eq(trs_rng_state_size(&n), TRS_OK);
    cr_assert_gt(n, 5000);
    unsigned char *state = malloc(n);
    cr_assert_eq(trs_rng_get_state(state, n), TRS_OK);
    cr_assert_eq(trs_rng_normal(a, 7), TRS_OK);
    cr_assert_eq(trs_rng_set_state(state, n), TRS_OK);
    cr_assert_eq(trs_rng_normal(b, 7), TRS_OK);
    for (int i = 0; i < 7; i++) cr_expect_eq(a[i], b[i], "draw %d: %a vs %a", i, a[i], b[i]);
    cr_expect_eq(trs_rng_set_state(state, n - 8), TRS_E_INVALID);
    cr_expect(strstr(trs_last_error(), "bytes was given") != NULL, "%s", trs_last_error());
    free(state);
}

Test(checkpoint, saving_keeps_no_tensor_memory)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=1000", "checkpoint.every_steps=100", "log.every_steps=50",
                                 "watchdog.every_steps=50", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "mem", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(support_count_records(s.run_dir, "\"type\":\"checkpoint\""), 10);
    static double alloc[64], steps[64];
    const int k = support_read_field(s.run_dir, "train", "allocated", alloc, steps, 64);
    cr_assert_eq(k, 20);
    for (int i = 0; i < k; i++)
        if (steps[i] >= (double)s.baseline_step)
            cr_expect_eq((int64_t)alloc[i], s.baseline_bytes, "step %.0f", steps[i]);
    cr_expect_eq(s.final_bytes, s.baseline_bytes);
}

/* A save on the background writer (checkpoint.async, the default) writes the same bytes as one on the loop's
 * thread: the snapshot is taken at the same point of the loop. Its records say how long the loop paused
 * (stall_s) and how long the whole save took (seconds = stall + the writer's time). The snapshot's copy lives
 * outside libtorch's allocator, so allocated bytes stay flat across the saves. */
Test(checkpoint, background_saves_write_the_same_bytes_as_foreground_ones)
{
    support_require_fmnist();
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "rng.safetensors"};
    const char *const bg[] = {"train.max_steps=300", "checkpoint.every_steps=50", "checkpoint.keep_last=6",
                              "log.every_steps=25", "watchdog.every_steps=25", NULL};
    const char *const fg[] = {"train.max_steps=300", "checkpoint.every_steps=50", "checkpoint.keep_last=6",
                              "log.every_steps=25", "watchdog.every_steps=25", "checkpoint.async=false", NULL};
    tr_config cfg;
    tr_summary s_bg, s_fg;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "bg", bg);
    cr_assert_eq(tr_run(&cfg, &s_bg, &err), TR_OK, "%s", err.msg);
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "fg", fg);
    cr_assert_eq(tr_run(&cfg, &s_fg, &err), TR_OK, "%s", err.msg);
    for (int step = 50; step <= 300; step += 50)
        for (int i = 0; i < 3; i++) {
            char a[sizeof s_bg.run_dir + 64], b[sizeof s_fg.run_dir + 64], ha[65], hb[65];
            snprintf(a, sizeof a, "%s/checkpoints/step-%010d", s_bg.run_dir, step);
            snprintf(b, sizeof b, "%s/checkpoints/step-%010d", s_fg.run_dir, step);
            support_manifest_digest(a, files[i], ha);
            support_manifest_digest(b, files[i], hb);
            cr_assert_eq(strlen(ha), 32, "%s: %s listed with an XXH3-128 digest", a, files[i]);
            cr_expect_str_eq(ha, hb, "step %d: %s differs between the background and the foreground save", step,
                             files[i]);
        }
    static double sec[16], stall[16], steps[16];
    for (int k = 0; k < 2; k++) {
        const char *dir = k ? s_fg.run_dir : s_bg.run_dir;
        const int n = support_read_field(dir, "checkpoint", "seconds", sec, steps, 16);
        cr_assert_eq(n, 6, "%s: a record for each save", dir);
        cr_assert_eq(support_read_field(dir, "checkpoint", "stall_s", stall, NULL, 16), 6);
        for (int i = 0; i < n; i++) {
            cr_expect_eq(steps[i], 50.0 * (i + 1), "records in step order");
            cr_expect(stall[i] > 0 && stall[i] <= sec[i], "step %.0f: stall %g s, save %g s", steps[i], stall[i],
                      sec[i]);
            if (k) cr_expect_eq(stall[i], sec[i], "foreground: the loop waits for the whole save");
        }
    }
    cr_expect_eq(s_bg.final_bytes, s_bg.baseline_bytes, "allocated bytes are flat across background saves");
    cr_expect_eq(s_bg.baseline_bytes, s_fg.baseline_bytes);
}

/* precision: bf16-mixed trains under CPU autocast (the parameters end elsewhere than float32's), the same run twice
 * ends bit for bit the same, and what it saves is float32: parameters, optimizer state and the EMA. */
Test(checkpoint, bf16_mixed_is_reproducible_and_saves_float32)
{
    support_require_fmnist();
    /* oneDNN runs bfloat16 matmuls only with AVX-512; CTest pins it to AVX2 (CMakeLists.txt), so this process, whose
     * oneDNN initialises at its first primitive, takes the avx512_bf16 kernels instead -- or skips without them */
    FILE *ci = fopen("/proc/cpuinfo", "r");
    static char flags[1 << 15];
    const size_t nf = ci ? fread(flags, 1, sizeof flags - 1, ci) : 0;
    if (ci) fclose(ci);
    flags[nf] = '\0';
    if (!strstr(flags, " avx512_bf16")) support_skip("this CPU has no avx512_bf16: oneDNN runs no bfloat16 matmul");
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", 1);
    const char *const bf16[] = {"train.max_steps=40", "checkpoint.every_steps=40", "precision=bf16-mixed",
                                "ema.enabled=true", NULL};
    const char *const fp32[] = {"train.max_steps=40", "checkpoint.every_steps=40", "ema.enabled=true", NULL};
    const char *const names[] = {"bf16a", "bf16b", "fp32"};
    tr_config cfg;
    tr_summary s[3];
    tr_error err = {0};
    char sha[3][65];
    for (int k = 0; k < 3; k++) {
        support_subset_config(&cfg, "fashion_mnist_mlp.yaml", names[k], k < 2 ? bf16 : fp32);
        cr_assert_eq(tr_run(&cfg, &s[k], &err), TR_OK, "%s: %s", names[k], err.msg);
        char dir[sizeof s[k].run_dir + 64];
        snprintf(dir, sizeof dir, "%.*s/checkpoints/step-0000000040", (int)sizeof s[k].run_dir - 1, s[k].run_dir);
        support_manifest_digest(dir, "model.safetensors", sha[k]);
        cr_assert_eq(strlen(sha[k]), 32, "%s", dir);
    }
    cr_expect_str_eq(sha[0], sha[1], "bf16-mixed, the same run twice: the same parameters bit for bit");
    cr_expect_str_neq(sha[0], sha[2], "bf16-mixed trains differently from float32 (autocast is on)");
    cr_expect_eq(s[0].last_loss, s[1].last_loss);
    cr_expect_eq(s[0].test_accuracy, s[1].test_accuracy, "eval under bf16-mixed is reproducible too");
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "ema.safetensors"};
    for (int i = 0; i < 3; i++) {
        char path[sizeof s[0].run_dir + 96];
        snprintf(path, sizeof path, "%s/checkpoints/step-0000000040/%s", s[0].run_dir, files[i]);
        tr_st_file f = {0};
        cr_assert_eq(tr_st_read(path, &f, &err), TR_OK, "%s", err.msg);
        for (size_t j = 0; j < f.n; j++)
            cr_expect(f.tensors[j].dtype == TR_ST_F32 || f.tensors[j].dtype == TR_ST_I64, "%s: %s is %s", path,
                      f.tensors[j].name, tr_st_dtype_name(f.tensors[j].dtype));
        cr_expect_gt(f.n, 0, "%s", path);
        tr_st_close(&f);
    }
}

Test(checkpoint, another_models_checkpoint_is_refused_key_by_key)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=20", NULL};
    run_cli("mlp", extra, 0);
    char kv[800], out[16384], args[1400];
    snprintf(kv, sizeof kv, "init.from=%s/mlp/checkpoints/step-0000000020", support_tmpdir);
    snprintf(args, sizeof args,
             "configs/fashion_mnist_cnn.yaml '%s' train.max_steps=2 data.train_subset=500 data.val_size=100 "
             "data.test_subset=100 run.dir='%s' run.name=cnn",
             kv, support_tmpdir);
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "does not fit this model") != NULL, "%s", out);
    cr_expect(strstr(out, "missing keys (14): 0.weight, 0.bias, 1.running_mean, 1.running_var, "
                          "1.num_batches_tracked, 5.weight") != NULL, "%s", out);
    cr_expect(strstr(out, "unexpected keys (2): 7.weight, 7.bias") != NULL, "%s", out);
    cr_expect(strstr(out, "shape mismatches (4): 1.weight (model [32], checkpoint [512, 784])") != NULL, "%s", out);

    /* the same model from its own checkpoint: weights load, a new run starts at step 0 */
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml init.from='%s/mlp/checkpoints/step-0000000020' train.max_steps=2 "
             "data.train_subset=500 data.val_size=100 data.test_subset=100 run.dir='%s' run.name=again",
             support_tmpdir, support_tmpdir);
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "initialised from") != NULL, "%s", out);
}

Test(checkpoint, resume_never_refuses_a_used_run_directory)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=5", NULL};
    run_cli("used", extra, 0);
    const char *const again[] = {"train.max_steps=5", "run.resume=never", NULL};
    run_cli("used", again, 2);
}

Test(checkpoint, sigint_finishes_the_step_saves_and_exits_4)
{
    support_require_fmnist();
    /* log every 1000 steps, so the stop closes an open window early */
    const char *const extra[] = {"train.max_steps=100000000", "log.every_steps=1000", NULL};
    const char *argv[MAX_ARGS];
    char buf[1024], dir[600], log[600];
    base_args(argv, buf, sizeof buf, "int", extra);
    run_dir_of(dir, sizeof dir, "int");
    log_of(log, sizeof log, "int");
    const int pid = support_spawn(argv, log);
    const struct timespec poll = {0, 20000000};
    for (int i = 0; i < 1500 && support_last_step(dir, "train") < 1000; i++) nanosleep(&poll, NULL);
    kill(pid, SIGINT);
    kill(pid, SIGINT); /* a process-group signal often arrives twice: counts once within a second */
    cr_assert_eq(support_wait(pid), 4);
    const long long last = support_last_step(dir, "train");
    double ck[8];
    cr_assert_eq(support_read_field(dir, "checkpoint", "step", ck, NULL, 8), 1);
    cr_expect_eq((long long)ck[0], last, "the signal checkpoint is at the last finished step");
    cr_expect_eq(support_count_records(dir, "\"reason\":\"signal\""), 1);
    /* the window the stop closed early is marked partial (none is open when the stop lands on a log boundary) */
    cr_expect_eq(support_count_records(dir, "\"partial\":true"), last % 1000 != 0, "stopped at step %lld", last);
}

Test(checkpoint, resume_on_another_thread_count_warns_that_bit_identity_is_gone)
{
    support_require_fmnist();
    const char *const first[] = {"train.max_steps=40", "checkpoint.every_steps=20", "checkpoint.at_end=false", NULL};
    run_cli("threads", first, 0);
    const char *const again[] = {"train.max_steps=60", "checkpoint.every_steps=20", "checkpoint.at_end=false",
                                 "threads=2", NULL};
    run_cli("threads", again, 0);
    char log[600], out[1 << 15];
    log_of(log, sizeof log, "threads");
    support_read_file(log, out, sizeof out);
    cr_expect(strstr(out, "checkpoint saved with 1 intra-op / 1 inter-op threads, running 2 / 1: bit-identity no "
                          "longer holds") != NULL, "%s", out);
}
