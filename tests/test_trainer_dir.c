/*
 * test_trainer_dir.c -- a trainer's run directory (trainrun_trainer_open_dir) keeps the protocol a run keeps with
 * its own: one writer, the newest checkpoint that verifies resumed bit for bit, a damaged one skipped with a
 * warning, unverifiable ones set aside on a fresh start; a resumed checkpoint set aside when the caller says so;
 * a stop request saves and stops; a non-finite loss says what to try; a fresh start takes init.from's weights and a
 * resume does not.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support.h"
#include "trainrun/trainrun.h"

TestSuite(trainer_dir, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 300);

#define D 8
#define K 4
#define N 512
#define BATCH 32

static float X[N * D];
static int64_t Y[N];

/* A config whose model draws from the generator every step (dropout), so a resume that lost it would show. */
static const char *trainer_yaml(void)
{
    static char buf[1024];
    const char *model = support_path("model.yaml");
    char text[256];
    snprintf(text, sizeof text, "input: [%d]\nlayers:\n  - linear: {in: %d, out: 32}\n  - relu\n"
             "  - dropout: {p: 0.1}\n  - linear: {in: 32, out: %d}\n", D, D, K);
    support_write_file(model, text);
    snprintf(buf, sizeof buf, "seed: 9\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.1, momentum: 0.9}\n"
             "checkpoint: {every_seconds: 0, every_steps: 10, keep_last: 5}\n"
             "log: {every_steps: 3, progress: never}\n", model);
    return buf;
}

/* The batch of step s (0-based): a function of the step, as a resumable loop's must be. */
static trainrun_batch batch_of(int64_t s)
{
    const int64_t start = (s * BATCH) % N;
    return (trainrun_batch){X + start * D, TRAINRUN_FLOAT32, 2, {BATCH, D, 0, 0}, Y + start, TRAINRUN_INT64};
}

typedef struct events {
    int warnings, checkpoints;
    char warning[4][600], reason[16];
} events;

static void on_event(void *ctx, const trainrun_event *ev)
{
    events *e = ctx;
    if (ev->kind == TRAINRUN_EVENT_WARNING && e->warnings < 4)
        snprintf(e->warning[e->warnings++], sizeof e->warning[0], "%s", ev->message);
    if (ev->kind == TRAINRUN_EVENT_CHECKPOINT) {
        e->checkpoints++;
        snprintf(e->reason, sizeof e->reason, "%s", ev->reason);
    }
}

/* A trainer of trainer_yaml() with n overrides, its events into *e. */
static trainrun_trainer *open_trainer_with(events *e, const char *const *ov, int n)
{
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(trainer_yaml(), ov, n, &t), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_set_callback(t, on_event, e), TRAINRUN_OK);
    return t;
}

static trainrun_trainer *open_trainer(events *e) { return open_trainer_with(e, NULL, 0); }

/* Steps from..to-1, each saved into the run directory when the policy says so; the losses into loss[] (unless
 * NULL); after each step's train step, after(t, s) unless NULL. */
