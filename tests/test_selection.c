/*
 * test_selection.c -- model selection on an evaluation metric: the top-k set of checkpoint.save_top_k, early
 * stopping and the plateau schedule as pure rules over scripted metric sequences (the plateau's lr against
 * torch.optim.lr_scheduler.ReduceLROnPlateau's, tests/reference/plateau.py); then in runs: the convnet keeps its
 * two best checkpoints by validation accuracy, a stalled run stops early, a run directory given to predict and
 * init.from means its best checkpoint, best.json and trainer.json's selection are checked as untrusted input, and
 * a SIGKILL + resume keeps the same checkpoints, stops at the same step and ends with the same parameters.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "best.h"
#include "checkpoint.h"
#include "config.h"
#include "history.h"
#include "monitor.h"
#include "run.h"
#include "schedule.h"
#include "selection.h"
#include "support.h"

TestSuite(selection, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

/* ------------------------------------------------------------------------------------------------ rules */

Test(selection, topk_keeps_the_k_best_of_a_sequence)
{
    /* mode max, k = 2: (step, score) offered in order; the set after each offer, best first */
    const int64_t steps[] = {100, 200, 300, 400, 500, 600, 700};
    const double scores[] = {0.5, 0.7, 0.6, 0.65, 0.7, 0.8, NAN};
    const int entered[] = {1, 1, 1, 1, 1, 1, 0};
    const int64_t evicted[] = {-1, -1, 100, 300, 400, 500, -1};
    const int64_t after[][2] = {{100, -1}, {200, 100}, {200, 300}, {200, 400}, {200, 500}, {600, 200}, {600, 200}};
    tr_topk t = {0};
    for (int i = 0; i < 7; i++) {
        int64_t out = 0;
        cr_assert_eq(tr_topk_offer(&t, 2, 1, steps[i], scores[i], &out), entered[i], "offer %d", i);
        cr_assert_eq(out, evicted[i], "offer %d evicted %lld", i, (long long)out);
        cr_assert_eq(t.step[0], after[i][0], "offer %d: best is step %lld", i, (long long)t.step[0]);
        if (after[i][1] >= 0) cr_assert_eq(t.step[1], after[i][1], "offer %d: second is %lld", i, (long long)t.step[1]);
    }
    /* the tie (0.7 at 200 and 500) kept the earlier first, and 0.8 then pushed 500 out */
    cr_assert_eq(t.n, 2);
    cr_assert(tr_topk_has(&t, 600) && tr_topk_has(&t, 200) && !tr_topk_has(&t, 500));
    /* mode min, k = 3 */
    tr_topk m = {0};
    const double losses[] = {0.9, 0.8, 0.85, 0.95, 0.7};
    for (int i = 0; i < 5; i++) tr_topk_offer(&m, 3, 0, 10 * (i + 1), losses[i], NULL);
    cr_assert_eq(m.n, 3);
    cr_assert_eq(m.step[0], 50);
    cr_assert_eq(m.step[1], 20);
    cr_assert_eq(m.step[2], 30);
}

