/*
 * test_run_dir.c -- one writer per run directory (docs/run_directory.md): while a run holds its directory's lock a
 * second trainrun on it refuses at once with exit 11, naming the holder's pid and host, having written nothing
 * (the first run's checkpoints all verify, nothing is renamed, its config.yaml and metrics.jsonl stay its own); a
 * SIGKILLed holder leaves no stale lock, so an immediate restart resumes; predict, plot, verify and sample read a
 * live run without taking its lock; the lock file's parser and the NFS detection.
 *
 * The live run is this test process's own (tr_run_open and tr_run_step of run.h), paused between steps while the
 * command line is run against it, so nothing depends on timing. The runs are the breast-cancer CSV config (a
 * 30-32-1 MLP): a step takes about a millisecond.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "run.h"
#include "run_lock.h"
#include "support.h"

TestSuite(run_dir, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

#define BC_CSV "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv"

static void require_bc(void)
{
    struct stat st;
    if (stat(BC_CSV, &st) != 0) {
        if (getenv("CI")) cr_assert_fail("%s missing under CI (scripts/setup.sh installs python3-sklearn)", BC_CSV);
        support_skip("%s missing (python3-sklearn)", BC_CSV);
    }
}

/* The overrides every run here takes (the same for the in-process run and the command line); saves in the
 * foreground, so a paused run has nothing in flight. */
static const char *const k_fixed[] = {
    "log.progress=never",       "eval.every_epoch=false", "log.every_steps=2",      "checkpoint.keep_last=10",
    "checkpoint.every_steps=4", "train.max_steps=16",     "checkpoint.async=false", NULL};

static void bc_config(tr_config *cfg, const char *name, const char *const *extra)
{
    tr_error err = {0};
    char path[1024], kv[700];
    tr_config_defaults(cfg);
    snprintf(path, sizeof path, "%s/configs/breast_cancer_bce.yaml", TR_SOURCE_DIR);
    cr_assert_eq(tr_config_load_file(cfg, path, &err), TR_OK, "%s", err.msg);
    for (int i = 0; k_fixed[i]; i++) cr_assert_eq(tr_config_override(cfg, k_fixed[i], &err), TR_OK, "%s", err.msg);
    for (int i = 0; extra && extra[i]; i++) cr_assert_eq(tr_config_override(cfg, extra[i], &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.dir=%s", support_tmpdir);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.name=%s", name);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
}

/* The command line of the same run, with `extra` ("" or more overrides). */
static const char *cli_args(char *buf, size_t n, const char *name, const char *extra)
{
    size_t used = (size_t)snprintf(buf, n, "configs/breast_cancer_bce.yaml");
    for (int i = 0; k_fixed[i]; i++) used += (size_t)snprintf(buf + used, n - used, " %s", k_fixed[i]);
    snprintf(buf + used, n - used, " run.dir='%s' run.name=%s %s", support_tmpdir, name, extra);
    return buf;
}

/* Open the run in this process and take `steps` steps: it holds the run directory from here on. */
static tr_run_state *open_live(tr_config *cfg, int steps)
{
    tr_run_state *run = NULL;
    tr_error err = {0};
    cr_assert_eq(tr_run_open(cfg, NULL, &run, &err), TR_OK, "%s", err.msg);
    for (int i = 0; i < steps; i++) cr_assert_eq(tr_run_step(run, &err), TR_OK, "%s", err.msg);
    return run;
}

/* Run it to its end and close it. */
static void finish_live(tr_run_state *run)
{
    tr_error err = {0};
    int rc;
    while ((rc = tr_run_step(run, &err)) == TR_OK) {}
    cr_assert_eq(rc, TR_RUN_DONE, "%s", err.msg);
    rc = tr_run_finish(run, &err);
    cr_assert_eq(tr_run_close(run, rc, &err, NULL), TR_OK, "%s", err.msg);
}

/* Every entry of `dir` (names, sizes and modification times, sorted by readdir order made stable by sorting)
 * into out[n]: a fingerprint of what a process wrote there. */
static void snapshot(const char *dir, char *out, size_t n)
{
    char names[64][256];
    int k = 0;
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    for (struct dirent *e; (e = readdir(d)) && k < 64;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) snprintf(names[k++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)k, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        char p[1400];
        struct stat st;
        cr_assert_lt(snprintf(p, sizeof p, "%s/%s", dir, names[i]), (int)sizeof p);
        cr_assert_eq(stat(p, &st), 0, "%s", p);
        used += (size_t)snprintf(out + used, n - used, "%s %lld %lld.%09ld\n", names[i], (long long)st.st_size,
                                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    }
}

/* Every step-* directory under run_dir/checkpoints verifies, and none was renamed (.superseded, .corrupt,
 * .unresumable): returns how many there are. */
static int checkpoints_verify_none_renamed(const char *run_dir)
{
    char root[900];
    snprintf(root, sizeof root, "%s/checkpoints", run_dir);
    DIR *d = opendir(root);
    cr_assert_not_null(d, "%s", root);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "step-", 5) != 0) continue;
        cr_assert_null(strchr(e->d_name, '.'), "renamed: %s/%s", root, e->d_name);
        char p[1400];
        cr_assert_lt(snprintf(p, sizeof p, "%s/%s", root, e->d_name), (int)sizeof p);
        tr_error err = {0};
        cr_assert_eq(tr_checkpoint_verify(p, &err), TR_OK, "%s", err.msg);
        n++;
    }
    closedir(d);
    return n;
}

