/*
 * test_ckpt_invariants.c -- a checkpoint's trainer.json checked as a whole (tr_ckpt_validate, through
 * tr_checkpoint_check): one test per invariant, each changing one field of a real checkpoint and re-signing its
 * manifest so that it verifies, then asserting the check names the file and the field; strict types; a tampered
 * checkpoint is skipped for the next older one and the run ends as an untampered one; the best checkpoint
 * survives pruning whatever the selection state says; a checkpoint that fails at its first resumed step is set
 * aside and the run falls back to the one before it.
 *
 * The run: configs/breast_cancer_bce.yaml (364 training rows, batches of 32, drop_last: 11 steps an epoch) for 13
 * steps with a checkpoint and a validation every 4 steps, a log window of 5 steps (open at step 12: steps 11-12),
 * checkpoint.monitor val_accuracy (top 2), early stopping on val_loss and a plateau schedule on val_loss -- every
 * part of trainer.json present. Each run takes well under a second.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "config.h"
#include "run.h"
#include "support.h"

TestSuite(ckpt_invariants, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

#define BC_CSV "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv"

static const char *const k_run[] = {"log.progress=never",
                                    "eval.every_epoch=false",
                                    "eval.every_steps=4",
                                    "log.every_steps=5",
                                    "checkpoint.every_steps=4",
                                    "checkpoint.keep_last=2",
                                    "checkpoint.monitor=val_accuracy",
                                    "checkpoint.mode=max",
                                    "checkpoint.save_top_k=2",
                                    "early_stopping.monitor=val_loss",
                                    "early_stopping.patience=100",
                                    "schedule.name=plateau",
                                    "schedule.monitor=val_loss",
                                    "checkpoint.async=false",
                                    NULL};

static void bc_config(tr_config *cfg, const char *name, int steps, const char *const *extra)
{
    struct stat st;
    if (stat(BC_CSV, &st) != 0) {
        if (getenv("CI")) cr_assert_fail("%s missing under CI (scripts/setup.sh installs python3-sklearn)", BC_CSV);
        support_skip("%s missing (python3-sklearn)", BC_CSV);
    }
    tr_error err = {0};
    char path[1024], kv[700];
    tr_config_defaults(cfg);
    snprintf(path, sizeof path, "%s/configs/breast_cancer_bce.yaml", TR_SOURCE_DIR);
    cr_assert_eq(tr_config_load_file(cfg, path, &err), TR_OK, "%s", err.msg);
    for (int i = 0; k_run[i]; i++) cr_assert_eq(tr_config_override(cfg, k_run[i], &err), TR_OK, "%s", err.msg);
    for (int i = 0; extra && extra[i]; i++) cr_assert_eq(tr_config_override(cfg, extra[i], &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "train.max_steps=%d", steps);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.dir=%s", support_tmpdir);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.name=%s", name);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
}

static void run_bc(const char *name, int steps, const char *const *extra)
{
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    bc_config(&cfg, name, steps, extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
}

static const char *ckpt_dir(const char *name, int step)
{
    static char dir[4][900];
    static int k;
    char *d = dir[k++ % 4];
    snprintf(d, 900, "%s/%s/checkpoints/step-%010d", support_tmpdir, name, step);
    return d;
}

/* tr_checkpoint_check of run `name`'s checkpoint `step` with the run's config (no model: the JSON's checks). */
static int check(const char *name, int step, tr_error *err)
{
    tr_config cfg;
    bc_config(&cfg, name, 13, NULL);
    const tr_ckpt_expect x = {.epoch_samples = 364};
    memset(err, 0, sizeof *err);
    return tr_checkpoint_check(ckpt_dir(name, step), &cfg, NULL, NULL, NULL, &x, err);
}

/* The object at dotted path `path` of o ("selection.checkpoint"; "" is o itself). */
static cJSON *at(cJSON *o, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *part = strtok(buf, "."); part && o; part = strtok(NULL, ".")) {
        char *br = strchr(part, '[');
        int idx = -1;
        if (br) idx = atoi(br + 1), *br = '\0';
        o = cJSON_GetObjectItemCaseSensitive(o, part);
        if (idx >= 0) o = cJSON_GetArrayItem(o, idx);
    }
    cr_assert_not_null(o, "no %s in trainer.json", path);
    return o;
}