Test(selection, early_stopping_stops_at_the_scripted_evaluation)
{
    /* mode min, patience 2, min_delta 0.01 (Lightning: improvement = value + min_delta < best):
     * 1.0 improves (best 1.0); 0.9 improves; 0.895 does not (0.905 >= 0.9): wait 1; 0.85 improves: wait 0;
     * 0.849 does not: wait 1; 0.86 does not: wait 2 = patience: stop at the sixth evaluation */
    const double seq[] = {1.0, 0.9, 0.895, 0.85, 0.849, 0.86, 0.1};
    tr_early_stop e;
    tr_early_stop_init(&e, 0);
    char why[256];
    int stop_at = -1;
    for (int i = 0; i < 7 && stop_at < 0; i++)
        if (tr_early_stop_update(&e, 0, 0.01, 2, 10 * (i + 1), seq[i], "val_loss", why, sizeof why)) stop_at = i;
    cr_assert_eq(stop_at, 5);
    cr_assert_eq(e.best, 0.85);
    cr_assert_eq(e.best_step, 40);
    cr_assert(e.stopped);
    cr_assert(strstr(why, "val_loss did not improve by more than 0.01 for 2 evaluations"), "%s", why);
    /* mode max, patience 1: stops at the first evaluation that does not beat the best */
    tr_early_stop_init(&e, 1);
    const double acc[] = {0.5, 0.6, 0.6};
    stop_at = -1;
    for (int i = 0; i < 3 && stop_at < 0; i++)
        if (tr_early_stop_update(&e, 1, 0.0, 1, i, acc[i], "val_accuracy", why, sizeof why)) stop_at = i;
    cr_assert_eq(stop_at, 2);
    /* a non-finite value stops at once (Lightning's check_finite) */
    tr_early_stop_init(&e, 0);
    cr_assert_eq(tr_early_stop_update(&e, 0, 0, 5, 1, NAN, "val_loss", why, sizeof why), 1);
    cr_assert(strstr(why, "not finite"), "%s", why);
}

/* The lr after each step(metric) of torch 1.13's ReduceLROnPlateau on this sequence, for three settings:
 * computed by tests/reference/plateau.py with Debian's python3-torch (printed with repr, so exact). */
static const double k_seq[] = {1.0, 0.9, 0.95, 0.91, 0.92, 0.9, 0.89, 0.95, 0.96, 0.97,
                               0.98, 0.99, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2};
static const double k_torch[3][20] = {
    {0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.025, 0.025, 0.0125, 0.0125,
     0.0125, 0.00625, 0.00625},
    {0.1, 0.1, 0.1, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002, 0.002,
     0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.002, 0.002},
    {0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125, 0.00625, 0.00625, 0.003125, 0.003125, 0.0015625, 0.0015625,
     0.00078125, 0.00078125, 0.000390625, 0.000390625, 0.0001953125, 0.0001953125, 0.0001953125},
};

Test(selection, plateau_lr_equals_torch_reduce_lr_on_plateau)
{
    struct {
        tr_monitor_mode mode;
        double factor;
        int64_t patience;
        double threshold;
        tr_threshold_mode tmode;
        int64_t cooldown;
        double min_lr;
    } cases[3] = {{TR_MODE_MIN, 0.5, 2, 1e-4, TR_THRESHOLD_REL, 0, 0.0},
                  {TR_MODE_MIN, 0.1, 1, 0.05, TR_THRESHOLD_REL, 2, 0.002},
                  {TR_MODE_MAX, 0.5, 0, 0.01, TR_THRESHOLD_ABS, 1, 0.0}};
    for (int c = 0; c < 3; c++) {
        tr_config cfg;
        tr_config_defaults(&cfg);
        cfg.optim.lr = 0.1;
        cfg.schedule.name = TR_SCHED_PLATEAU;
        cfg.schedule.mode = cases[c].mode;
        cfg.schedule.factor = cases[c].factor;
        cfg.schedule.patience = cases[c].patience;
        cfg.schedule.threshold = cases[c].threshold;
        cfg.schedule.threshold_mode = cases[c].tmode;
        cfg.schedule.cooldown = cases[c].cooldown;
        cfg.schedule.min_lr = cases[c].min_lr;
        tr_select_state s;
        memset(&s, 0, sizeof s);
        tr_plateau_init(&cfg, &s);
        for (int i = 0; i < 20; i++) {
            tr_plateau_step(&cfg, &s, k_seq[i]);
            cr_assert_eq(s.plateau.lr, k_torch[c][i], "case %d, evaluation %d: lr %.17g, torch %.17g", c, i,
                         s.plateau.lr, k_torch[c][i]);
            /* the step's lr: warm-up aside, the schedule hands the plateau's lr through */
            cr_assert_eq(tr_schedule_lr_from(&cfg, s.plateau.lr, 1000, 2000, 10), s.plateau.lr);
        }
    }
}