Test(run_dir, a_second_process_refuses_while_the_first_writes)
{
    require_bc();
    tr_config cfg;
    bc_config(&cfg, "one", NULL);
    tr_run_state *live = open_live(&cfg, 9); /* checkpoints at 4 and 8 */
    const char *dir = support_path("one");
    char before[8192], after[8192], cfg_before[1 << 15], cfg_after[1 << 15];
    snapshot(dir, before, sizeof before);
    support_read_file(support_path("one/config.yaml"), cfg_before, sizeof cfg_before);

    /* the same command line twice, another experiment's lr: refused at once, exit 11, the holder named */
    char args[2048], out[1 << 14], host[256] = "", want[400];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "(pid %ld on %s, since ", (long)getpid(), host);
    for (int k = 0; k < 2; k++) {
        const int code = support_cli(cli_args(args, sizeof args, "one", "optim.lr=0.05"), out, sizeof out);
        cr_assert_eq(code, 11, "exit %d: %s", code, out);
        cr_expect(strstr(out, dir) && strstr(out, "is in use by another trainrun") && strstr(out, want) &&
                      strstr(out, "wrote nothing"),
                  "the message names the run directory and the holder (%s): %s", want, out);
        cr_expect_null(strstr(out, "resum"), "it never looked at the checkpoints: %s", out);
    }
    snapshot(dir, after, sizeof after);
    cr_expect_str_eq(after, before, "the refused processes touched nothing in the run directory");
    support_read_file(support_path("one/config.yaml"), cfg_after, sizeof cfg_after);
    cr_expect_str_eq(cfg_after, cfg_before);
    cr_expect(strstr(cfg_after, "lr: 0.003"), "config.yaml is the holder's: %s", cfg_after);

    /* the holder goes on to its end, undisturbed */
    finish_live(live);
    cr_expect_eq(checkpoints_verify_none_renamed(dir), 4, "steps 4, 8, 12, 16");
    double steps[32];
    cr_expect_eq(support_read_field(dir, "train", "loss", steps, NULL, 32), 8, "every train record of steps 2..16");
    struct stat st;
    cr_expect_neq(stat(support_path("one/metrics.earlier-1.jsonl"), &st), 0, "metrics.jsonl was never renamed away");
    char summary[8192];
    support_read_file(support_path("one/summary.json"), summary, sizeof summary);
    cr_expect(strstr(summary, "\"status\":\"completed\"") && strstr(summary, "\"steps\":16"), "%s", summary);

    /* released with the run: the next process takes the directory (a finished run: nothing to do) */
    const int code = support_cli(cli_args(args, sizeof args, "one", ""), out, sizeof out);
    cr_expect_eq(code, 0, "exit %d: %s", code, out);
    cr_expect(strstr(out, "already complete"), "%s", out);
}