/* One edit of trainer.json: in the object at `path`, key `key` set to `item` (NULL: removed). */
struct edit {
    const char *path, *key;
    cJSON *item;
};

static void apply_edit(cJSON *o, void *ctx)
{
    const struct edit *e = ctx;
    cJSON *obj = at(o, e->path);
    if (e->item) {
        if (cJSON_GetObjectItemCaseSensitive(obj, e->key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, e->key, e->item);
        else cJSON_AddItemToObject(obj, e->key, e->item);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, e->key);
    }
}

static cJSON *hex(double v)
{
    char b[64];
    snprintf(b, sizeof b, "%a", v);
    return cJSON_CreateString(b);
}

static cJSON *i64(long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    return cJSON_CreateString(b);
}

/* A field of checkpoint step-12 (or step `at_step`) of run `name` as a number (int64 strings and hex floats). */
static double field_of(const char *name, int at_step, const char *path, const char *key)
{
    char file[1000], text[1 << 16];
    snprintf(file, sizeof file, "%s/trainer.json", ckpt_dir(name, at_step));
    support_read_file(file, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(at(o, path), key);
    cr_assert_not_null(v, "%s.%s", path, key);
    const double d = cJSON_IsString(v) ? strtod(v->valuestring, NULL) : v->valuedouble;
    cJSON_Delete(o);
    return d;
}

static double field(const char *name, const char *path, const char *key) { return field_of(name, 12, path, key); }

/* A fresh 13-step run `name`; its step-12 checkpoint passes the check before the edit and fails it after, with a
 * message that names trainer.json and contains `expect`. */
static void expect_refused(const char *name, const char *path, const char *key, cJSON *item, const char *expect)
{
    run_bc(name, 13, NULL);
    tr_error err;
    cr_assert_eq(check(name, 12, &err), TR_OK, "untampered: %s", err.msg);
    struct edit e = {path, key, item};
    support_edit_checkpoint_json(ckpt_dir(name, 12), "trainer.json", apply_edit, &e);
    cr_assert_eq(tr_checkpoint_verify(ckpt_dir(name, 12), &err), TR_OK, "re-signed: %s", err.msg);
    cr_assert_eq(check(name, 12, &err), TR_E_RUNTIME, "%s.%s changed: accepted", path, key);
    cr_expect(strstr(err.msg, "step-0000000012/trainer.json: field ") && strstr(err.msg, expect),
              "the message names the file and '%s': %s", expect, err.msg);
}

/* ------------------------------------------------------------------------------------------------ control */

Test(ckpt_invariants, every_checkpoint_a_run_writes_passes)
{
    run_bc("ok", 13, NULL);
    tr_error err;
    for (int step = 4; step <= 12; step += 4)
        cr_expect_eq(check("ok", step, &err), TR_OK, "step %d: %s", step, err.msg);
    cr_expect_eq(check("ok", 13, &err), TR_OK, "step 13: %s", err.msg);
    /* and after a resume with another batch size the cursor follows from the resumed one (cursor.origin) */
    const char *const other[] = {"train.batch_size=16", NULL};
    run_bc("ok", 20, other);
    tr_config cfg;
    bc_config(&cfg, "ok", 20, other);
    const tr_ckpt_expect x = {.epoch_samples = 364};
    cr_expect_eq(tr_checkpoint_check(ckpt_dir("ok", 20), &cfg, NULL, NULL, NULL, &x, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(field_of("ok", 20, "cursor.origin", "step"), 13.0, "the origin moved to the resume");
}

/* ------------------------------------------------------------------------------------------------ strict types */

Test(ckpt_invariants, a_boolean_given_as_a_string_is_refused)
{
    expect_refused("bool", "", "has_val", cJSON_CreateString("true"), "field has_val: not true or false");
}

Test(ckpt_invariants, a_count_given_as_a_fraction_is_refused)
{
    expect_refused("frac", "", "cuda_generators", cJSON_CreateNumber(1.5),
                   "field cuda_generators: not a whole count in [0, 1024]");
}

Test(ckpt_invariants, a_thread_count_of_another_type_is_refused_not_ignored)
{
    expect_refused("threads", "threads", "intra_op", cJSON_CreateString("1"),
                   "field threads.intra_op: not a whole count");
}

Test(ckpt_invariants, an_unknown_reason_is_refused)
{
    expect_refused("reason", "", "reason", cJSON_CreateString("trainer\x7f"), "field reason: not one of");
}

/* ------------------------------------------------------------------------------------------------ ranges */

Test(ckpt_invariants, an_lr_above_the_schedules_base_lr_is_refused)
{
    expect_refused("lr", "param_groups[0]", "lr", hex(0.3),
                   "field param_groups[].lr: 0.29999999999999999, above "
                   "the optim.lr 0.0030000000000000001");
}

/* The "never resumes": a plateau lr of 1e10 diverged at once and stayed the newest checkpoint forever. Now
 * it is skipped by name, the run resumes from step 8, and ends equal to a run that was never tampered with. */
Test(ckpt_invariants, a_plateau_lr_above_optim_lr_is_skipped_and_the_run_resumes_from_the_one_before)
{
    run_bc("plateau", 12, NULL); /* step 12 is the newest checkpoint */
    tr_error err;
    struct edit e = {"selection.plateau", "lr", hex(1e10)};
    support_edit_checkpoint_json(ckpt_dir("plateau", 12), "trainer.json", apply_edit, &e);
    cr_assert_eq(check("plateau", 12, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "field selection.plateau.lr: 10000000000, above the optim.lr 0.003"), "%s", err.msg);
    char args[2400], out[1 << 15];
    size_t used = (size_t)snprintf(args, sizeof args, "configs/breast_cancer_bce.yaml");
    for (int i = 0; k_run[i]; i++) used += (size_t)snprintf(args + used, sizeof args - used, " %s", k_run[i]);
    snprintf(args + used, sizeof args - used, " train.max_steps=16 run.dir='%s' run.name=plateau", support_tmpdir);
    const int code = support_cli(args, out, sizeof out);
    cr_assert_eq(code, 0, "exit %d: %s", code, out);
    cr_expect(strstr(out, "skipping checkpoint") && strstr(out, "step-0000000012") &&
                  strstr(out, "selection.plateau.lr"),
              "%s", out);
    double rs[4];
    cr_assert_eq(support_read_field(support_path("plateau"), "resume", "step", rs, NULL, 4), 1);
    cr_expect_eq(rs[0], 8.0);
    run_bc("straight", 16, NULL);
    char a[65], b[65];
    support_manifest_digest(ckpt_dir("straight", 16), "model.safetensors", a);
    support_manifest_digest(ckpt_dir("plateau", 16), "model.safetensors", b);
    cr_assert_eq(strlen(a), 32);
    cr_expect_str_eq(b, a, "the final parameters equal the uninterrupted run's");
}

/* ------------------------------------------------------------------------------------------------ the log window */

Test(ckpt_invariants, more_correct_than_samples_in_the_window_is_refused)
{
    run_bc("w0", 13, NULL); /* only to read the window's sample count */
    const long long samples = (long long)field("w0", "log_window", "samples");
    cr_assert_eq(samples, 64, "steps 11 and 12 of 32 samples");
    expect_refused("win", "log_window", "correct", i64(samples + 1),
                   "field log_window.correct: 65 correct of 64 samples");
}

Test(ckpt_invariants, correct_targets_without_samples_are_refused)
{
    run_bc("z", 13, NULL);
    struct edit e = {"log_window", "samples", i64(0)};
    support_edit_checkpoint_json(ckpt_dir("z", 12), "trainer.json", apply_edit, &e);
    tr_error err;
    cr_assert_eq(check("z", 12, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "field log_window.correct: ") && strstr(err.msg, " correct of 0 samples"), "%s", err.msg);
}

Test(ckpt_invariants, a_negative_or_non_finite_loss_sum_is_refused)
{
    const double bad[] = {-0.5, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "loss%d", i);
        expect_refused(name, "log_window", "loss_sum", hex(bad[i]), "field log_window.loss_sum: ");
    }
}

/* ------------------------------------------------------------------------------------------------ selection */

Test(ckpt_invariants, a_top_k_entry_without_its_checkpoint_is_refused)
{
    run_bc("k0", 13, NULL); /* the same run: which of its two best is step 12's own entry */
    const int other = field("k0", "selection.checkpoint.top_k[1]", "step") == 12.0 ? 0 : 1;
    char path[64], want[128];
    snprintf(path, sizeof path, "selection.checkpoint.top_k[%d]", other);
    snprintf(want, sizeof want, "field selection.checkpoint.top_k[%d].step: 6, but there is no checkpoint", other);
    expect_refused("topk", path, "step", i64(6), want);
}

Test(ckpt_invariants, a_top_k_score_no_accuracy_can_take_is_refused)
{
    expect_refused("score", "selection.checkpoint.top_k[0]", "score", hex(9.2e18),
                   "field selection.checkpoint.top_k[0].score: 9.2e+18 is not a val_accuracy ([0, 1])");
}

Test(ckpt_invariants, missing_selection_state_of_a_config_that_selects_is_refused)
{
    expect_refused("nosel", "", "selection", NULL,
                   "field selection.checkpoint: missing, but the config it was saved "
                   "with keeps the best by val_accuracy");
    expect_refused("noes", "selection", "early_stopping", NULL, "field selection.early_stopping: missing");
}

/* An emptied top-k (the state a resume would prune the best with) contradicts best.json, which names the best. */
Test(ckpt_invariants, an_emptied_top_k_is_refused_while_best_json_names_the_best)
{
    expect_refused("empty", "selection.checkpoint", "top_k", cJSON_CreateArray(),
                   "field selection.checkpoint.top_k: empty, but ");
}

Test(ckpt_invariants, monitored_values_outside_their_metrics_range_are_refused)
{
    expect_refused("esbest", "selection.early_stopping", "best", hex(-1.0),
                   "field selection.early_stopping.best: -1 is not a val_loss (a finite value >= 0)");
    expect_refused("valacc", "", "val_accuracy", hex(1.5), "field val_accuracy: 1.5 is outside [0, 1]");
    expect_refused("plbest", "selection.plateau", "best", hex(-3.0),
                   "field selection.plateau.best: -3 is not a val_loss");
}

/* ------------------------------------------------------------------------------------------------ the cursor */

Test(ckpt_invariants, a_position_that_does_not_follow_from_the_step_is_refused)
{
    /* step 12: 11 steps fill epoch 0 (352 of 364 samples, drop_last), step 12 is epoch 1's first batch */
    run_bc("c0", 13, NULL);
    cr_assert_eq(field("c0", "", "epoch"), 1.0);
    cr_assert_eq(field("c0", "", "position"), 32.0);
    expect_refused("pos", "", "position", i64(64),
                   "field position: epoch 1, position 64 after step 12, but 12 steps "
                   "of 32 samples from the cursor's origin (step 0: epoch 0, position "
                   "0) in epochs of 364 samples (drop_last) end at epoch 1, position 32");
}

Test(ckpt_invariants, an_epoch_that_does_not_follow_from_the_step_is_refused)
{
    expect_refused("epoch", "", "epoch", i64(0), "field epoch: epoch 0, position 32 after step 12");
}

Test(ckpt_invariants, a_batch_geometry_other_than_the_saving_configs_is_refused)
{
    expect_refused("geom", "cursor", "step_samples", i64(16), "field cursor.step_samples: 16 samples a step");
}

/* ------------------------------------------------------------------------------------------------ totals */

Test(ckpt_invariants, a_sample_total_that_contradicts_the_steps_is_refused)
{
    expect_refused("tot", "", "samples_total", i64(385),
                   "field samples_total: 385, but the cursor's steps since its "
                   "origin took 384 samples");
}

Test(ckpt_invariants, more_time_in_steps_than_in_training_is_refused)
{
    run_bc("t0", 13, NULL);
    const double elapsed = field("t0", "", "elapsed_seconds");
    expect_refused("time", "", "step_seconds", hex(2 * elapsed + 1), "(elapsed_seconds) they are part of");
}

/* ------------------------------------------------------------------------------------------------ pruning */

/* Pruning with no selection state (a run whose checkpoint.monitor was turned off, or a state without entries)
 * keeps what best.json names: pruned to keep_last 0, exactly the two best stay; a state with entries is the newer
 * word (best.json is rewritten from it after the save). */
Test(ckpt_invariants, pruning_keeps_what_best_json_names_whatever_the_state_says)
{
    const char *const keep_all[] = {"checkpoint.keep_last=10", NULL};
    run_bc("prune", 13, keep_all);
    char run[900], monitor[TR_MONITOR_NAME];
    snprintf(run, sizeof run, "%s/prune", support_tmpdir);
    tr_topk named;
    int mode_max = 0;
    cr_assert_eq(tr_ckpt_best_json(run, monitor, &mode_max, &named), 2, "best.json names the top 2");
    cr_expect_str_eq(monitor, "val_accuracy");
    cr_expect(mode_max);
    tr_error err = {0};
    const tr_topk empty = {0};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(tr_checkpoint_prune(run, 0, 12, k ? NULL : &empty, &err), TR_OK, "%s", err.msg);
        for (int step = 4; step <= 12; step += 4) {
            struct stat st;
            cr_expect_eq(stat(ckpt_dir("prune", step), &st) == 0, tr_topk_has(&named, step),
                         "step %d: kept exactly when best.json names it", step);
        }
    }
    const tr_topk one = {.n = 1, .step = {named.step[1]}, .score = {0.5}};
    cr_assert_eq(tr_checkpoint_prune(run, 0, 12, &one, &err), TR_OK, "%s", err.msg);
    struct stat st;
    cr_expect_eq(stat(ckpt_dir("prune", (int)named.step[0]), &st), -1, "a set with entries decides alone");
    cr_expect_eq(stat(ckpt_dir("prune", (int)named.step[1]), &st), 0);
}

/* ------------------------------------------------------------------------------------------------ first step */

/* Every float of a checkpoint's model.safetensors set to 1e30, re-signed: the checkpoint verifies and
 * passes every check (finite weights of the right shapes), but its first step overflows to a non-finite loss. */
static void blow_up_weights(const char *dir)
{
    char path[1000];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    uint64_t header = 0;
    cr_assert_eq(fread(&header, 8, 1, f), 1);
    fseek(f, 0, SEEK_END);
    const long end = ftell(f);
    const float big = 1e30f;
    fseek(f, (long)(8 + header), SEEK_SET);
    for (long at = (long)(8 + header); at + 4 <= end; at += 4) cr_assert_eq(fwrite(&big, 4, 1, f), 1);
    fclose(f);
    support_resign_checkpoint_file(dir, "model.safetensors");
}

Test(ckpt_invariants, a_checkpoint_that_fails_its_first_step_is_set_aside_and_the_run_falls_back)
{
    const char *const two[] = {"checkpoint.keep_last=10", NULL};
    run_bc("first", 13, two); /* checkpoints 4, 8, 12 and 13 (the end's) */
    blow_up_weights(ckpt_dir("first", 13));
    tr_error err;
    cr_assert_eq(check("first", 13, &err), TR_OK, "the checks cannot tell: %s", err.msg);
    tr_config cfg;
    tr_summary s;
    bc_config(&cfg, "first", 16, two);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "the run falls back to step 12 and completes: %s", err.msg);
    struct stat st;
    char aside[1000];
    snprintf(aside, sizeof aside, "%s.unresumable", ckpt_dir("first", 13));
    cr_expect_eq(stat(aside, &st), 0, "the checkpoint is kept, set aside as %s", aside);
    double rs[4];
    cr_assert_eq(support_read_field(support_path("first"), "resume", "step", rs, NULL, 4), 2);
    cr_expect(rs[0] == 13.0 && rs[1] == 12.0, "resumed at 13, failed, then at 12: %g %g", rs[0], rs[1]);
    run_bc("first-straight", 16, two);
    char a[65], b[65];
    support_manifest_digest(ckpt_dir("first-straight", 16), "model.safetensors", a);
    support_manifest_digest(ckpt_dir("first", 16), "model.safetensors", b);
    cr_expect_str_eq(b, a, "the final parameters equal the uninterrupted run's");

    /* with another config the failure is the config's: nothing is set aside, the run fails (exit 1) */
    run_bc("cfg", 13, two);
    blow_up_weights(ckpt_dir("cfg", 13));
    const char *const other[] = {"checkpoint.keep_last=10", "optim.weight_decay=0.02", NULL};
    bc_config(&cfg, "cfg", 16, other);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "step 14: loss is") && strstr(err.msg, "optimizer step skipped"), "%s", err.msg);
    cr_expect_eq(stat(ckpt_dir("cfg", 13), &st), 0, "kept where it was");
}