Test(selection, monitor_names_are_checked_with_file_line_and_column)
{
    char why[256];
    tr_monitor m;
    cr_assert_eq(tr_monitor_parse("val_ema_micro_f1", &m, why, sizeof why), 0);
    cr_assert(m.ema && !m.test && m.metric == TR_MON_MICRO_F1);
    cr_assert_eq(tr_monitor_parse("test_mse", &m, why, sizeof why), 0);
    cr_assert(m.test && m.metric == TR_MON_MSE);
    cr_assert_eq(tr_monitor_parse("val_acc", &m, why, sizeof why), -1);
    const char *path = support_path("bad.yaml");
    support_write_file(path, "model:\n  spec: ../models/mlp.yaml\ncheckpoint:\n  monitor: val_acc\n");
    tr_config cfg;
    tr_config_defaults(&cfg);
    tr_error err = {0};
    cr_assert_eq(tr_config_load_file(&cfg, path, &err), TR_E_CONFIG);
    cr_assert(strstr(err.msg, "bad.yaml:4:12: checkpoint.monitor: 'val_acc' is not a metric"), "%s", err.msg);
    tr_config_defaults(&cfg);
    cr_assert_eq(tr_config_override(&cfg, "schedule.factor=1", &err), TR_E_CONFIG);
    cr_assert(strstr(err.msg, "schedule.factor"), "%s", err.msg);
}

/* ------------------------------------------------------------------------------------------------ runs */

/* The steps of run_dir's checkpoints (ascending) into out[max]; returns the count. */
static int checkpoint_steps(const char *run_dir, long long *out, int max)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/checkpoints", run_dir);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) == 1) out[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            const long long x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    return n;
}

static int has_step(const long long *s, int n, long long step)
{
    for (int i = 0; i < n; i++)
        if (s[i] == step) return 1;
    return 0;
}

/* The convnet with checkpoint.monitor val_accuracy, mode max, save_top_k 2: the kept checkpoints are the two best
 * by the eval records' accuracy, plus keep_last's newest other one; best.json names the best with its exact score;
 * predict and init.from given the run directory use that checkpoint. */
Test(selection, convnet_keeps_the_two_best_by_val_accuracy)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=60", "eval.every_steps=10", "eval.weights=live", "ema.enabled=false",
                                 "checkpoint.monitor=val_accuracy", "checkpoint.mode=max", "checkpoint.save_top_k=2",
                                 "checkpoint.keep_last=1", "checkpoint.every_seconds=0", "eval.test_at_end=false",
                                 NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_cnn.yaml", "cnn", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    char dir[800];
    snprintf(dir, sizeof dir, "%s/cnn", support_tmpdir);
    double acc[16], steps[16];
    const int ne = support_read_field(dir, "eval", "accuracy", acc, steps, 16);
    cr_assert_eq(ne, 6);
    /* the two best from the records, ties to the earlier step; and the saves that made them */
    int b0 = -1, b1 = -1;
    for (int i = 0; i < ne; i++) {
        if (b0 < 0 || acc[i] > acc[b0]) b1 = b0, b0 = i;
        else if (b1 < 0 || acc[i] > acc[b1]) b1 = i;
    }
    long long kept[32];
    const int nk = checkpoint_steps(dir, kept, 32);
    cr_assert(has_step(kept, nk, (long long)steps[b0]), "best step %.0f (%.4f) not kept", steps[b0], acc[b0]);
    cr_assert(has_step(kept, nk, (long long)steps[b1]), "second best step %.0f (%.4f) not kept", steps[b1], acc[b1]);
    /* besides the two best, exactly keep_last (1) other: the newest of the rest (the end's at step 60 when it is
     * not among the best; else the last one the top-2 evicted) */
    cr_assert_eq(nk, 3, "kept %d checkpoints", nk);
    cr_assert(has_step(kept, nk, 60));
    cr_assert_eq(s.best_step, (long long)steps[b0]);
    cr_assert_eq(s.best_score, acc[b0], "best score %.17g, eval record %.17g", s.best_score, acc[b0]);
    char best[1200];
    int used = 0;
    cr_assert_eq(tr_best_resolve(dir, best, sizeof best, &used, &err), TR_OK, "%s", err.msg);
    cr_assert(used);
    char want[1200];
    snprintf(want, sizeof want, "%s/checkpoints/step-%010lld", dir, (long long)steps[b0]);
    cr_assert_str_eq(best, want);
    /* predict RUN_DIR uses it */
    char args[2048], out[8192];
    snprintf(args, sizeof args, "predict '%s' -o '%s'", dir, support_path("preds.csv"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, want), "predict did not use the best checkpoint %s:\n%s", want, out);
    /* init.from RUN_DIR too */
    snprintf(args, sizeof args, "configs/fashion_mnist_cnn.yaml data.train_subset=600 data.val_size=100 "
             "data.test_subset=100 train.max_steps=1 eval.every_epoch=false eval.test_at_end=false "
             "log.progress=never run.dir='%s' run.name=from init.from='%s'", support_tmpdir, dir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "is a run directory: its best checkpoint"), "%s", out);
    cr_assert(strstr(out, want), "%s", out);
}