/* A start the data or model refuses (exit 2) after it took a new directory leaves no directory behind; in an
 * existing one it removes nothing but leaves what was there. */
Test(run_dir, a_refused_start_leaves_no_directory_behind)
{
    require_bc();
    char args[2048], out[1 << 14];
    int code = support_cli(cli_args(args, sizeof args, "refused", "train.batch_size=100000"), out, sizeof out);
    cr_assert_eq(code, 2, "exit %d: %s", code, out);
    cr_expect(strstr(out, "train.batch_size"), "%s", out);
    struct stat st;
    cr_expect_neq(stat(support_path("refused"), &st), 0, "the directory it made for the run is gone");
    code = support_cli(cli_args(args, sizeof args, "kept", ""), out, sizeof out);
    cr_assert_eq(code, 0, "%s", out);
    code = support_cli(cli_args(args, sizeof args, "kept", "train.batch_size=100000"), out, sizeof out);
    cr_assert_eq(code, 2, "%s", out);
    cr_expect_eq(checkpoints_verify_none_renamed(support_path("kept")), 4, "an earlier run's directory is kept whole");
}

/* Two runs of one process on one directory: the second open refuses too (the lock is per open, not per process). */
Test(run_dir, a_second_run_of_the_same_process_refuses)
{
    require_bc();
    tr_config cfg;
    bc_config(&cfg, "twice", NULL);
    tr_run_state *live = open_live(&cfg, 1), *other = NULL;
    tr_error err = {0};
    const int rc = tr_run_open(&cfg, NULL, &other, &err);
    cr_expect_eq(rc, TR_E_LOCKED, "%d: %s", rc, err.msg);
    cr_expect(strstr(err.msg, "another open run or trainer of this process"), "%s", err.msg);
    tr_run_close(other, rc, &err, NULL);
    finish_live(live);
}

/* A SIGKILLed holder (TRAINRUN_KILL_AT_STEP: at the end of step 10, after the checkpoint of step 8) leaves no
 * stale lock: started again at once, the run takes the directory and resumes from step 8 to the end. */
Test(run_dir, a_sigkilled_holder_leaves_no_stale_lock)
{
    require_bc();
    char dir_kv[700], name_kv[64], log[900];
    snprintf(dir_kv, sizeof dir_kv, "run.dir=%s", support_tmpdir);
    snprintf(name_kv, sizeof name_kv, "run.name=killed");
    snprintf(log, sizeof log, "%s/killed.log", support_tmpdir);
    const char *const argv[] = {"configs/breast_cancer_bce.yaml",
                                k_fixed[0],
                                k_fixed[1],
                                k_fixed[2],
                                k_fixed[3],
                                k_fixed[4],
                                k_fixed[5],
                                k_fixed[6],
                                dir_kv,
                                name_kv,
                                NULL};
    setenv("TRAINRUN_KILL_AT_STEP", "10", 1);
    const int first = support_spawn(argv, log);
    int code = support_wait(first);
    unsetenv("TRAINRUN_KILL_AT_STEP");
    cr_assert_eq(code, 128 + SIGKILL, "exit %d", code);
    char text[1024];
    tr_run_lock_holder_info who;
    support_read_file(support_path("killed/" TR_RUN_LOCK_FILE), text, sizeof text);
    tr_run_lock_parse(text, &who);
    cr_expect_eq(who.pid, first, "the lock file names the killed holder: %s", text);

    const int second = support_spawn(argv, log);
    code = support_wait(second);
    char out[1 << 15];
    support_read_file(log, out, sizeof out);
    cr_assert_eq(code, 0, "exit %d: %s", code, out);
    double rs[4];
    cr_assert_eq(support_read_field(support_path("killed"), "resume", "step", rs, NULL, 4), 1, "%s", out);
    cr_expect_eq(rs[0], 8.0);
    cr_expect_eq(support_last_step(support_path("killed"), "checkpoint"), 16);
    support_read_file(support_path("killed/" TR_RUN_LOCK_FILE), text, sizeof text);
    tr_run_lock_parse(text, &who);
    cr_expect_eq(who.pid, second, "the restart took the lock: %s", text);
    checkpoints_verify_none_renamed(support_path("killed"));
}