static void train_with(trainrun_trainer *t, int64_t from, int64_t to, double *loss,
                       void (*after)(trainrun_trainer *t, int64_t s))
{
    for (int64_t s = from; s < to; s++) {
        const trainrun_batch b = batch_of(s);
        trainrun_step_result r;
        int due = 0;
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "step %lld: %s", (long long)s + 1,
                     trainrun_trainer_errmsg(t));
        if (loss) loss[s] = r.loss;
        if (after) after(t, s);
        cr_assert_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        if (due) cr_assert_eq(trainrun_trainer_save(t, NULL, NULL, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    }
}

static void train(trainrun_trainer *t, int64_t from, int64_t to, double *loss) { train_with(t, from, to, loss, NULL); }

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A trainer that took run directory `dir` (open_dir succeeded; *resumed may be NULL). */
static trainrun_trainer *open_in_dir(events *e, const char *dir, int *resumed)
{
    trainrun_trainer *t = open_trainer(e);
    cr_assert_eq(trainrun_trainer_open_dir(t, dir, resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    return t;
}

/* A fresh loop of `steps` steps in `dir`, saving every checkpoint.every_steps, then closed. */
static void train_in_dir(const char *dir, int64_t steps)
{
    events e = {0};
    static double loss[64];
    cr_assert_leq(steps, 64);
    trainrun_trainer *t = open_in_dir(&e, dir, NULL);
    train(t, 0, steps, loss);
    trainrun_trainer_close(t);
}

Test(trainer_dir, one_writer_and_the_newest_checkpoint_resumed_bit_for_bit)
{
    support_make_blobs(N, D, K, 3, X, Y);
    const char *dir = support_path("run");
    events ea = {0}, eb = {0};
    trainrun_trainer *a = open_trainer(&ea), *b = open_trainer(&eb);
    int resumed = -1;
    cr_assert_eq(trainrun_trainer_save(a, NULL, NULL, 0), TRAINRUN_E_INVALID); /* no directory yet */
    cr_expect(strstr(trainrun_trainer_errmsg(a), "no run directory"), "%s", trainrun_trainer_errmsg(a));
    cr_assert_eq(trainrun_trainer_open_dir(a, dir, &resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(a));
    cr_expect_eq(resumed, 0);
    cr_expect(exists(support_path("run/trainrun.lock")));
    cr_expect_eq(trainrun_trainer_open_dir(a, dir, NULL), TRAINRUN_E_INVALID); /* once */

    /* a second writer is refused while the first holds it, and touches nothing */
    cr_expect_eq(trainrun_trainer_open_dir(b, dir, &resumed), TRAINRUN_E_LOCKED);
    cr_expect(strstr(trainrun_trainer_errmsg(b), "pid"), "%s", trainrun_trainer_errmsg(b));

    static double whole[30], part[30];
    train(a, 0, 30, whole);
    cr_expect_eq(ea.checkpoints, 3);
    cr_expect(exists(support_path("run/checkpoints/step-0000000030")));
    trainrun_trainer_close(a);

    /* the lock went with a: b takes the directory and resumes its newest checkpoint */
    cr_assert_eq(trainrun_trainer_open_dir(b, dir, &resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(b));
    cr_expect_eq(resumed, 1);
    int64_t steps = 0;
    trainrun_trainer_steps(b, &steps);
    cr_expect_eq(steps, 30);
    cr_expect_eq(trainrun_trainer_open_dir(b, support_path("other"), NULL), TRAINRUN_E_INVALID);
    trainrun_trainer_close(b);

    /* resumed at 20 (30 removed), steps 21..30 repeat bit for bit, dropout's draws included */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -r '%s/checkpoints/step-0000000030'", dir);
    cr_assert_eq(system(cmd), 0);
    events ec = {0};
    trainrun_trainer *c = open_in_dir(&ec, dir, &resumed);
    trainrun_trainer_steps(c, &steps);
    cr_assert_eq(steps, 20);
    train(c, 20, 30, part);
    for (int s = 20; s < 30; s++) cr_expect_eq(part[s], whole[s], "step %d: %a vs %a", s + 1, part[s], whole[s]);
    cr_expect_eq(ec.warnings, 0, "%s", ec.warning[0]);
    trainrun_trainer_close(c);
}

Test(trainer_dir, a_damaged_checkpoint_is_skipped_and_kept)
{
    support_make_blobs(N, D, K, 3, X, Y);
    const char *dir = support_path("run");
    train_in_dir(dir, 20);

    /* one byte of step 20's weights changed: its SHA-256 no longer matches the manifest */
    const char *weights = support_path("run/checkpoints/step-0000000020/model.safetensors");
    support_flip_byte(weights, -1, SEEK_END, 1);

    events eb = {0};
    int resumed = 0;
    trainrun_trainer *b = open_in_dir(&eb, dir, &resumed);
    int64_t steps = 0;
    trainrun_trainer_steps(b, &steps);
    cr_expect_eq(resumed, 1);
    cr_expect_eq(steps, 10);
    cr_assert_eq(eb.warnings, 1);
    cr_expect(strstr(eb.warning[0], "step-0000000020") && strstr(eb.warning[0], "skipping"), "%s", eb.warning[0]);
    cr_expect(exists(weights)); /* kept, for inspection */
    trainrun_trainer_close(b);

    /* without any that verifies, a fresh start sets them aside, so new checkpoints do not compete with them */
    const char *only = support_path("run2");
    train_in_dir(only, 10);
    support_flip_byte(support_path("run2/checkpoints/step-0000000010/model.safetensors"), 0, SEEK_SET, 0xff);
    events ed = {0};
    trainrun_trainer *d = open_in_dir(&ed, only, &resumed);
    cr_expect_eq(resumed, 0);
    cr_expect(exists(support_path("run2/checkpoints/step-0000000010.corrupt")));
    cr_expect(!exists(support_path("run2/checkpoints/step-0000000010")));
    cr_expect_eq(ed.warnings, 2, "%d: %s / %s", ed.warnings, ed.warning[0], ed.warning[1]);
    trainrun_trainer_close(d);
}

Test(trainer_dir, a_failed_first_resumed_step_says_so_and_the_caller_sets_the_checkpoint_aside)
{
    support_make_blobs(N, D, K, 3, X, Y);
    const char *dir = support_path("run");
    events e = {0};
    trainrun_trainer *a = open_in_dir(&e, dir, NULL);
    cr_expect_eq(trainrun_trainer_set_aside_resumed(a, NULL, 0), TRAINRUN_E_INVALID); /* nothing resumed */
    static double loss[20];
    train(a, 0, 20, loss);
    trainrun_trainer_close(a);

    trainrun_trainer *b = open_in_dir(&e, dir, NULL);
    static float nan_x[BATCH * D];
    for (int i = 0; i < BATCH * D; i++) nan_x[i] = NAN;
    const trainrun_batch bad = {nan_x, TRAINRUN_FLOAT32, 2, {BATCH, D, 0, 0}, Y, TRAINRUN_INT64};
    trainrun_step_result r;
    cr_assert_eq(trainrun_trainer_train_step(b, &bad, &r), TRAINRUN_E_NONFINITE);
    const char *msg = trainrun_trainer_errmsg(b);
    cr_expect(strstr(msg, "train step 21: the loss is not finite: no step taken. Try a lower optim.lr (0.1 now) or "
                          "gradient clipping, optim.grad_clip_norm (e.g. 1.0)"), "%s", msg);
    cr_expect(strstr(msg, "the first step after resuming from ") && strstr(msg, "step-0000000020") &&
              strstr(msg, "trainrun_trainer_set_aside_resumed"), "%s", msg);
    cr_expect(exists(support_path("run/checkpoints/step-0000000020"))); /* the trainer renamed nothing */
    char to[1400];
    cr_assert_eq(trainrun_trainer_set_aside_resumed(b, to, sizeof to), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(b));
    cr_expect(strstr(to, "step-0000000020.unresumable"), "%s", to);
    cr_expect(exists(to));
    cr_expect_eq(trainrun_trainer_set_aside_resumed(b, NULL, 0), TRAINRUN_E_INVALID); /* once */
    cr_expect_eq(trainrun_trainer_save(b, NULL, NULL, 0), TRAINRUN_E_INVALID); /* it would bring step 20 back */
    cr_expect(strstr(trainrun_trainer_errmsg(b), "set aside"), "%s", trainrun_trainer_errmsg(b));
    cr_expect(!exists(support_path("run/checkpoints/step-0000000020")));
    trainrun_trainer_close(b);

    /* the next start resumes the next older one; a failure on a later step says nothing of the checkpoint */
    trainrun_trainer *c = open_in_dir(&e, dir, NULL);
    int64_t steps = 0;
    trainrun_trainer_steps(c, &steps);
    cr_expect_eq(steps, 10);
    train(c, 10, 11, loss);
    cr_assert_eq(trainrun_trainer_train_step(c, &bad, &r), TRAINRUN_E_NONFINITE);
    cr_expect(!strstr(trainrun_trainer_errmsg(c), "resuming"), "%s", trainrun_trainer_errmsg(c));
    trainrun_trainer_close(c);
}

Test(trainer_dir, a_stop_request_saves_and_stops)
{
    support_make_blobs(N, D, K, 3, X, Y);
    events e = {0};
    trainrun_trainer *t = open_trainer(&e);
    trainrun_trainer_request_stop(NULL); /* a no-op */
    cr_assert_eq(trainrun_trainer_open_dir(t, support_path("run"), NULL), TRAINRUN_OK);
    static double loss[3];
    train(t, 0, 3, loss);
    trainrun_trainer_request_stop(t);
    int due = 0;
    cr_expect_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_E_STOPPED);
    cr_expect_eq(due, 1);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "stop requested at step 3"), "%s", trainrun_trainer_errmsg(t));
    char path[1400];
    cr_assert_eq(trainrun_trainer_save(t, NULL, path, sizeof path), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect(strstr(path, "run/checkpoints/step-0000000003"), "%s", path);
    cr_expect_eq(e.checkpoints, 1);
    cr_expect_str_eq(e.reason, "signal");
    cr_expect_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_E_STOPPED); /* still stopping ... */
    cr_expect_eq(due, 0);                                                       /* ... but saved: not due again */
    trainrun_trainer_close(t);
    cr_expect_eq(trainrun_trainer_open_dir(NULL, "x", NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_aside_resumed(NULL, NULL, 0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_open_log(NULL, 0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_init_process_group(NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_rank(NULL, NULL, NULL), TRAINRUN_E_INVALID);
}

/* Alone (WORLD_SIZE unset), init_process_group joins nothing: rank 0 of 1, and it must come first. */
Test(trainer_dir, a_process_group_of_one_and_the_order_of_the_calls)
{
    unsetenv("WORLD_SIZE");
    events e = {0};
    trainrun_trainer *t = open_trainer(&e);
    int rank = -1, world = -1;
    cr_assert_eq(trainrun_trainer_rank(t, &rank, &world), TRAINRUN_OK);
    cr_expect(rank == 0 && world == 1, "%d of %d", rank, world);
    cr_assert_eq(trainrun_trainer_init_process_group(t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect_eq(trainrun_trainer_init_process_group(t), TRAINRUN_E_INVALID); /* once */
    cr_assert_eq(trainrun_trainer_rank(t, &rank, &world), TRAINRUN_OK);
    cr_expect(rank == 0 && world == 1, "%d of %d", rank, world);
    cr_expect_eq(trainrun_trainer_open_log(t, -1), TRAINRUN_E_INVALID);
    cr_assert_eq(trainrun_trainer_open_dir(t, support_path("run"), NULL), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_open_log(t, -1), TRAINRUN_E_INVALID);
    trainrun_trainer_close(t);
    trainrun_trainer *u = open_trainer(&e);
    cr_assert_eq(trainrun_trainer_open_dir(u, support_path("run2"), NULL), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_init_process_group(u), TRAINRUN_E_INVALID); /* after open_dir: too late */
    cr_expect(strstr(trainrun_trainer_errmsg(u), "before open_dir"), "%s", trainrun_trainer_errmsg(u));
    trainrun_trainer_close(u);
}

/* The columns `want` of every row of RUN_DIR/metrics.csv (a row per train window and per evaluation, "" in the
 * other's columns), as "a:b:c\n" lines into out. */
static void csv_rows(const char *run_dir, const char *const *want, int n_want, char *out, size_t n)
{
    char path[1200], line[4096];
    snprintf(path, sizeof path, "%s/metrics.csv", run_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    int col[8], k = 0;
    for (int i = 0; i < n_want; i++) col[i] = -1;
    cr_assert(fgets(line, sizeof line, f));
    line[strcspn(line, "\r\n")] = '\0';
    for (char *save = NULL, *c = strtok_r(line, ",", &save); c; c = strtok_r(NULL, ",", &save), k++)
        for (int i = 0; i < n_want; i++)
            if (strcmp(c, want[i]) == 0) col[i] = k;
    for (int i = 0; i < n_want; i++) cr_assert_geq(col[i], 0, "%s: no column %s", path, want[i]);
    size_t len = 0;
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *cell[64];
        int m = 0;
        for (char *p = line; m < 64;) { /* empty cells count: no strtok */
            cell[m++] = p;
            char *comma = strchr(p, ',');
            if (!comma) break;
            *comma = '\0';
            p = comma + 1;
        }
        for (int i = 0; i < n_want && len < n; i++)
            len += (size_t)snprintf(out + len, n - len, "%s%s", col[i] < m ? cell[col[i]] : "?",
                                    i + 1 < n_want ? ":" : "\n");
    }
    fclose(f);
}

/* A loop that logs: its run directory reads as a run's -- train windows, evaluations, saves -- and a loop stopped
 * and resumed logs (in metrics.csv, which applies the resume rule) what the uninterrupted loop logged. */
Test(trainer_dir, the_log_is_a_runs_and_a_resumed_loop_logs_what_the_whole_one_did)
{
    support_make_blobs(N, D, K, 3, X, Y);
    static float xv[64 * D];
    static int64_t yv[64];
    support_make_blobs(64, D, K, 4, xv, yv);
    const trainrun_batch vview = {xv, TRAINRUN_FLOAT32, 2, {64, D, 0, 0}, yv, TRAINRUN_INT64};
    trainrun_data *val = NULL;
    cr_assert_eq(trainrun_data_arrays(&vview, &val), TRAINRUN_OK);
    const char *dirs[2] = {support_path("whole"), support_path("parts")};
    static double loss[30];
    for (int d = 0; d < 2; d++) {
        for (int part = 0; part < (d ? 2 : 1); part++) {
            events e = {0};
            trainrun_trainer *t = open_trainer(&e);
            cr_expect_eq(trainrun_trainer_open_log(t, 30), TRAINRUN_E_INVALID); /* no directory yet */
            int resumed = 0;
            cr_assert_eq(trainrun_trainer_open_dir(t, dirs[d], &resumed), TRAINRUN_OK);
            cr_assert_eq(trainrun_trainer_open_log(t, 30), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
            cr_expect_eq(trainrun_trainer_open_log(t, 30), TRAINRUN_E_INVALID); /* once */
            int64_t s = 0;
            trainrun_trainer_steps(t, &s);
            cr_assert_eq(s, part ? 20 : 0);
            const int64_t end = d && !part ? 23 : 30; /* the first part stops at 23: its window 22-23 is partial */
            for (; s < end; s++) {
                train(t, s, s + 1, loss);
                if ((s + 1) % 10 == 0) {
                    trainrun_eval_result v;
                    cr_assert_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &v),
                                 TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
                }
            }
            trainrun_trainer_close(t);
        }
    }
    const char *cols[] = {"step", "train_loss", "train_accuracy", "lr", "val_loss", "val_accuracy"};
    static char whole[8192], parts[8192];
    csv_rows(dirs[0], cols, 6, whole, sizeof whole);
    csv_rows(dirs[1], cols, 6, parts, sizeof parts);
    int rows = 0;
    for (const char *c = whole; (c = strchr(c, '\n')); c++) rows++;
    /* the window 19-21 straddles the resume: the checkpoint of step 20 carried its first two steps */
    cr_expect_eq(rows, 13, "train windows at 3, 6, ..., 30 and evaluations at 10, 20, 30:\n%s", whole);
    cr_expect(strncmp(whole, "3:", 2) == 0 && strstr(whole, "\n21:") && strstr(whole, "\n30:"), "%s", whole);
    cr_expect_str_eq(parts, whole);
    /* the raw file keeps what the stopped part logged: its partial window, then the resume record */
    cr_expect_eq(support_count_records(dirs[1], "\"partial\":true"), 1);
    cr_expect_eq(support_count_records(dirs[1], "\"type\":\"resume\",\"step\":20"), 1);
    cr_expect_eq(support_count_records(dirs[0], "\"type\":\"checkpoint\""), 3);
    trainrun_data_close(val);
}

/* ------------------------------------------------------------------------------------------------ the clock */

static double fake_seconds; /* the injected clock: the loop moves it 3 s per step */

static double fake_now(void *ctx)
{
    (void)ctx;
    return fake_seconds;
}

typedef struct lines {
    int progress, messages;
    int64_t progress_step[8];
} lines;

static void on_line(void *ctx, int kind, const char *line)
{
    lines *l = ctx;
    long long step = 0, total = 0;
    const char *s = strstr(line, "  step ");
    if (kind == TRAINRUN_LOG_PROGRESS && s && sscanf(s, "  step %lld/%lld", &step, &total) == 2 && l->progress < 8)
        l->progress_step[l->progress++] = step;
    if (kind == TRAINRUN_LOG_MESSAGE) l->messages++;
}

/* checkpoint step-N's elapsed_seconds (trainer.json; a hex float) */
static double saved_elapsed(const char *dir, int step)
{
    char file[1000], text[1 << 16];
    snprintf(file, sizeof file, "%s/checkpoints/step-%010d/trainer.json", dir, step);
    support_read_file(file, text, sizeof text);
    const char *v = strstr(text, "\"elapsed_seconds\"");
    cr_assert_not_null(v, "%s: no elapsed_seconds", file);
    v = strchr(v + strlen("\"elapsed_seconds\""), '"');
    cr_assert_not_null(v);
    return strtod(v + 1, NULL);
}

/* The fake clock moves 3 s with each step. */
static void three_seconds_later(trainrun_trainer *t, int64_t s)
{
    (void)t, (void)s;
    fake_seconds += 3.0;
}

/* A trainer of trainer_yaml() with the 3 overrides `ov`, on the fake clock, which reads `origin` now. */
static trainrun_trainer *open_on_fake_clock(events *e, const char *const *ov, double origin)
{
    trainrun_trainer *t = open_trainer_with(e, ov, 3);
    fake_seconds = origin;
    cr_assert_eq(trainrun_trainer_set_clock(t, fake_now, NULL), TRAINRUN_OK);
    return t;
}

/* trainrun_trainer_set_clock: checkpoint.every_seconds 10 on a clock moving 3 s a step saves after steps 4, 8 and
 * 12 (12, 24, 36 training seconds), each carrying its seconds exactly; the log's 10 s progress cadence runs on the
 * same clock (lines at steps 6 and 12, through set_log, where the real clock of a sub-second loop gives only the
 * last); a resume on a clock of another origin goes on from the 36 s carried (the next save after step 16, 48 s). */
Test(trainer_dir, an_injected_clock_times_interval_saves_and_the_log)
{
    support_make_blobs(N, D, K, 3, X, Y);
    const char *dir = support_path("clock");
    const char *const ov[] = {"checkpoint.every_steps=0", "checkpoint.every_seconds=10", "log.progress=auto"};
    events e = {0};
    lines l = {0};
    trainrun_trainer *t = open_on_fake_clock(&e, ov, 0.0);
    cr_assert_eq(trainrun_trainer_set_log(t, on_line, &l), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_open_dir(t, dir, NULL), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_log(t, 12), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect_eq(trainrun_trainer_set_clock(t, NULL, NULL), TRAINRUN_E_INVALID, "set_clock after open_log");
    cr_expect_eq(trainrun_trainer_set_log(t, NULL, NULL), TRAINRUN_E_INVALID, "set_log after open_log");
    train_with(t, 0, 12, NULL, three_seconds_later);
    trainrun_trainer_close(t);

    cr_expect_eq(e.checkpoints, 3);
    cr_expect_str_eq(e.reason, "interval");
    char path[1000];
    for (int s = 1; s <= 12; s++) {
        snprintf(path, sizeof path, "%s/checkpoints/step-%010d", dir, s);
        cr_expect_eq(exists(path), s % 4 == 0, "step %d saved: %d", s, exists(path));
    }
    cr_expect_eq(saved_elapsed(dir, 4), 12.0, "%.17g", saved_elapsed(dir, 4)); /* exactly: 4 steps of 3 s */
    cr_expect_eq(saved_elapsed(dir, 12), 36.0);
    cr_expect_eq(l.progress, 2, "progress lines: %d", l.progress);
    cr_expect_eq(l.progress_step[0], 6);
    cr_expect_eq(l.progress_step[1], 12);
    cr_expect_gt(l.messages, 0, "the log's other lines came through set_log too");

    /* resumed on a clock whose origin is elsewhere: the training seconds go on from the checkpoint's */
    events e2 = {0};
    trainrun_trainer *u = open_on_fake_clock(&e2, ov, 1000.0);
    int resumed = 0;
    cr_assert_eq(trainrun_trainer_open_dir(u, dir, &resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    cr_assert_eq(resumed, 1);
    train_with(u, 12, 17, NULL, three_seconds_later);
    trainrun_trainer_close(u);
    cr_expect_eq(e2.checkpoints, 1);
    snprintf(path, sizeof path, "%s/checkpoints/step-%010d", dir, 16);
    cr_expect(exists(path), "step 16 saved");
    cr_expect_eq(saved_elapsed(dir, 16), 48.0);
}

/* After step s + 1 of epochs of 7 batches: (epoch, batches of it done). */
static void seven_batch_epochs(trainrun_trainer *t, int64_t s)
{
    cr_assert_eq(trainrun_trainer_set_data_position(t, (s + 1) / 7, (s + 1) % 7), TRAINRUN_OK);
}

/* trainrun_trainer_set_data_position: a loop over epochs of 7 batches keeps (epoch, batch) in the trainer; the
 * step-10 checkpoint carries (1, 3), a resume restores it, and the log's train records say the epoch; a negative
 * position is refused and changes nothing. */
Test(trainer_dir, the_data_position_is_carried_by_checkpoints)
{
    support_make_blobs(N, D, K, 3, X, Y);
    const char *dir = support_path("position");
    events e = {0};
    trainrun_trainer *t = open_in_dir(&e, dir, NULL);
    cr_assert_eq(trainrun_trainer_open_log(t, 12), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    int64_t epoch = -1, pos = -1;
    cr_assert_eq(trainrun_trainer_data_position(t, &epoch, &pos), TRAINRUN_OK);
    cr_expect(epoch == 0 && pos == 0, "a fresh trainer: (%lld, %lld)", (long long)epoch, (long long)pos);
    train_with(t, 0, 12, NULL, seven_batch_epochs);
    cr_expect_eq(trainrun_trainer_set_data_position(t, 0, -1), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "position -1"), "%s", trainrun_trainer_errmsg(t));
    cr_expect_eq(trainrun_trainer_data_position(t, &epoch, NULL), TRAINRUN_E_INVALID);
    cr_assert_eq(trainrun_trainer_data_position(t, &epoch, &pos), TRAINRUN_OK);
    cr_expect(epoch == 1 && pos == 5, "after step 12: (%lld, %lld)", (long long)epoch, (long long)pos);
    trainrun_trainer_close(t);

    char text[1 << 16], file[1000];
    snprintf(file, sizeof file, "%s/metrics.jsonl", dir);
    support_read_file(file, text, sizeof text);
    cr_expect_not_null(strstr(text, "{\"type\":\"train\",\"step\":3,\"epoch\":0,"), "%s", text);
    cr_expect_not_null(strstr(text, "{\"type\":\"train\",\"step\":9,\"epoch\":1,"), "%s", text);

    events e2 = {0};
    int resumed = 0;
    trainrun_trainer *u = open_in_dir(&e2, dir, &resumed);
    cr_assert_eq(resumed, 1);
    cr_assert_eq(trainrun_trainer_data_position(u, &epoch, &pos), TRAINRUN_OK);
    cr_expect(epoch == 1 && pos == 3, "resumed at step 10: (%lld, %lld)", (long long)epoch, (long long)pos);
    trainrun_trainer_close(u);
}

/* The eval-mode loss of batch 0 (no dropout): the weights' fingerprint. */
static double eval_loss(trainrun_trainer *t)
{
    const trainrun_batch b = batch_of(0);
    trainrun_step_result r;
    cr_assert_eq(trainrun_trainer_eval_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    return r.loss;
}

/* A trainer of trainer_yaml() with init.from=`from` (into `ov`, which must outlive the call). */
static trainrun_trainer *open_init_from(events *e, const char *from, char *ov, size_t n)
{
    snprintf(ov, n, "init.from=%s", from);
    const char *const overrides[] = {ov};
    return open_trainer_with(e, overrides, 1);
}

/* open_dir's fresh start takes init.from's weights as a run does (a run directory: its newest checkpoint, said in
 * a warning); a resume ignores init.from, even one whose path is gone; a missing one is refused and frees the
 * directory. */
Test(trainer_dir, init_from_on_a_fresh_start_and_not_on_a_resume)
{
    support_make_blobs(N, D, K, 3, X, Y);
    events ea = {0};
    trainrun_trainer *a = open_in_dir(&ea, support_path("src"), NULL);
    static double loss[20];
    train(a, 0, 20, loss);
    const double trained = eval_loss(a); /* the step-20 weights, saved at step 20 */
    trainrun_trainer_close(a);
    events ez = {0};
    trainrun_trainer *z = open_trainer(&ez);
    const double seeded = eval_loss(z); /* the seed's initialisation, which init.from replaces */
    trainrun_trainer_close(z);
    cr_assert_neq(seeded, trained);

    char ov[1400];
    events eb = {0};
    trainrun_trainer *b = open_init_from(&eb, support_path("src"), ov, sizeof ov);
    cr_expect_eq(eval_loss(b), seeded); /* open alone loads nothing: open_dir decides fresh or resumed */
    int resumed = -1;
    cr_assert_eq(trainrun_trainer_open_dir(b, support_path("dst"), &resumed), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(b));
    cr_expect_eq(resumed, 0);
    cr_expect_eq(eval_loss(b), trained, "%a vs %a", eval_loss(b), trained);
    cr_expect_eq(eb.warnings, 1);
    cr_expect(strstr(eb.warning[0], "init.from is a run directory: its newest checkpoint") &&
              strstr(eb.warning[0], "src/checkpoints/step-0000000020"), "%s", eb.warning[0]);
    int64_t steps = -1;
    trainrun_trainer_steps(b, &steps);
    cr_expect_eq(steps, 0); /* weights only: the loop starts at step 0 */
    train(b, 0, 10, loss);
    const double at10 = eval_loss(b);
    trainrun_trainer_close(b);

    /* the resume takes dst's step 10, not init.from's weights; src is gone and nothing asks for it */
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -r '%s'", support_path("src"));
    cr_assert_eq(system(cmd), 0);
    events ec = {0};
    trainrun_trainer *c = open_init_from(&ec, support_path("src"), ov, sizeof ov);
    cr_assert_eq(trainrun_trainer_open_dir(c, support_path("dst"), &resumed), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(c));
    cr_expect_eq(resumed, 1);
    cr_expect_eq(eval_loss(c), at10);
    cr_expect_eq(ec.warnings, 0, "%s", ec.warning[0]);
    trainrun_trainer_close(c);

    /* a fresh start whose init.from is missing is refused, and the directory is free for the next trainer */
    events ed = {0};
    trainrun_trainer *d = open_init_from(&ed, support_path("src"), ov, sizeof ov);
    cr_expect_eq(trainrun_trainer_open_dir(d, support_path("dst2"), NULL), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(d), "init.from: ") && strstr(trainrun_trainer_errmsg(d), "src"), "%s",
              trainrun_trainer_errmsg(d));
    trainrun_trainer_close(d);
    trainrun_trainer *f = open_in_dir(&ed, support_path("dst2"), NULL);
    trainrun_trainer_close(f);
}

/* RUN_DIR/memory_report.json's reason, step and the largest growing key's bytes per step (asserts it parses). */
static void memory_report(const char *dir, char *reason, size_t n, double *step, double *bytes_per_step)
{
    char file[1100], text[1 << 16];
    snprintf(file, sizeof file, "%s/memory_report.json", dir);
    support_read_file(file, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "%s: %s", file, text);
    const cJSON *r = cJSON_GetObjectItem(o, "reason"), *s = cJSON_GetObjectItem(o, "step");
    const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "growth"), 0);
    cr_assert(cJSON_IsString(r) && cJSON_IsNumber(s), "%s", text);
    snprintf(reason, n, "%s", r->valuestring);
    *step = s->valuedouble;
    *bytes_per_step = g ? cJSON_GetObjectItem(g, "bytes_per_step")->valuedouble : 0.0;
    cJSON_Delete(o);
}

typedef struct watchdog_lines {
    int growth; /* "watchdog:   " lines: the growing keys the report lists */
} watchdog_lines;

static void on_watchdog_line(void *ctx, int kind, const char *line)
{
    watchdog_lines *l = ctx;
    if (kind == TRAINRUN_LOG_MESSAGE && strstr(line, "watchdog:   +") && strstr(line, " B/step: ")) l->growth++;
}

/* A trainer's watchdog writes a run's memory report into its directory: a leak of 64 KiB a step (the debug knob)
 * warns past 1.2 x the baseline and reaches 2 x, each writing memory_report.json with that reason and step and the
 * leak's rate, the growing keys also as log lines; the closing trainer writes it once more ("end"). */
Test(trainer_dir, the_watchdog_writes_a_runs_memory_report)
{
    support_make_blobs(N, D, K, 3, X, Y);
    const char *const ov[] = {"watchdog.warmup_steps=2", "watchdog.every_steps=1", "watchdog.limit_ratio=2",
                              "debug.leak_bytes_per_step=65536"};
    events e = {0};
    watchdog_lines l = {0};
    trainrun_trainer *t = open_trainer_with(&e, ov, 4);
    cr_assert_eq(trainrun_trainer_set_log(t, on_watchdog_line, &l), TRAINRUN_OK);
    const char *dir = support_path("leak");
    cr_assert_eq(trainrun_trainer_open_dir(t, dir, NULL), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_log(t, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    int64_t warned = 0, limited = 0;
    char reason[16];
    double step = 0, rate = 0;
    for (int64_t s = 0; s < 60 && !limited; s++) {
        const trainrun_batch b = batch_of(s);
        trainrun_step_result r;
        trainrun_watchdog_report w;
        int due = 0;
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        const int wrc = trainrun_trainer_watchdog(t, &w);
        cr_assert(wrc == TRAINRUN_OK || (wrc == TRAINRUN_E_WATCHDOG && w.kind == TRAINRUN_WATCHDOG_LIMIT), "%s",
                  trainrun_trainer_errmsg(t));
        if (w.kind == TRAINRUN_WATCHDOG_WARN || w.kind == TRAINRUN_WATCHDOG_LIMIT) {
            memory_report(dir, reason, sizeof reason, &step, &rate);
            cr_expect_str_eq(reason, w.kind == TRAINRUN_WATCHDOG_WARN ? "warn" : "limit");
            cr_expect_eq(step, (double)w.step);
            cr_expect(fabs(rate - 65536.0) < 0.05 * 65536.0, "step %lld: %.0f bytes/step", (long long)w.step, rate);
            *(w.kind == TRAINRUN_WATCHDOG_WARN ? &warned : &limited) = w.step;
        }
        cr_assert_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        if (due) cr_assert_eq(trainrun_trainer_save(t, NULL, NULL, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    }
    printf("leak of 64 KiB a step: warned at step %lld, limit at step %lld, %d growth lines\n", (long long)warned,
           (long long)limited, l.growth);
    cr_expect(warned > 10 && limited > warned, "warned at %lld, limit at %lld", (long long)warned, (long long)limited);
    cr_expect_geq(l.growth, 2, "the report's lines in the log: %d", l.growth);
    trainrun_trainer_close(t);
    memory_report(dir, reason, sizeof reason, &step, &rate);
    cr_expect_str_eq(reason, "end");
    cr_expect_eq(step, (double)limited);
    char status[64], steps[32];
    support_summary_member(dir, "status", status, sizeof status);
    support_summary_member(dir, "steps", steps, sizeof steps);
    cr_expect_str_eq(status, "\"watchdog\"", "summary.json of a loop the watchdog stopped: %s", status);
    cr_expect_eq(atoll(steps), limited);
}

/* summary.json's status of a closed loop: "interrupted" before open_log's total_steps or after a stop request,
 * "error" with the message after a failing call, "completed" at total_steps. */
Test(trainer_dir, the_summary_says_how_the_loop_ended)
{
    support_make_blobs(N, D, K, 3, X, Y);
    static const char *const want[] = {"\"interrupted\"", "\"interrupted\"", "\"error\"", "\"completed\""};
    for (int how = 0; how < 4; how++) {
        char dir[64], status[64], error[600];
        snprintf(dir, sizeof dir, "ended%d", how);
        events e = {0};
        trainrun_trainer *t = open_in_dir(&e, support_path(dir), NULL);
        cr_assert_eq(trainrun_trainer_open_log(t, 12), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        static double loss[12];
        train(t, 0, how == 3 ? 12 : 6, loss);
        if (how == 1) trainrun_trainer_request_stop(t);
        if (how == 2) cr_expect_eq(trainrun_trainer_set_lr(t, -1.0), TRAINRUN_E_INVALID); /* the last call fails */
        trainrun_trainer_close(t);
        support_summary_member(support_path(dir), "status", status, sizeof status);
        support_summary_member(support_path(dir), "error", error, sizeof error);
        cr_expect_str_eq(status, want[how], "case %d: %s", how, status);
        cr_expect_eq(how == 2, error[0] != '\0', "case %d: error %s", how, error);
    }
}