/* A learning rate too small to move anything: val_loss stalls, and early stopping with patience 2 stops the run
 * at its third evaluation (the first sets the best), with exit status 0 and the reason in summary.json. */
Test(selection, early_stopping_stops_a_stalled_run)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=300", "eval.every_steps=5", "optim.lr=1e-12", "schedule.warmup_steps=0",
                                 "early_stopping.monitor=val_loss", "early_stopping.patience=2",
                                 "early_stopping.min_delta=1e-4", "checkpoint.every_seconds=0", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "stall", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(s.steps, 15);
    cr_assert(s.early_stopped);
    cr_assert(s.has_test, "an early-stopped run is complete: it is tested");
    cr_assert(strstr(s.stop_reason, "val_loss did not improve by more than 0.0001 for 2 evaluations"), "%s",
              s.stop_reason);
    char path[1200], text[16384];
    snprintf(path, sizeof path, "%s/stall/summary.json", support_tmpdir);
    support_read_file(path, text, sizeof text);
    cr_assert(strstr(text, "\"status\":\"completed\""), "%s", text);
    cr_assert(strstr(text, "\"early_stopped\":true"), "%s", text);
    cr_assert(strstr(text, "early stopping after step 15"), "%s", text);
    /* started again, the run is complete: nothing is trained */
    tr_summary again;
    cr_assert_eq(tr_run(&cfg, &again, &err), TR_OK, "%s", err.msg);
    cr_assert(again.already_complete);
}

/* A monitor the evaluation does not report is a config error naming the key, before anything is trained. */
Test(selection, monitor_must_be_reported_by_the_evaluation)
{
    support_require_fmnist();
    const char *const a[] = {"train.max_steps=5", "checkpoint.monitor=val_micro_f1", NULL};
    const char *const b[] = {"train.max_steps=5", "early_stopping.monitor=val_ema_loss", NULL};
    const char *const c[] = {"train.max_steps=5", "schedule.name=plateau", "eval.every_steps=0", NULL};
    const char *const *cases[] = {a, b, c};
    const char *want[] = {"checkpoint.monitor: val_micro_f1 is not reported for classification",
                          "early_stopping.monitor: val_ema_loss needs the EMA weights evaluated",
                          "schedule.monitor: val_loss needs a periodic evaluation"};
    for (int i = 0; i < 3; i++) {
        tr_config cfg;
        tr_summary s;
        tr_error err = {0};
        char name[16];
        snprintf(name, sizeof name, "bad%d", i);
        support_subset_config(&cfg, "fashion_mnist_mlp.yaml", name, cases[i]);
        cr_assert_eq(tr_run(&cfg, &s, &err), TR_E_CONFIG, "case %d: %s", i, err.msg);
        cr_assert(strstr(err.msg, want[i]), "case %d: %s", i, err.msg);
    }
}

