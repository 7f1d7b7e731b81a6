/*
 * test_faults.c -- faults and hostile input: a checkpoint is untrusted input (a tampered trainer.json with its
 * manifest re-hashed to match is skipped, never crashes the run, never costs a good checkpoint); every I/O call of
 * a checkpoint save fails in turn with EIO and ENOSPC (tr_io_fault_arm) and each leaves the complete checkpoints
 * verifying and the next start resuming bit for bit; a full disk leaves summary.json intact (and at the first
 * summary says there is none) and kills leave no pile of temporaries; sizes are checked before allocation (IDX
 * headers, model specs, YAML documents); a binary file read as CSV is echoed escaped.
 *
 * The training runs are the breast-cancer CSV config (569 rows, a 30-32-1 MLP with EMA): a run of 12 steps takes
 * milliseconds, so a fault at every call of a save, twice, fits in seconds.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint.h"
#include "config.h"
#include "csv.h"
#include "data.h"
#include "io.h"
#include "model_spec.h"
#include "run.h"
#include "safetensors.h"
#include "support.h"
#include "trainrun_shim.h"
#include "yaml_util.h"

TestSuite(faults, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

#define BC_CSV "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv"

static void require_bc(void)
{
    struct stat st;
    if (stat(BC_CSV, &st) != 0) {
        if (getenv("CI")) cr_assert_fail("%s missing under CI (scripts/setup.sh installs python3-sklearn)", BC_CSV);
        support_skip("%s missing (python3-sklearn)", BC_CSV);
    }
}

/* configs/breast_cancer_bce.yaml for `steps` steps with a checkpoint every `every` steps, as run `name`. */
static void bc_config(tr_config *cfg, const char *name, int steps, int every, const char *const *extra)
{
    tr_error err = {0};
    char path[1024], kv[600];
    tr_config_defaults(cfg);
    snprintf(path, sizeof path, "%s/configs/breast_cancer_bce.yaml", TR_SOURCE_DIR);
    cr_assert_eq(tr_config_load_file(cfg, path, &err), TR_OK, "%s", err.msg);
    const char *const fixed[] = {"log.progress=never", "eval.every_epoch=false", "log.every_steps=1",
                                 "checkpoint.keep_last=2", NULL};
    for (int i = 0; fixed[i]; i++) cr_assert_eq(tr_config_override(cfg, fixed[i], &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "train.max_steps=%d", steps);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "checkpoint.every_steps=%d", every);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    for (int i = 0; extra && extra[i]; i++) cr_assert_eq(tr_config_override(cfg, extra[i], &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.dir=%s", support_tmpdir);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.name=%s", name);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
}

static int run_bc(const char *name, int steps, int every, const char *const *extra, tr_error *err)
{
    tr_config cfg;
    tr_summary s;
    bc_config(&cfg, name, steps, every, extra);
    memset(err, 0, sizeof *err);
    return tr_run(&cfg, &s, err);
}

/* The model.safetensors digest that checkpoint step-N of run `name` lists in its manifest ("" when none). */
static void model_sha(const char *name, long long step, char out[65])
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/%s/checkpoints/step-%010lld", support_tmpdir, name, step);
    support_manifest_digest(dir, "model.safetensors", out);
}

/* Entries of dir whose names start with `prefix`. */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Every step-* directory of run `name` verifies; returns how many there are. */
static int all_complete_verify(const char *name, const char *when)
{
    char root[800], p[1200];
    snprintf(root, sizeof root, "%s/%s/checkpoints", support_tmpdir, name);
    DIR *d = opendir(root);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        tr_error err = {0};
        cr_assert_eq(tr_checkpoint_verify(p, &err), TR_OK, "%s: %s", when, err.msg);
        n++;
    }
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------------------------ tampered checkpoints */

struct field_edit {
    const char *key, *value;
};

static void set_field(cJSON *o, void *ctx)
{
    const struct field_edit *f = ctx;
    cJSON_ReplaceItemInObjectCaseSensitive(o, f->key, cJSON_CreateString(f->value));
}

/* Set field `key` of checkpoint step-N's trainer.json to the string `value` and re-hash the manifest to match,
 * so the manifest check passes and only the field checks can catch it. */
static void tamper(const char *name, long long step, const char *key, const char *value)
{
    char dir[800];
    snprintf(dir, sizeof dir, "%s/%s/checkpoints/step-%010lld", support_tmpdir, name, step);
    struct field_edit f = {key, value};
    support_edit_checkpoint_json(dir, "trainer.json", set_field, &f);
    tr_error err = {0};
    cr_assert_eq(tr_checkpoint_verify(dir, &err), TR_OK, "the re-hashed manifest verifies: %s", err.msg);
}