/* predict, plot and verify on a run that is live (this process holds it, between two steps): they read its
 * verified checkpoints and files and take nothing; the run's lock is still held after them (a writer still
 * refuses) and the run ends as if they had not been there. */
Test(run_dir, readers_use_a_live_run_without_taking_it)
{
    require_bc();
    char args[3000], out[1 << 15];
    /* a finished recording of the same 16 steps, for verify */
    snprintf(args, sizeof args, "%s --trace '%s'", cli_args(out, sizeof out, "ref", ""), support_path("ref.trace"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);

    tr_config cfg;
    bc_config(&cfg, "live", NULL);
    tr_run_state *live = open_live(&cfg, 9);
    const char *dir = support_path("live");
    char before[8192], after[8192];
    snapshot(dir, before, sizeof before);

    snprintf(args, sizeof args, "predict '%s' -o '%s'", dir, support_path("preds.csv"));
    int code = support_cli(args, out, sizeof out);
    cr_expect_eq(code, 0, "predict: exit %d: %s", code, out);
    cr_expect(strstr(out, "step-0000000008"), "predict used the newest verified checkpoint: %s", out);
    snprintf(args, sizeof args, "plot '%s' -o '%s'", dir, support_path("live.png"));
    code = support_cli(args, out, sizeof out);
    cr_expect_eq(code, 0, "plot: exit %d: %s", code, out);
    snprintf(args, sizeof args, "verify '%s/config.yaml' '%s'", dir, support_path("ref.trace"));
    code = support_cli(args, out, sizeof out);
    cr_expect_eq(code, 0, "verify: exit %d: %s", code, out);
    cr_expect(strstr(out, "verify: OK: 16 steps"), "%s", out);

    snapshot(dir, after, sizeof after);
    cr_expect_str_eq(after, before, "the readers wrote nothing into the live run");
    code = support_cli(cli_args(args, sizeof args, "live", ""), out, sizeof out);
    cr_expect_eq(code, 11, "the lock is still the live run's: exit %d: %s", code, out);
    finish_live(live);
    cr_expect_eq(checkpoints_verify_none_renamed(dir), 4);
}

/* sample on a live language-model run (the tiny GPT of tests/data/lm on ~20 KB of text, a checkpoint at step 4):
 * it reads the newest verified checkpoint and its vocabulary, takes no lock, and the run goes on to its end. */
Test(run_dir, sample_reads_a_live_language_model_run)
{
    FILE *f = fopen(support_path("corpus.txt"), "w");
    cr_assert_not_null(f);
    static const char *const words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"};
    for (int l = 0; l < 300; l++) fprintf(f, "%s %s %s.\n", words[l % 8], words[(l * 3) % 8], words[(l * 5) % 8]);
    fclose(f);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 3\ndata: {format: text, root: %s, train_text: corpus.txt, vocab: bytes, block_size: 16, "
             "val_fraction: 0.1}\nmodel: {torchscript: %s/tests/data/lm/tiny_gpt.pt}\n"
             "train: {max_steps: 8, batch_size: 4}\neval: {every_steps: 0, every_epoch: false, test_at_end: false}\n"
             "checkpoint: {every_steps: 4, every_seconds: 0, async: false}\nlog: {progress: never}\n"
             "run: {dir: %s, name: lm}\n",
             support_tmpdir, TR_SOURCE_DIR, support_tmpdir);
    support_write_file(support_path("lm.yaml"), yaml);
    tr_config cfg;
    tr_error err = {0};
    tr_config_defaults(&cfg);
    cr_assert_eq(tr_config_load_file(&cfg, support_path("lm.yaml"), &err), TR_OK, "%s", err.msg);
    tr_run_state *live = open_live(&cfg, 5);
    char args[1200], out[1 << 14];
    snprintf(args, sizeof args, "sample '%s' --tokens 20 --seed 1 --prompt 'the'", support_path("lm"));
    const int code = support_cli(args, out, sizeof out);
    cr_expect_eq(code, 0, "sample: exit %d: %s", code, out);
    cr_expect(strstr(out, "the"), "the continuation starts with the prompt: %s", out);
    finish_live(live);
    cr_expect_eq(checkpoints_verify_none_renamed(support_path("lm")), 2, "steps 4 and 8");
}

/* The lock file's text, as the holder writes it and a refused process reads it. */
Test(run_dir, the_lock_file_names_pid_host_and_start)
{
    tr_run_lock_holder_info who;
    tr_run_lock_parse("pid 4242\nhost node-7.cluster\nstarted 2026-01-02T03:04:05Z\n", &who);
    cr_expect_eq(who.pid, 4242);
    cr_expect_str_eq(who.host, "node-7.cluster");
    cr_expect_str_eq(who.started, "2026-01-02T03:04:05Z");
    tr_run_lock_parse("", &who); /* a holder that has not written it yet */
    cr_expect_eq(who.pid, -1);
    cr_expect_str_eq(who.host, "");
    tr_run_lock_parse("pid -3\nhost\n", &who);
    cr_expect_eq(who.pid, -1, "not a pid");

    /* the lock itself: taken, refused to a second open file, released, taken again */
    tr_run_lock a = {0}, b = {0};
    tr_error err = {0};
    cr_assert_eq(tr_run_lock_acquire(&a, support_tmpdir, NULL, NULL, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(tr_run_lock_acquire(&b, support_tmpdir, NULL, NULL, &err), TR_E_LOCKED);
    cr_expect(strstr(err.msg, support_tmpdir) && strstr(err.msg, "another open run or trainer of this process"), "%s", err.msg);
    tr_run_lock_release(&a);
    tr_run_lock_release(&a); /* twice: a no-op */
    cr_expect_eq(tr_run_lock_acquire(&b, support_tmpdir, NULL, NULL, &err), TR_OK, "%s", err.msg);
    tr_run_lock_release(&b);
}

/* NFS: a mount whose flock locks stay on the client (local_lock=all, NFSv3's nolock; local_lock=flock) is named
 * in a warning; NFS with network locks (local_lock=none, NFSv4) and local file systems are not. */
Test(run_dir, nfs_mounts_without_network_locks_are_detected)
{
    const char *mountinfo =
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        "40 22 0:40 / /shared rw,relatime - nfs srv:/export rw,vers=3,hard,proto=tcp,local_lock=all,addr=10.0.0.2\n"
        "41 40 0:41 / /shared/v4 rw - nfs4 srv:/v4 rw,vers=4.2,local_lock=none,addr=10.0.0.2\n"
        "42 22 0:42 / /mnt/my\\040runs rw - nfs srv:/runs rw,vers=3,local_lock=flock\n";
    char note[1024];
    cr_expect_eq(tr_run_lock_nfs_note(mountinfo, "/shared/runs/a", note, sizeof note), 1);
    cr_expect(strstr(note, "/shared/runs/a is on NFS (srv:/export) mounted with local_lock=all (the nolock mount "
                           "option): its lock excludes only processes on this host"),
              "%s", note);
    cr_expect_eq(tr_run_lock_nfs_note(mountinfo, "/shared/v4/runs/a", note, sizeof note), 0, "NFSv4 locks: %s", note);
    cr_expect_eq(tr_run_lock_nfs_note(mountinfo, "/home/me/runs", note, sizeof note), 0, "ext4: %s", note);
    cr_expect_eq(tr_run_lock_nfs_note(mountinfo, "/mnt/my runs/x", note, sizeof note), 1, "an escaped space");
    cr_expect(strstr(note, "local_lock=flock"), "%s", note);
    cr_expect_eq(tr_run_lock_nfs_note(mountinfo, "/sharedx/y", note, sizeof note), 0, "a prefix is not a parent");
}