/* ------------------------------------------------------------------------------------------------ untrusted */

static void set_topk_score(cJSON *o, void *ctx)
{
    (void)ctx;
    cJSON *list = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "selection"), "checkpoint"), "top_k");
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(list, 0), "score", cJSON_CreateString("nan"));
}

/* best.json is read as untrusted input: a path that leaves checkpoints/ and a score its checkpoint did not record
 * are refused naming the field; trainer.json's selection is checked field by field. */
Test(selection, best_json_and_selection_are_validated)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=20", "eval.every_steps=10", "checkpoint.monitor=val_loss",
                                 "checkpoint.every_seconds=0", "eval.test_at_end=false", NULL};
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "v", extra);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    char dir[800], path[1200], text[8192], out[1200];
    snprintf(dir, sizeof dir, "%s/v", support_tmpdir);
    snprintf(path, sizeof path, "%s/best.json", dir);
    support_read_file(path, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o);
    /* a path out of the run directory */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(o, "best"), "checkpoint",
                              cJSON_CreateString("../../etc"));
    char *bad = cJSON_Print(o);
    support_write_file(path, bad);
    free(bad);
    int used = 0;
    cr_assert_eq(tr_best_resolve(dir, out, sizeof out, &used, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, "best.json: field best.checkpoint"), "%s", err.msg);
    /* a score the checkpoint did not record */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(o, "best"), "checkpoint",
                              cJSON_CreateString("checkpoints/step-0000000020"));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(o, "best"), "step", cJSON_CreateNumber(20));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItemCaseSensitive(o, "best"), "score", cJSON_CreateNumber(-1.0));
    bad = cJSON_Print(o);
    support_write_file(path, bad);
    free(bad);
    cJSON_Delete(o);
    cr_assert_eq(tr_best_resolve(dir, out, sizeof out, &used, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, "field best.score"), "%s", err.msg);
    /* a NaN score in a checkpoint's trainer.json (manifest re-hashed: only the field check can tell) */
    char ckpt[1000];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoints/step-0000000020", dir);
    support_edit_checkpoint_json(ckpt, "trainer.json", set_topk_score, NULL);
    cr_assert_neq(tr_checkpoint_verify(ckpt, &err), TR_E_RUNTIME, "the manifest was re-hashed: %s", err.msg);
    snprintf(path, sizeof path, "%s/trainer.json", ckpt);
    support_read_file(path, text, sizeof text);
    tr_ckpt_progress p;
    tr_ckpt_meta m;
    cr_assert_eq(tr_ckpt_parse_trainer(text, path, 20, &p, &m, &err), TR_E_RUNTIME);
    cr_assert(strstr(err.msg, "field selection.checkpoint.top_k[0].score: not finite"), "%s", err.msg);
}

/* ------------------------------------------------------------------------------------------------ kill + resume */

#define MAX_ARGS 48