static void append_warning(void *ctx, const char *msg)
{
    strncat(ctx, msg, 8192 - strlen(ctx) - 2);
    strcat(ctx, "\n");
}

/* A run of 12 steps with checkpoints at 4, 8, 12 (keep 2: 8 and 12 stay); the step-12 one tampered; the resume to
 * 16 steps must skip it by name and field, continue from step 8, and finish equal to an untampered run. */
static void check_tampered(const char *name, const char *key, const char *value, const char *expect_msg)
{
    require_bc();
    tr_error err = {0};
    cr_assert_eq(run_bc(name, 12, 4, NULL, &err), TR_OK, "%s", err.msg);
    tamper(name, 12, key, value);

    /* the check names the checkpoint and the field */
    tr_config cfg;
    bc_config(&cfg, name, 16, 4, NULL);
    char dir[800], found[TR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", support_tmpdir, name);
    static char warnings[8192];
    warnings[0] = '\0';
    /* find_resumable needs the model: the run does it at start-up; here through the CLI below. The manifest
     * alone still verifies (that is the point of re-hashing): */
    cr_assert_eq(tr_checkpoint_find_latest(dir, found, append_warning, warnings, &err), TR_OK);
    cr_assert(strstr(found, "step-0000000012") != NULL, "the manifest check alone accepts it: %s", found);

    char args[1400], out[1 << 15];
    snprintf(args, sizeof args,
             "configs/breast_cancer_bce.yaml log.progress=never eval.every_epoch=false log.every_steps=1 "
             "checkpoint.keep_last=2 train.max_steps=16 checkpoint.every_steps=4 run.dir='%s' run.name=%s",
             support_tmpdir, name);
    const int code = support_cli(args, out, sizeof out);
    cr_assert_eq(code, 0, "the resume must succeed from step 8 (exit %d): %s", code, out);
    cr_expect(strstr(out, "skipping checkpoint") && strstr(out, "step-0000000012") && strstr(out, expect_msg),
              "the skip names the checkpoint and '%s': %s", expect_msg, out);
    double rs[4];
    cr_assert_eq(support_read_field(dir, "resume", "step", rs, NULL, 4), 1, "%s", out);
    cr_expect_eq(rs[0], 8.0, "resumed from the newest checkpoint that passes every check");

    /* bit-identical to a run that was never tampered with */
    char straight[64];
    snprintf(straight, sizeof straight, "%s-straight", name);
    cr_assert_eq(run_bc(straight, 16, 4, NULL, &err), TR_OK, "%s", err.msg);
    char a[65], b[65];
    model_sha(straight, 16, a);
    model_sha(name, 16, b);
    cr_assert_eq(strlen(a), 32);
    cr_expect_str_eq(b, a, "the resumed run's final parameters equal the uninterrupted run's");
}

Test(faults, tampered_negative_position_is_skipped_not_a_crash)
{
    check_tampered("pos", "position", "-7", "field position: -7 is outside");
}

Test(faults, tampered_position_past_the_epoch_is_skipped)
{
    check_tampered("pos2", "position", "100000", "field position: 100000 is outside [0, 364] (the epoch's length)");
}

Test(faults, tampered_negative_step_is_skipped_and_costs_no_checkpoint)
{
    check_tampered("step", "step", "-5", "field step: -5 is outside");
    /* the good step-8 checkpoint was resumed from, never set aside; the bad one is kept for inspection */
    char p[900];
    struct stat st;
    snprintf(p, sizeof p, "%s/step/checkpoints/step-0000000012.superseded", support_tmpdir);
    cr_expect_eq(stat(p, &st), 0, "the tampered checkpoint is set aside (kept) after the successful resume");
    cr_expect_eq(count_entries(support_path("step/checkpoints"), "step-0000000008"), 0,
                 "step 8 is pruned normally once 12 and 16 exist (keep_last 2)");
}

Test(faults, tampered_huge_epoch_is_skipped)
{
    check_tampered("epoch", "epoch", "9223372036854775000", "field epoch: 9223372036854775000 is outside");
}

/* A failed resume renames nothing: a checkpoint whose manifest verifies but whose load fails (here: the
 * optimizer state of another optimizer, refused by the shim) leaves the directory as it was, and the next start
 * tries it again instead of starting afresh. */
Test(faults, a_failed_resume_renames_nothing_and_never_starts_afresh)
{
    require_bc();
    tr_error err = {0};
    cr_assert_eq(run_bc("fail", 8, 4, NULL, &err), TR_OK, "%s", err.msg);
    char root[800];
    snprintf(root, sizeof root, "%s/fail/checkpoints", support_tmpdir);
    cr_assert_eq(count_entries(root, "step-"), 2);
    /* another config (optimizer) than the checkpoints': refused with exit 2 naming the field, nothing renamed */
    const char *const sgd[] = {"optim.name=sgd", "optim.momentum=0.9", NULL};
    for (int k = 0; k < 2; k++) {
        const int rc = run_bc("fail", 12, 4, sgd, &err);
        cr_assert_neq(rc, TR_OK, "a checkpoint of another optimizer cannot be resumed");
        cr_expect(strstr(err.msg, "step-0000000008") != NULL, "%s", err.msg);
        cr_expect_eq(count_entries(root, "step-"), 2, "try %d: nothing renamed, pruned or hidden", k);
        cr_expect_eq(count_entries(root, "step-0000000008."), 0);
        cr_expect_eq(all_complete_verify("fail", "after a failed resume"), 2);
    }
    /* a smaller training set (569 rows - 114 test - 300 val = 155): step 8's position 256 is past its epoch, a config
     * mismatch (exit 2) that keeps every checkpoint, not a damaged checkpoint to skip */
    const char *const smaller[] = {"data.val_size=300", NULL};
    cr_assert_eq(run_bc("fail", 12, 4, smaller, &err), TR_E_CONFIG, "%s", err.msg);
    cr_expect(strstr(err.msg, "field position: 256 is past the end of the epoch (155 samples); the data set differs"),
              "%s", err.msg);
    cr_expect_eq(count_entries(root, "step-"), 2, "nothing renamed");
    /* and the original config still resumes from step 8 */
    cr_assert_eq(run_bc("fail", 12, 4, NULL, &err), TR_OK, "%s", err.msg);
    double rs[4];
    char dir[800];
    snprintf(dir, sizeof dir, "%s/fail", support_tmpdir);
    cr_expect_eq(support_read_field(dir, "resume", "step", rs, NULL, 4), 1);
    cr_expect_eq(rs[0], 8.0);
}

/* ------------------------------------------------------------------------------------ I/O faults in a save */

Test(faults, every_io_call_of_a_save_fails_cleanly_with_eio_and_enospc)
{
    require_bc();
    tr_error err = {0};
    /* the uninterrupted run, counting the I/O calls of its third save (step 12, with a prune of step 4) */
    tr_io_fault_arm(0, 0, 0, 0);
    cr_assert_eq(run_bc("straight", 12, 4, NULL, &err), TR_OK, "%s", err.msg);
    const int64_t calls = tr_io_save_calls();
    char want[65];
    model_sha("straight", 12, want);
    cr_assert_eq(strlen(want), 32, "an XXH3-128 digest");
    cr_assert_gt(calls, 20, "a save opens, writes and fsyncs 5 files: %lld calls counted", (long long)calls);
    fprintf(stderr, "faults: a checkpoint save with its prune makes %lld I/O calls\n", (long long)calls);

    /* the background writer (checkpoint.async, the default) with EIO and ENOSPC, the loop's own with EIO */
    const int errs[] = {EIO, ENOSPC, EIO};
    const char *const foreground[] = {"checkpoint.async=false", NULL};
    const char *const *extras[] = {NULL, NULL, foreground};
    int cases = 0;
    for (int e = 0; e < 3; e++) {
        for (int64_t call = 1; call <= calls; call++) {
            char name[64];
            snprintf(name, sizeof name, "f%d-%d-%lld", errs[e], e, (long long)call);
            tr_io_fault_arm(3, call, errs[e], 0);
            const int rc = run_bc(name, 12, 4, extras[e], &err);
            cr_assert(tr_io_fault_fired(), "%s: call %lld of save 3 was never made", name, (long long)call);
            tr_io_fault_arm(0, 0, 0, 0);
            cr_assert_eq(rc, TR_E_RUNTIME, "%s: exit 1, got %d (%s)", name, rc, err.msg);
            cr_assert(strstr(err.msg, support_tmpdir) != NULL, "%s: the message names the file: %s", name, err.msg);
            cr_assert(strstr(err.msg, strerror(errs[e])) != NULL, "%s: %s", name, err.msg);
            /* every complete checkpoint verifies, step 8 (the newest before the failing save) among them */
            char when[128];
            snprintf(when, sizeof when, "%s after the fault", name);
            all_complete_verify(name, when);
            char p[900];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s/checkpoints/step-0000000008", support_tmpdir, name);
            cr_assert_eq(stat(p, &st), 0, "%s: step 8 is still there", name);
            snprintf(p, sizeof p, "%s/%s/checkpoints", support_tmpdir, name);
            cr_assert_eq(count_entries(p, ".tmp-"), 0, "%s: the failed save removed its temporary", name);
            /* the next start resumes from the newest complete checkpoint and ends bit-identical */
            cr_assert_eq(run_bc(name, 12, 4, extras[e], &err), TR_OK, "%s: resume: %s", name, err.msg);
            char got[65];
            model_sha(name, 12, got);
            cr_assert_str_eq(got, want, "%s: the final parameters differ from the uninterrupted run's", name);
            cr_assert_eq(count_entries(p, ".tmp-") + count_entries(p, ".trash-"), 0, "%s: leftovers", name);
            cases++;
        }
    }
    cr_expect_eq(cases, 3 * calls);
}

/* ------------------------------------------------------------------------------------ a full disk, kills */

static const char *cli_args(char *buf, size_t n, const char *name, int steps, int every)
{
    snprintf(buf, n,
             "configs/breast_cancer_bce.yaml log.progress=never eval.every_epoch=false log.every_steps=10 "
             "checkpoint.keep_last=2 train.max_steps=%d checkpoint.every_steps=%d run.dir='%s' run.name=%s",
             steps, every, support_tmpdir, name);
    return buf;
}

/* The same run through support_spawn (so a kill is seen as 128 + signal); output appended to name.log. */
static int spawn_run(const char *name, int steps, int every)
{
    char a[4][64], dir[700], nm[300], log[800];
    snprintf(a[0], sizeof a[0], "train.max_steps=%d", steps);
    snprintf(a[1], sizeof a[1], "checkpoint.every_steps=%d", every);
    snprintf(dir, sizeof dir, "run.dir=%s", support_tmpdir);
    snprintf(nm, sizeof nm, "run.name=%s", name);
    snprintf(log, sizeof log, "%s/%s.log", support_tmpdir, name);
    const char *const argv[] = {"configs/breast_cancer_bce.yaml", "log.progress=never", "eval.every_epoch=false",
                                "log.every_steps=10", "checkpoint.keep_last=2", a[0], a[1], dir, nm, NULL};
    return support_wait(support_spawn(argv, log));
}

Test(faults, a_full_disk_keeps_summary_intact_and_kills_leave_no_pile_of_temporaries)
{
    require_bc();
    char args[1400], out[1 << 15], path[900], text[1 << 16];
    cr_assert_eq(support_cli(cli_args(args, sizeof args, "disk", 8, 4), out, sizeof out), 0, "%s", out);
    snprintf(path, sizeof path, "%s/disk/summary.json", support_tmpdir);
    char root[800];
    snprintf(root, sizeof root, "%s/disk/checkpoints", support_tmpdir);

    /* 10 kills, each in the middle of a save (at a random I/O call of its first save, after its temporary
     * directory exists): start-up removes the temporaries of killed runs, so at most the last one is left */
    support_seed("faults: kill points");
    for (int k = 0; k < 10; k++) {
        char spec[64];
        snprintf(spec, sizeof spec, "1:%d:KILL", 3 + rand() % 20);
        setenv("TRAINRUN_TEST_IO_FAULT", spec, 1);
        const int code = spawn_run("disk", 40 + 4 * k, 4);
        unsetenv("TRAINRUN_TEST_IO_FAULT");
        cr_assert_eq(code, 128 + SIGKILL, "kill %d (%s): exit %d (log disk.log)", k, spec, code);
        cr_assert_leq(count_entries(root, ".tmp-"), 1, "after kill %d: %d temporaries", k, count_entries(root, ".tmp-"));
        all_complete_verify("disk", "after a kill");
    }
    cr_expect_eq(count_entries(root, ".tmp-"), 1, "the last kill's temporary is there until the next start");
    support_read_file(path, text, sizeof text);
    cr_assert(strstr(text, "\"status\":\"completed\"") != NULL, "%s", text);

    /* a full disk from the first call of the next save on: exit 1 naming the file, the previous summary.json
     * intact (never truncated to 0 bytes), and no temporary left behind */
    setenv("TRAINRUN_TEST_IO_FAULT", "1:1:ENOSPC:sticky", 1);
    const int code = support_cli(cli_args(args, sizeof args, "disk", 200, 4), out, sizeof out);
    unsetenv("TRAINRUN_TEST_IO_FAULT");
    cr_assert_eq(code, 1, "%s", out);
    cr_expect(strstr(out, "No space left on device") && strstr(out, "/disk/checkpoints/"), "%s", out);
    support_read_file(path, text, sizeof text);
    cJSON *s = cJSON_Parse(text);
    cr_assert_not_null(s, "summary.json is intact JSON: '%s'", text);
    cr_expect_str_eq(cJSON_GetObjectItem(s, "status")->valuestring, "completed", "the last summary written");
    cr_expect_eq(cJSON_GetObjectItem(s, "steps")->valuedouble, 8.0);
    cJSON_Delete(s);
    cr_expect_eq(count_entries(root, ".tmp-"), 0, "start-up and the failed save removed every temporary");
    snprintf(path, sizeof path, "%s/disk", support_tmpdir);
    cr_expect_eq(count_entries(path, ".tmp-"), 0, "no run-file temporary either");
    all_complete_verify("disk", "after the full disk");
}

/* A full disk from the first save of a fresh run on: its summary.json is the first one, and cannot be written
 * either. The run says exactly that there is none (never that "the previous summary.json is unchanged"), and
 * nothing half-written is left. */
Test(faults, a_full_disk_at_the_first_summary_says_there_is_none)
{
    require_bc();
    char args[1400], out[1 << 15], path[900];
    setenv("TRAINRUN_TEST_IO_FAULT", "1:1:ENOSPC:sticky", 1);
    const int code = support_cli(cli_args(args, sizeof args, "first", 8, 4), out, sizeof out);
    unsetenv("TRAINRUN_TEST_IO_FAULT");
    cr_assert_eq(code, 1, "%s", out);
    cr_expect(strstr(out, "/first/checkpoints") && strstr(out, "No space left on device"), "the save's error: %s", out);
    cr_expect(strstr(out, "warning: summary not written: ") && strstr(out, "/first/.tmp-summary.json-") &&
                  strstr(out, "(there is no summary.json: none was written before)"),
              "the warning says exactly what is left: %s", out);
    cr_expect_null(strstr(out, "previous summary.json"), "%s", out);
    struct stat st;
    snprintf(path, sizeof path, "%s/first/summary.json", support_tmpdir);
    cr_expect_neq(stat(path, &st), 0, "no summary.json");
    snprintf(path, sizeof path, "%s/first", support_tmpdir);
    cr_expect_eq(count_entries(path, ".tmp-"), 0, "no temporary left");
}

Test(faults, the_error_summary_carries_the_real_figures)
{
    require_bc();
    /* a save that fails at step 15 (its first write); log windows of 10 steps, so one is open */
    tr_config cfg;
    const char *const extra[] = {"log.every_steps=10", "checkpoint.async=false", NULL};
    bc_config(&cfg, "errsum", 20, 15, extra);
    tr_summary s;
    tr_error err = {0};
    tr_io_fault_arm(1, 3, EIO, 0);
    const int rc = tr_run(&cfg, &s, &err);
    tr_io_fault_arm(0, 0, 0, 0);
    cr_assert_eq(rc, TR_E_RUNTIME, "%s", err.msg);
    char path[900], text[1 << 16];
    snprintf(path, sizeof path, "%s/errsum/summary.json", support_tmpdir);
    support_read_file(path, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "%s", text);
    cr_expect_str_eq(cJSON_GetObjectItem(o, "status")->valuestring, "error");
    cr_expect_eq(cJSON_GetObjectItem(o, "steps")->valuedouble, 15.0);
    cr_expect_gt(cJSON_GetObjectItem(o, "train_seconds")->valuedouble, 0.0, "%s", text);
    cr_expect_gt(cJSON_GetObjectItem(o, "samples_per_s")->valuedouble, 0.0, "%s", text);
    /* the open window's mean loss (steps 11-15), as the train record at step 10 is the closed one's */
    double losses[4];
    cr_assert_eq(support_read_field(s.run_dir, "train", "loss", losses, NULL, 4), 1);
    const double last = cJSON_GetObjectItem(o, "last_loss")->valuedouble;
    cr_expect_gt(last, 0.0, "%s", text);
    cr_expect_neq(last, losses[0], "the open window's mean, not the closed window's");
    cr_expect(strstr(cJSON_GetObjectItem(o, "error")->valuestring, "Input/output error") != NULL, "%s", text);
    cJSON_Delete(o);
}

/* A background save that fails: the run learns it at the first step after the writer finished (which step that
 * is depends on the writer's speed, so only what holds for every timing is asserted), ends with exit 1 naming the
 * file and the error, keeps the complete checkpoint before it, and never saves over the failure at the end. */
Test(faults, a_failed_background_save_ends_the_run_with_its_error)
{
    require_bc();
    tr_config cfg;
    const char *const extra[] = {"log.every_steps=10", "checkpoint.keep_last=5", NULL};
    bc_config(&cfg, "bgerr", 40, 10, extra); /* saves at 10 (complete), 20 (fails at its 3rd call), ... */
    tr_summary s;
    tr_error err = {0};
    tr_io_fault_arm(2, 3, EIO, 0);
    const int rc = tr_run(&cfg, &s, &err);
    cr_assert(tr_io_fault_fired());
    tr_io_fault_arm(0, 0, 0, 0);
    cr_assert_eq(rc, TR_E_RUNTIME, "%s", err.msg);
    cr_expect(strstr(err.msg, "/bgerr/checkpoints/.tmp-step-0000000020-") && strstr(err.msg, "Input/output error"),
              "the error names the file of the failed save: %s", err.msg);
    cr_expect(s.steps > 20 && s.steps <= 30, "stopped after step 20, at the latest when the save of step 30 waited "
              "for it: step %lld", (long long)s.steps);
    char root[800];
    snprintf(root, sizeof root, "%s/bgerr/checkpoints", support_tmpdir);
    cr_expect_eq(all_complete_verify("bgerr", "after a failed background save"), 1, "step 10 alone");
    cr_expect_eq(count_entries(root, "step-0000000010"), 1);
    cr_expect_eq(count_entries(root, ".tmp-"), 0, "the failed save removed its temporary");
    char path[900], text[1 << 16];
    snprintf(path, sizeof path, "%s/bgerr/summary.json", support_tmpdir);
    support_read_file(path, text, sizeof text);
    cr_expect(strstr(text, "\"status\":\"error\"") && strstr(text, "Input/output error"), "%s", text);
    cr_expect_eq(support_count_records(s.run_dir, "\"type\":\"checkpoint\""), 1, "only step 10's record");
}

/* A checkpoint of format 1 (SHA-256 manifest) written by an older trainrun (tests/data/checkpoint_v1) still
 * verifies, is resumed from, and the run ends with the uninterrupted run's parameters; a flipped byte in a copy is
 * reported as a SHA-256 mismatch. New checkpoints are format 2 (XXH3-128). */
Test(faults, a_format_1_sha256_checkpoint_still_verifies_and_resumes_bit_for_bit)
{
    require_bc();
    char src[900], dir[1000], cmd[3200];
    snprintf(src, sizeof src, "%s/tests/data/checkpoint_v1/step-0000000004", TR_SOURCE_DIR);
    tr_error err = {0};
    cr_assert_eq(tr_checkpoint_verify(src, &err), TR_OK, "%s", err.msg);
    char text[4096];
    snprintf(dir, sizeof dir, "%s/MANIFEST.json", src);
    support_read_file(dir, text, sizeof text);
    cr_assert(strstr(text, "\"format_version\":\t1") && strstr(text, "\"sha256\""), "a format-1 fixture: %s", text);

    /* resume a run from a copy of it */
    snprintf(dir, sizeof dir, "%s/old/checkpoints", support_tmpdir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s' '%s/'", dir, src, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_eq(run_bc("old", 8, 4, NULL, &err), TR_OK, "%s", err.msg);
    double rs[4];
    char run[800];
    snprintf(run, sizeof run, "%s/old", support_tmpdir);
    cr_assert_eq(support_read_field(run, "resume", "step", rs, NULL, 4), 1, "resumed from the old checkpoint");
    cr_expect_eq(rs[0], 4.0);
    cr_assert_eq(run_bc("new", 8, 4, NULL, &err), TR_OK, "%s", err.msg);
    char a[65], b[65];
    model_sha("new", 8, a);
    model_sha("old", 8, b);
    cr_assert_eq(strlen(a), 32, "the new checkpoint's manifest is format 2 (XXH3-128): '%s'", a);
    /* the fixture was trained by libtorch 1.13.0 under CTest's kernel pins (CMakeLists.txt): only with that
     * libtorch and those pins are steps 1-4 the same bits (the 2.11 lane resumes it, but its steps 1-4 differ) */
    const char *core = getenv("OPENBLAS_CORETYPE"), *isa = getenv("ONEDNN_MAX_CPU_ISA");
    snprintf(dir, sizeof dir, "%s/trainer.json", src);
    support_read_file(dir, text, sizeof text);
    char want_version[96];
    snprintf(want_version, sizeof want_version, "\"libtorch_version\":\t\"%s\"", trs_torch_version());
    const int same_libtorch = strstr(text, want_version) != NULL;
    if (same_libtorch && core && strcmp(core, "Haswell") == 0 && isa && strcmp(isa, "AVX2") == 0)
        cr_expect_str_eq(b, a, "resumed from the format-1 checkpoint, the parameters equal the uninterrupted run's");
    else
        cr_log_info("the fixture was computed by libtorch 1.13.0 under CTest's kernel pins (OPENBLAS_CORETYPE=Haswell "
                    "ONEDNN_MAX_CPU_ISA=AVX2); this is libtorch %s%s: bit-equality with a fresh run is not checked",
                    trs_torch_version(), same_libtorch ? " without those pins" : "");

    /* a flipped byte in the old format is a SHA-256 mismatch, named */
    snprintf(dir, sizeof dir, "%s/old/checkpoints/step-0000000004/model.safetensors", support_tmpdir);
    support_flip_byte(dir, 200, SEEK_SET, 0x10);
    *strrchr(dir, '/') = '\0';
    cr_assert_eq(tr_checkpoint_verify(dir, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "model.safetensors: SHA-256 ") && strstr(err.msg, "(corrupted)"), "%s", err.msg);
    /* and in the new one an XXH3-128 mismatch */
    snprintf(dir, sizeof dir, "%s/new/checkpoints/step-0000000008/optimizer.safetensors", support_tmpdir);
    support_flip_byte(dir, -3, SEEK_END, 0x01);
    *strrchr(dir, '/') = '\0';
    cr_assert_eq(tr_checkpoint_verify(dir, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "optimizer.safetensors: XXH3-128 ") && strstr(err.msg, "(corrupted)"), "%s", err.msg);
}

/* ------------------------------------------------------------------------------------ sizes on trust */

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void be32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16), b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

Test(faults, a_huge_idx_header_is_refused_before_allocating)
{
    /* 56 bytes claiming 300 images of 4096 x 4096 (5 GB of pixels, 20 GB as float) */
    unsigned char img[56] = {0}, lab[8 + 300] = {0};
    be32(img, 0x803), be32(img + 4, 300), be32(img + 8, 4096), be32(img + 12, 4096);
    be32(lab, 0x801), be32(lab + 4, 300);
    const char *ip = support_path("img.idx"), *lp = support_path("lab.idx");
    write_bytes(ip, img, sizeof img);
    write_bytes(lp, lab, sizeof lab);
    /* RLIMIT-free proof that nothing was allocated for it: the refusal precedes the allocation in tr_idx_load,
     * and the message says what was claimed and what the file holds */
    tr_dataset ds;
    tr_error err = {0};
    cr_assert_eq(tr_idx_load(ip, lp, 0, &ds, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, ip) && strstr(err.msg, "expected 5033164800 bytes of image data (300 images of 4096x4096") &&
                  strstr(err.msg, "file ends at byte offset 56 (refused before allocating)"),
              "%s", err.msg);
    cr_expect_null(ds.x);

    /* gzip'd: deflate cannot expand more than 1032:1, so a small .gz cannot hold them either */
    const char *gp = support_path("img.idx.gz");
    gzFile gz = gzopen(gp, "wb");
    cr_assert_not_null(gz);
    gzwrite(gz, img, sizeof img);
    gzclose(gz);
    cr_assert_eq(tr_idx_load(gp, lp, 0, &ds, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "the header claims 300 images of 4096x4096 (5033164800 bytes of pixels)") &&
                  strstr(err.msg, "gzip'd") && strstr(err.msg, "refused before allocating"),
              "%s", err.msg);
}

Test(faults, a_huge_layer_is_refused_naming_the_layer_and_the_bytes)
{
    tr_model_spec spec;
    tr_error err = {0};
    const char *yaml = "input: [784]\nlayers:\n  - linear: {in: 784, out: 64}\n  - relu\n"
                       "  - linear: {in: 1e9, out: 1e9}\n";
    /* 1e9 is a float in YAML 1.2, refused by the int field: the integer spelling reaches the budget */
    cr_assert_eq(tr_model_spec_load_string(yaml, "huge.yaml", &spec, &err), TR_E_CONFIG);
    yaml = "input: [784]\nlayers:\n  - linear: {in: 784, out: 64}\n  - relu\n"
           "  - linear: {in: 1000000000, out: 1000000000}\n";
    cr_assert_eq(tr_model_spec_load_string(yaml, "huge.yaml", &spec, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "huge.yaml:5:5: layers[2]:") && strstr(err.msg, "1000000001000000000 parameters") &&
                  strstr(err.msg, "4000000004000000000 bytes"),
              "%s", err.msg);
    yaml = "input: [3, 32, 32]\nlayers:\n  - conv2d: {in: 3, out: 4000000000, kernel: 4000000000}\n";
    cr_assert_eq(tr_model_spec_load_string(yaml, "conv.yaml", &spec, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "layers[0]") && strstr(err.msg, "overflows"), "%s", err.msg);
    /* a sane model is not affected */
    yaml = "input: [784]\nlayers:\n  - linear: {in: 784, out: 512}\n  - relu\n  - linear: {in: 512, out: 10}\n";
    cr_assert_eq(tr_model_spec_load_string(yaml, "ok.yaml", &spec, &err), TR_OK, "%s", err.msg);
    tr_model_spec_free(&spec);
}

/* A YAML mapping of n distinct keys k0..k(n-1), as a config document. */
static char *many_keys(int n)
{
    char *s = malloc((size_t)n * 24 + 16);
    size_t o = 0;
    for (int i = 0; i < n; i++) o += (size_t)sprintf(s + o, "k%d: 1\n", i);
    s[o] = '\0';
    return s;
}

Test(faults, three_hundred_thousand_keys_are_refused_and_duplicates_cost_linear_work)
{
    tr_config cfg;
    tr_error err = {0};
    char *yaml = many_keys(300000);
    tr_config_defaults(&cfg);
    const size_t c0 = tr_ymap_key_compares();
    cr_assert_eq(tr_config_load_string(&cfg, yaml, "keys.yaml", &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "keys.yaml:") && strstr(err.msg, "more than 100000 keys and values"), "%s", err.msg);
    cr_expect_eq(tr_ymap_key_compares(), c0, "refused before any mapping was checked");
    free(yaml);

    /* 40,000 distinct keys (under the limit): the duplicate check is a hash set, about one comparison a key at
     * most; the quadratic check made 800 million */
    yaml = many_keys(40000);
    const size_t c1 = tr_ymap_key_compares();
    cr_assert_eq(tr_config_load_string(&cfg, yaml, "keys.yaml", &err), TR_E_CONFIG); /* unknown key k0 */
    const size_t work = tr_ymap_key_compares() - c1;
    cr_expect_lt(work, 2 * 40000, "%zu key comparisons for 40000 keys", work);
    cr_expect(strstr(err.msg, "k0") != NULL, "%s", err.msg);
    free(yaml);

    /* a duplicate is still found, wherever it is */
    yaml = many_keys(40000);
    strcat(yaml, "k39999: 2\n");
    cr_assert_eq(tr_model_spec_load_string(yaml, "dup.yaml", &(tr_model_spec){0}, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "dup.yaml:40001:1: k39999: duplicate key (first set at line 40000)"), "%s", err.msg);
    free(yaml);

    /* deep nesting: refused at the 65th level, in one pass */
    const int depth = 100000;
    yaml = malloc(2 * (size_t)depth + 8);
    memset(yaml, '[', (size_t)depth);
    memset(yaml + depth, ']', (size_t)depth);
    yaml[2 * depth] = '\0';
    cr_assert_eq(tr_config_load_string(&cfg, yaml, "deep.yaml", &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "deep.yaml:1:65: nested more than 64 levels deep"), "%s", err.msg);
    free(yaml);
}

Test(faults, a_binary_file_given_as_csv_is_echoed_escaped)
{
    const unsigned char bin[] = {'1', ',', '2', '\n', 0x1b, '[', '3', '1', 'm', 0x07, 0xff, ',', '3', '\n'};
    const char *p = support_path("binary.csv");
    write_bytes(p, bin, sizeof bin);
    tr_csv_table t;
    tr_error err = {0};
    cr_assert_eq(tr_csv_read(p, 0, &t, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, ":2:1: field 1: '\\x1b[31m\\x07\\xff' is not a number") != NULL, "%s", err.msg);
    for (const char *c = err.msg; *c; c++)
        cr_assert((unsigned char)*c >= 0x20 || *c == '\n' || *c == '\t', "raw control byte 0x%02x in: %s",
                  (unsigned char)*c, err.msg);
    /* and any message: a control byte in an override is escaped too */
    tr_config cfg;
    tr_config_defaults(&cfg);
    cr_assert_neq(tr_config_override(&cfg, "optim.lr=\x1b[2J", &err), TR_OK);
    cr_expect(strchr(err.msg, 0x1b) == NULL && strstr(err.msg, "\\x1b[2J"), "%s", err.msg);
}