static void args_for(const char **argv, char *buf, const char *name)
{
    static const char *const common[] = {
        "configs/fashion_mnist_mlp.yaml", "data.train_subset=3000", "data.val_size=500", "eval.test_at_end=false",
        "train.batch_size=64", "log.every_steps=1", "log.progress=never", "eval.every_epoch=false",
        "eval.every_steps=20", "train.max_steps=400", "schedule.name=plateau", "schedule.monitor=val_loss",
        "schedule.patience=0", "schedule.factor=0.5", "schedule.threshold=0.02", "schedule.warmup_steps=0",
        "checkpoint.monitor=val_accuracy", "checkpoint.mode=max", "checkpoint.save_top_k=2",
        "checkpoint.keep_last=2", "checkpoint.every_steps=30", "checkpoint.every_seconds=0",
        "early_stopping.monitor=val_loss", "early_stopping.patience=4", "early_stopping.min_delta=0.01", NULL};
    int n = 0;
    for (; common[n]; n++) argv[n] = common[n];
    snprintf(buf, 512, "run.dir=%s", support_tmpdir);
    argv[n++] = buf;
    snprintf(buf + 512, 512, "run.name=%s", name);
    argv[n++] = buf + 512;
    argv[n] = NULL;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* A run with top-k, early stopping and the plateau schedule, killed with SIGKILL mid-way and resumed, ends as the
 * uninterrupted run: the same checkpoints kept, the same best.json, the same stop step, the same final parameters
 * (model.safetensors hashes in the final manifest), and a metrics.csv whose train rows have each step once with
 * the uninterrupted run's loss and lr. */
Test(selection, kill_and_resume_keep_the_same_checkpoints_stop_and_parameters)
{
    support_require_fmnist();
    const char *argv[MAX_ARGS];
    char buf[1024], log[800], dir_s[800], dir_k[800];
    args_for(argv, buf, "straight");
    snprintf(log, sizeof log, "%s/straight.log", support_tmpdir);
    cr_assert_eq(support_wait(support_spawn(argv, log)), 0, "see %s", log);
    snprintf(dir_s, sizeof dir_s, "%s/straight", support_tmpdir);
    long long stop_s = support_last_step(dir_s, "train");

    args_for(argv, buf, "killed");
    snprintf(log, sizeof log, "%s/killed.log", support_tmpdir);
    snprintf(dir_k, sizeof dir_k, "%s/killed", support_tmpdir);
    const long long target = stop_s / 2 + 7; /* between checkpoints (every 30) and evaluations (every 20) */
    char at_step[32];
    snprintf(at_step, sizeof at_step, "%lld", target);
    setenv("TRAINRUN_KILL_AT_STEP", at_step, 1); /* an exact step (run.c, kill_due), not a poll that can miss the end */
    const int code = support_wait(support_spawn(argv, log));
    unsetenv("TRAINRUN_KILL_AT_STEP");
    cr_assert_eq(code, 128 + SIGKILL, "exit %d, not killed at step %lld (see %s)", code, target, log);
    const long long at = support_last_step(dir_k, "train");
    cr_assert_eq(at, target);
    fprintf(stderr, "kill_and_resume: uninterrupted run stopped at step %lld; killed at step %lld\n", stop_s, at);
    cr_assert_eq(support_wait(support_spawn(argv, log)), 0, "see %s", log);
    cr_assert_geq(support_count_records(dir_k, "\"type\":\"resume\""), 1);

    long long ks[64], kk[64];
    const int ns = checkpoint_steps(dir_s, ks, 64), nk = checkpoint_steps(dir_k, kk, 64);
    cr_assert_eq(nk, ns);
    for (int i = 0; i < ns; i++) cr_assert_eq(kk[i], ks[i], "checkpoint %d: step %lld vs %lld", i, kk[i], ks[i]);
    cr_assert_eq(support_last_step(dir_k, "train"), stop_s);
    char p1[1200], p2[1200];
    snprintf(p1, sizeof p1, "%s/best.json", dir_s);
    snprintf(p2, sizeof p2, "%s/best.json", dir_k);
    char *b1 = slurp(p1), *b2 = slurp(p2);
    cr_assert_str_eq(b1, b2);
    free(b1);
    free(b2);
    snprintf(p1, sizeof p1, "%s/checkpoints/step-%010lld/MANIFEST.json", dir_s, ks[ns - 1]);
    snprintf(p2, sizeof p2, "%s/checkpoints/step-%010lld/MANIFEST.json", dir_k, kk[nk - 1]);
    b1 = slurp(p1);
    b2 = slurp(p2);
    const char *m1 = strstr(b1, "\"model.safetensors\""), *m2 = strstr(b2, "\"model.safetensors\"");
    cr_assert(m1 && m2);
    cr_assert(strstr(m1, "xxh3_128") && strstr(m2, "xxh3_128"), "format-2 manifests list XXH3-128 digests");
    cr_assert_eq(strncmp(strstr(m1, "xxh3_128"), strstr(m2, "xxh3_128"), 45), 0, "final parameters differ");
    free(b1);
    free(b2);
    snprintf(p1, sizeof p1, "%s/summary.json", dir_s);
    snprintf(p2, sizeof p2, "%s/summary.json", dir_k);
    b1 = slurp(p1);
    b2 = slurp(p2);
    cr_assert_eq(strstr(b1, "\"early_stopped\":true") != NULL, strstr(b2, "\"early_stopped\":true") != NULL);
    free(b1);
    free(b2);

    /* metrics.csv: the train rows of the resumed run are the uninterrupted run's, each step once */
    tr_history hs = {0}, hk = {0};
    tr_error err = {0};
    snprintf(p1, sizeof p1, "%s/metrics.jsonl", dir_s);
    snprintf(p2, sizeof p2, "%s/metrics.jsonl", dir_k);
    cr_assert_eq(tr_history_load(&hs, p1, &err), TR_OK);
    cr_assert_eq(tr_history_load(&hk, p2, &err), TR_OK);
    snprintf(p2, sizeof p2, "%s/metrics.csv", dir_k);
    FILE *f = fopen(p2, "r");
    cr_assert_not_null(f);
    char line[4096];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_eq(strncmp(line, "step,epoch,train_loss,train_accuracy,lr,", 40), 0, "header %s", line);
    long long prev = 0;
    int rows = 0;
    size_t hi = 0;
    while (fgets(line, sizeof line, f)) {
        long long step = 0, epoch = 0;
        double loss = NAN, acc = NAN, lr = NAN;
        const int got = sscanf(line, "%lld,%lld,%lf,%lf,%lf", &step, &epoch, &loss, &acc, &lr);
        if (got < 5) continue; /* an eval row: no train columns */
        cr_assert_eq(step, prev + 1, "metrics.csv: train row for step %lld after %lld", step, prev);
        prev = step;
        while (hi < hs.n && !(hs.r[hi].type == TR_HIST_TRAIN && hs.r[hi].step == step)) hi++;
        cr_assert_lt(hi, hs.n, "step %lld not in the uninterrupted run", step);
        double want;
        cr_assert(tr_hist_get(&hs.r[hi], "train_loss", &want));
        cr_assert_eq(loss, want, "step %lld: loss %.17g vs %.17g", step, loss, want);
        cr_assert(tr_hist_get(&hs.r[hi], "lr", &want));
        cr_assert_eq(lr, want, "step %lld: lr %.17g vs %.17g", step, lr, want);
        rows++;
    }
    fclose(f);
    cr_assert_eq(prev, stop_s);
    cr_assert_eq(rows, stop_s);
    /* the plateau reduced the lr at least once, right after an evaluation */
    int drops = 0;
    double last_lr = -1;
    for (size_t i = 0; i < hk.n; i++) {
        double lr;
        if (hk.r[i].type != TR_HIST_TRAIN || !tr_hist_get(&hk.r[i], "lr", &lr)) continue;
        if (last_lr > 0 && lr != last_lr) {
            cr_assert_eq(lr, last_lr * 0.5, "step %lld: lr %.17g after %.17g", (long long)hk.r[i].step, lr, last_lr);
            cr_assert_eq((hk.r[i].step - 1) % 20, 0, "lr changed at step %lld, not after an evaluation",
                         (long long)hk.r[i].step);
            drops++;
        }
        last_lr = lr;
    }
    cr_assert_geq(drops, 1, "the plateau schedule never reduced the lr");
    tr_history_free(&hs);
    tr_history_free(&hk);
}
