/*
 * test_api.c -- the embedding API (trainrun.h): every function refuses NULL and invalid arguments with a status
 * and a message; runs on the caller's arrays and on a batch callback train (the loss falls) and report events; a
 * stopped run resumes bit for bit; the trainer survives a failing forward, and its checkpoint resumes bit for
 * bit; the trainer's schedule, EMA, watchdog and checkpoint policy calls follow the config's rules; two runs in two threads give the loss traces they give alone. Small synthetic data: a few seconds in all.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io.h" /* tr_io_fault_arm: a failing background write (test builds) */
#include "support.h"
#include "trainrun/trainrun.h"

TestSuite(api, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 300);

#define D 8          /* features  */
#define K 4          /* classes   */
#define N 512        /* samples   */

static float X[N * D], XV[128 * D];
static int64_t Y[N], YV[128];

/* A dropout layer makes every step draw from the generator: the thread test then checks the generator too. */
static const char *write_model(void)
{
    const char *path = support_path("model.yaml");
    char text[512];
    snprintf(text, sizeof text,
             "input: [%d]\nlayers:\n  - linear: {in: %d, out: 32}\n  - relu\n  - dropout: {p: 0.1}\n"
             "  - linear: {in: 32, out: %d}\n", D, D, K);
    support_write_file(path, text);
    return path;
}

/* A run config on caller data: name, steps, seed. */
static const char *run_yaml_seed(const char *name, int max_steps, int seed)
{
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "seed: %d\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.1, momentum: 0.9}\n"
             "train: {batch_size: 32, max_steps: %d}\neval: {every_steps: 10, every_epoch: false}\n"
             "log: {every_steps: 5, progress: never}\ncheckpoint: {every_seconds: 0, every_steps: 0}\n"
             "run: {dir: %s, name: %s}\n",
             seed, write_model(), max_steps, support_tmpdir, name);
    return buf;
}

static const char *run_yaml(const char *name, int max_steps) { return run_yaml_seed(name, max_steps, 7); }

static int blob_batches(void *ctx, int64_t step, int64_t batch_size, trainrun_batch *b);

static trainrun_batch view(const float *x, const int64_t *y, int64_t n)
{
    trainrun_batch b;
    memset(&b, 0, sizeof b);
    b.x = x;
    b.x_dtype = TRAINRUN_FLOAT32;
    b.ndim = 2;
    b.shape[0] = n;
    b.shape[1] = D;
    b.y = y;
    b.y_dtype = TRAINRUN_INT64;
    return b;
}

/* ------------------------------------------------------------------------------------------------ ABI */

Test(api, every_function_refuses_null_and_invalid_arguments)
{
    trainrun_run *run = (trainrun_run *)1;
    trainrun_trainer *tr = (trainrun_trainer *)1;
    trainrun_data *data = (trainrun_data *)1;
    trainrun_batch b = view(X, Y, 4);
    trainrun_step_result res;
    trainrun_event ev;
    trainrun_summary sum;
    trainrun_memory mem;
    int64_t steps;
    const int64_t shape[3] = {1, 2, 2};

    /* NULL handles and NULL out-pointers */
    cr_expect_neq(trainrun_data_arrays(NULL, &data), TRAINRUN_OK);
    cr_expect_eq(trainrun_data_close(data), TRAINRUN_OK, "arrays(NULL) still opens a handle to read the message");
    cr_expect_eq(trainrun_data_arrays(&b, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_data_callback(NULL, NULL, shape, 3, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_data_close(NULL), TRAINRUN_OK);
    cr_expect_str_eq(trainrun_data_errmsg(NULL), "NULL handle");
    cr_expect_eq(trainrun_run_open(NULL, NULL, 0, &run), TRAINRUN_E_INVALID);
    cr_expect_null(run);
    cr_expect_eq(trainrun_run_open("x.yaml", NULL, 0, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_open_yaml(NULL, NULL, 0, &run), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_open_yaml("seed: 1\n", NULL, 0, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_set_data(NULL, TRAINRUN_TRAIN, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_set_callback(NULL, NULL, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_callback(NULL, NULL, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_set_clock(NULL, NULL, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_clock(NULL, NULL, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_log(NULL, NULL, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_data_position(NULL, 0, 0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_data_position(NULL, &steps, &steps), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_step(NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_next_event(NULL, &ev), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_wait(NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_stop(NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_summary(NULL, &sum), TRAINRUN_E_INVALID);
    cr_expect_str_eq(trainrun_run_errmsg(NULL), "NULL handle");
    cr_expect_eq(trainrun_run_close(NULL), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_open(NULL, NULL, 0, &tr), TRAINRUN_E_INVALID);
    cr_expect_null(tr);
    cr_expect_eq(trainrun_trainer_open("x.yaml", NULL, 0, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_open_yaml(NULL, NULL, 0, &tr), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_train_step(NULL, &b, &res), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_eval_step(NULL, &b, &res), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_lr(NULL, 0.1), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_steps(NULL, &steps), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_save(NULL, "d", NULL, 0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_load(NULL, "d"), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_memory(NULL, &mem), TRAINRUN_E_INVALID);
    double lr;
    int due;
    trainrun_watchdog_report wr;
    cr_expect_eq(trainrun_trainer_scheduled_lr(NULL, 10, 0, &lr), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_update_ema(NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_eval_step_ema(NULL, &b, &res), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_watchdog(NULL, &wr), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_checkpoint_due(NULL, &due), TRAINRUN_E_INVALID);
    trainrun_selection sel;
    cr_expect_eq(trainrun_trainer_monitor(NULL, "val_loss", 1.0, &sel), TRAINRUN_E_INVALID);
    trainrun_eval_result er;
    int64_t classes = 0;
    cr_expect_eq(trainrun_trainer_evaluate(NULL, NULL, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &er), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_confusion(NULL, NULL, 0, &classes), TRAINRUN_E_INVALID);
    cr_expect_str_eq(trainrun_trainer_errmsg(NULL), "NULL handle");
    cr_expect_eq(trainrun_trainer_close(NULL), TRAINRUN_OK);
    cr_expect_str_eq(trainrun_errstr(TRAINRUN_E_INVALID), "invalid argument");
    cr_expect_str_eq(trainrun_errstr(12345), "unknown status");
    cr_expect_str_eq(trainrun_version(), TRAINRUN_VERSION);

    /* Bad views: each refused with a message naming what is wrong */
    struct { trainrun_batch b; const char *says; } bad[6];
    for (int i = 0; i < 6; i++) bad[i].b = view(X, Y, 4);
    bad[0].b.x_dtype = 0;                  bad[0].says = "x_dtype 0";
    bad[1].b.y_dtype = 7;                  bad[1].says = "y_dtype 7";
    bad[2].b.ndim = 5;                     bad[2].says = "ndim 5";
    bad[3].b.shape[0] = 0;                 bad[3].says = "shape[0] = 0";
    bad[4].b.x = NULL;                     bad[4].says = "x is NULL";
    bad[5].b.shape[1] = -2;                bad[5].says = "shape[1] = -2";
    for (int i = 0; i < 6; i++) {
        trainrun_data *d = NULL;
        cr_expect_eq(trainrun_data_arrays(&bad[i].b, &d), TRAINRUN_E_INVALID, "case %d", i);
        cr_expect(strstr(trainrun_data_errmsg(d), bad[i].says), "case %d: '%s'", i, trainrun_data_errmsg(d));
        trainrun_data_close(d);
    }
    const int64_t bad_shape[3] = {1, 0, 2};
    trainrun_data *d = NULL;
    cr_expect_eq(trainrun_data_callback(blob_batches, NULL, bad_shape, 3, &d), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_data_errmsg(d), "sample_shape[1]"), "%s", trainrun_data_errmsg(d));
    trainrun_data_close(d);
    cr_expect_eq(trainrun_data_callback(blob_batches, NULL, shape, 2, &d), TRAINRUN_E_INVALID);
    trainrun_data_close(d);

    /* A config error opens a handle that says where */
    cr_expect_eq(trainrun_run_open_yaml("seed: 1\ntrain: {batch_sise: 3}\n", NULL, 0, &run), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_run_errmsg(run), "batch_sise"), "%s", trainrun_run_errmsg(run));
    cr_expect_eq(trainrun_run_step(run), TRAINRUN_E_CONFIG, "a run that failed to open does not step");
    cr_expect_eq(trainrun_run_summary(run, &sum), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_close(run), TRAINRUN_OK);
    const char *const ovr[] = {"optim.lr=-1"};
    cr_expect_eq(trainrun_trainer_open_yaml("seed: 1\n", ovr, 1, &tr), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(tr), "optim.lr"), "%s", trainrun_trainer_errmsg(tr));
    cr_expect_eq(trainrun_trainer_train_step(tr, &b, &res), TRAINRUN_E_INVALID, "a trainer that failed to open");
    cr_expect_eq(trainrun_trainer_save(tr, support_tmpdir, NULL, 0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_close(tr), TRAINRUN_OK);
    cr_expect_eq(trainrun_run_open_yaml("seed: 1\n", NULL, -1, &run), TRAINRUN_E_INVALID);
    trainrun_run_close(run);

    /* Calls on good handles with bad arguments */
    cr_assert_eq(trainrun_run_open_yaml(run_yaml("abi", 3), NULL, 0, &run), TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
    cr_assert_eq(trainrun_data_arrays(&b, &data), TRAINRUN_OK);
    cr_expect_eq(trainrun_run_set_data(run, 0, data), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_next_event(run, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_summary(run, &sum), TRAINRUN_E_INVALID, "not ended");
    cr_expect(strstr(trainrun_run_errmsg(run), "has not ended"), "%s", trainrun_run_errmsg(run));
    cr_expect_eq(trainrun_run_summary(run, NULL), TRAINRUN_E_INVALID);
    /* data an open run uses cannot be closed under it (sqlite3_close's SQLITE_BUSY); after the run it can */
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, data), TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_VAL, data), TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
    cr_expect_eq(trainrun_data_close(data), TRAINRUN_E_BUSY);
    cr_expect(strstr(trainrun_data_errmsg(data), "still in use by an open run (2 splits)"), "%s", trainrun_data_errmsg(data));
    cr_expect_str_eq(trainrun_errstr(TRAINRUN_E_BUSY), "still in use");
    cr_expect_eq(trainrun_run_close(run), TRAINRUN_OK);
    cr_expect_eq(trainrun_data_close(data), TRAINRUN_OK);

    cr_assert_eq(trainrun_trainer_open_yaml(run_yaml("abi-trainer", 3), NULL, 0, &tr), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(tr));
    cr_expect_eq(trainrun_trainer_train_step(tr, NULL, &res), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_train_step(tr, &b, NULL), TRAINRUN_E_INVALID);
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(trainrun_trainer_train_step(tr, &bad[i].b, &res), TRAINRUN_E_INVALID, "case %d", i);
        cr_expect(strstr(trainrun_trainer_errmsg(tr), bad[i].says), "case %d: %s", i, trainrun_trainer_errmsg(tr));
        cr_expect_eq(trainrun_trainer_eval_step(tr, &bad[i].b, &res), TRAINRUN_E_INVALID, "case %d", i);
    }
    int64_t ybad[4] = {0, 1, K + 5, 2};
    trainrun_batch lab = view(X, ybad, 4);
    cr_expect_neq(trainrun_trainer_train_step(tr, &lab, &res), TRAINRUN_OK, "label %d of %d classes", K + 5, K);
    cr_expect_eq(trainrun_trainer_set_lr(tr, -1.0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_set_lr(tr, NAN), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_steps(tr, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_steps(tr, &steps), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_monitor(tr, NULL, 1.0, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_monitor(tr, "val_los", 1.0, NULL), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(tr), "val_los"), "%s", trainrun_trainer_errmsg(tr));
    trainrun_selection none;
    cr_expect_eq(trainrun_trainer_monitor(tr, "val_loss", 1.0, &none), TRAINRUN_OK, "no monitor names it: nothing");
    cr_expect(!none.best && !none.stop && !none.lr_reduced && none.evicted_step == -1);
    cr_expect_eq(steps, 0, "no failed call counted as a step");
    cr_expect_eq(trainrun_trainer_save(tr, NULL, NULL, 0), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_load(tr, NULL), TRAINRUN_E_INVALID);
    cr_expect_neq(trainrun_trainer_load(tr, support_path("no-such-dir")), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_memory(tr, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_close(tr), TRAINRUN_OK);
}

/* ------------------------------------------------------------------------------------------------ runs */

typedef struct trace {
    double loss[512], lr[512];
    int64_t step[512];
    int n, evals, test_evals, checkpoints, stop_at;
    char last_reason[32];
    trainrun_run *run;
} trace;

static void record(void *ctx, const trainrun_event *ev)
{
    trace *t = ctx;
    switch (ev->kind) {
    case TRAINRUN_EVENT_STEP:
        if (t->n < 512) {
            t->step[t->n] = ev->step;
            t->lr[t->n] = ev->lr;
            t->loss[t->n++] = ev->loss;
        }
        if (t->stop_at && ev->step == t->stop_at) trainrun_run_stop(t->run);
        break;
    case TRAINRUN_EVENT_EVAL:
        if (ev->split && strcmp(ev->split, "test") == 0) t->test_evals++;
        else t->evals++;
        break;
    case TRAINRUN_EVENT_CHECKPOINT:
        t->checkpoints++;
        snprintf(t->last_reason, sizeof t->last_reason, "%s", ev->reason);
        break;
    default: break;
    }
}

/* Run `yaml` on the blobs (train + val + test) with events recorded into *t; returns the end status, or the first
 * failing call's status with its message in msg. No assertion: threads call it too. */
static int run_arrays(const char *yaml, trace *t, trainrun_summary *sum, char *msg, size_t msg_size)
{
    trainrun_run *run = NULL;
    trainrun_data *train = NULL, *val = NULL;
    trainrun_batch all = view(X, Y, N), v = view(XV, YV, 128);
    int rc = trainrun_run_open_yaml(yaml, NULL, 0, &run);
    if (!rc) rc = trainrun_data_arrays(&all, &train);
    if (!rc) rc = trainrun_data_arrays(&v, &val);
    if (!rc) rc = trainrun_run_set_data(run, TRAINRUN_TRAIN, train);
    if (!rc) rc = trainrun_run_set_data(run, TRAINRUN_VAL, val);
    if (!rc) rc = trainrun_run_set_data(run, TRAINRUN_TEST, val);
    t->run = run;
    if (!rc) rc = trainrun_run_set_callback(run, record, t);
    if (!rc) rc = trainrun_run_wait(run);
    if ((rc == TRAINRUN_OK || rc == TRAINRUN_E_STOPPED) && trainrun_run_summary(run, sum) != TRAINRUN_OK) rc = -1;
    if ((rc == TRAINRUN_OK || rc == TRAINRUN_E_STOPPED) && trainrun_run_step(run) != TRAINRUN_DONE) rc = -2;
    snprintf(msg, msg_size, "%s", trainrun_run_errmsg(run));
    trainrun_run_close(run);
    trainrun_data_close(train);
    trainrun_data_close(val);
    return rc;
}

static int run_on_arrays(const char *yaml, trace *t, trainrun_summary *sum)
{
    char msg[2048];
    const int rc = run_arrays(yaml, t, sum, msg, sizeof msg);
    cr_assert(rc == TRAINRUN_OK || rc == TRAINRUN_E_STOPPED, "%d: %s", rc, msg);
    return rc;
}

static double mean(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s / n;
}

Test(api, run_on_arrays_trains_and_reports_events)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 2, XV, YV);
    static trace t;
    trainrun_summary s;
    cr_assert_eq(run_on_arrays(run_yaml("arrays", 60), &t, &s), TRAINRUN_OK);
    cr_expect_eq(t.n, 60);
    for (int i = 0; i < t.n; i++) cr_expect_eq(t.step[i], i + 1);
    cr_expect_eq(t.lr[0], 0.1);
    const double first = mean(t.loss, 5), last = mean(t.loss + 55, 5);
    cr_expect_gt(first, 1.0, "4 classes start near ln 4 = 1.39: %g", first);
    cr_expect_lt(last, 0.5 * first, "loss fell only from %g to %g", first, last);
    cr_expect_eq(t.evals, 6, "validation every 10 steps");
    cr_expect_eq(t.test_evals, 1);
    cr_expect_eq(t.checkpoints, 1);
    cr_expect_str_eq(t.last_reason, "end");
    cr_expect_eq(s.status, TRAINRUN_OK);
    cr_expect_eq(s.steps, 60);
    cr_expect_eq(s.epochs, 4, "512 samples / 32 = 16 steps an epoch: 60 steps start 4 epochs");
    cr_expect(s.has_val && s.has_test);
    cr_expect_eq(s.test_samples, 128);
    cr_expect_gt(s.test_accuracy, 0.9, "blobs are easy: %g", s.test_accuracy);
    cr_expect_eq(s.params, D * 32 + 32 + 32 * K + K);

    /* Events can be read one step at a time instead. */
    trainrun_run *run = NULL;
    trainrun_data *train = NULL;
    trainrun_batch all = view(X, Y, N);
    cr_assert_eq(trainrun_run_open_yaml(run_yaml("iter", 12), NULL, 0, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_data_arrays(&all, &train), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, train), TRAINRUN_OK);
    int rc, steps = 0;
    while ((rc = trainrun_run_step(run)) == TRAINRUN_OK) {
        trainrun_event ev;
        int n = 0;
        while (trainrun_run_next_event(run, &ev) == TRAINRUN_OK) {
            n++;
            if (ev.kind == TRAINRUN_EVENT_STEP) {
                steps++;
                cr_expect_eq(ev.loss, t.loss[ev.step - 1], "step %lld: the same config gives the same loss",
                             (long long)ev.step);
            }
        }
        cr_expect_eq(n, 1, "one event per step (no validation data, no checkpoint before the end)");
    }
    cr_expect_eq(rc, TRAINRUN_DONE, "%s", trainrun_run_errmsg(run));
    cr_expect_eq(steps, 12);
    trainrun_event ev;
    cr_expect_eq(trainrun_run_next_event(run, &ev), TRAINRUN_OK, "the end checkpoint's event");
    cr_expect_eq(ev.kind, TRAINRUN_EVENT_CHECKPOINT);
    cr_expect_eq(trainrun_run_close(run), TRAINRUN_OK);
    trainrun_data_close(train);
}

Test(api, a_stopped_run_resumes_bit_for_bit)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 2, XV, YV);
    static trace whole, part1, part2;
    trainrun_summary s;
    cr_assert_eq(run_on_arrays(run_yaml("whole", 40), &whole, &s), TRAINRUN_OK);
    part1.stop_at = 17;
    cr_assert_eq(run_on_arrays(run_yaml("parts", 40), &part1, &s), TRAINRUN_E_STOPPED);
    cr_expect_eq(s.status, TRAINRUN_E_STOPPED);
    cr_expect_eq(s.steps, 17);
    cr_expect_str_eq(part1.last_reason, "signal");
    cr_assert_eq(run_on_arrays(run_yaml("parts", 40), &part2, &s), TRAINRUN_OK);
    cr_expect_eq(s.steps, 40);
    cr_assert_eq(part1.n + part2.n, 40);
    for (int i = 0; i < part2.n; i++)
        cr_expect_eq(part2.loss[i], whole.loss[17 + i], "step %d: %a vs %a", 18 + i, part2.loss[i],
                     whole.loss[17 + i]);
}

/* A number of summary.json (object `obj`, "" for the top level, then `key`), or NAN when absent. */
static double summary_number(const char *run_dir, const char *obj, const char *key)
{
    char path[4096], text[16384];
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    support_read_file(path, text, sizeof text);
    cJSON *root = cJSON_Parse(text);
    cr_assert(root, "%s does not parse", path);
    const cJSON *o = obj[0] ? cJSON_GetObjectItemCaseSensitive(root, obj) : root;
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    const double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    cJSON_Delete(root);
    return d;
}

/* Everything `trainrun CONFIG` prints comes from trainrun_summary (cli/train.c uses nothing else): the figures of
 * both weights on both splits, model selection, early stopping and the watchdog's baseline, as summary.json has
 * them. Early stopping needs a gain of 0.5 in accuracy after one evaluation, so the run stops at the second
 * (step 20 of 60); validation and test data are the same 128 samples. */
Test(api, summary_carries_every_figure_the_command_line_prints)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 2, XV, YV);
    static trace t;
    trainrun_summary s;
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "seed: 7\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.1, momentum: 0.9}\n"
             "train: {batch_size: 32, max_steps: 60}\nlog: {every_steps: 5, progress: never}\n"
             "run: {dir: %s, name: summary}\nema: {enabled: true, decay: 0.9}\n"
             "eval: {every_steps: 10, every_epoch: false, weights: both, top_k: 2, test_at_end: true}\n"
             "checkpoint: {every_seconds: 0, every_steps: 0, monitor: val_loss, save_top_k: 2}\n"
             "early_stopping: {monitor: val_accuracy, mode: max, patience: 1, min_delta: 0.5}\n"
             "watchdog: {warmup_steps: 5, every_steps: 1}\n",
             write_model(), support_tmpdir);
    cr_assert_eq(run_on_arrays(yaml, &t, &s), TRAINRUN_OK);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/summary", support_tmpdir);
    cr_expect_str_eq(s.run_dir, dir);
    cr_expect_eq(s.steps, 20);
    cr_expect_eq(s.epochs_completed, 20.0 / 16.0, "512 samples / 32 a batch: 16 steps an epoch");
    cr_expect(s.early_stopped);
    cr_expect(strstr(s.stop_reason, "val_accuracy"), "%s", s.stop_reason);
    cr_expect_eq(s.task, TRAINRUN_TASK_CLASSIFICATION);
    cr_expect_eq(s.top_k, 2);
    cr_expect_str_eq(s.eval_split, "val");
    cr_expect_eq(s.world_size, 1);
    cr_expect_eq(s.rank, 0);
    cr_expect_eq(s.warmup_steps, 5);
    cr_expect_gt(s.baseline_bytes, 0);
    cr_expect_eq(s.baseline_step, 10, "after 5 warm-up steps and the first evaluation and checkpoint (step 10)");
    cr_expect(s.has_val_live && s.has_val_ema && s.has_test_live && s.has_test_ema);
    const trainrun_eval_result *r[] = {&s.val_live, &s.val_ema, &s.test_live, &s.test_ema};
    const char *const obj[] = {"val_metrics", "val_ema_metrics", "test_metrics", "test_ema_metrics"};
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(r[i]->step, 20, "%s", obj[i]);
        cr_expect_eq(r[i]->samples, 128, "%s", obj[i]);
        cr_expect_eq(r[i]->loss, summary_number(dir, obj[i], "loss"), "%s", obj[i]);
        cr_expect_eq(r[i]->accuracy, summary_number(dir, obj[i], "accuracy"), "%s", obj[i]);
        cr_expect_eq(r[i]->top_k_accuracy, summary_number(dir, obj[i], "top_2_accuracy"), "%s", obj[i]);
        cr_expect_geq(r[i]->top_k_accuracy, r[i]->accuracy, "%s: top-2 includes top-1", obj[i]);
    }
    cr_expect_eq(s.val_live.loss, s.test_live.loss, "the same samples, the same weights");
    cr_expect_neq(s.val_live.loss, s.val_ema.loss, "EMA weights (decay 0.9) differ from the live ones");
    cr_expect_str_eq(s.best_monitor, "val_loss");
    cr_expect_eq((double)s.best_step, summary_number(dir, "best", "step"));
    cr_expect(s.best_step == 10 || s.best_step == 20, "%lld", (long long)s.best_step);
    cr_expect_eq(s.best_score, summary_number(dir, "best", "score"));
    cr_expect_leq(s.best_score, s.val_live.loss, "the best val_loss is at most the last one");
}

/* A callback that serves the blobs in order: batch = samples [32 step, 32 step + 32) mod N. */
static int blob_batches(void *ctx, int64_t step, int64_t batch_size, trainrun_batch *b)
{
    (void)ctx;
    const int64_t start = (step * batch_size) % N;
    *b = view(X + start * D, Y + start, start + batch_size <= N ? batch_size : N - start);
    return 0;
}

static int failing_batches(void *ctx, int64_t step, int64_t batch_size, trainrun_batch *b)
{
    (void)ctx;
    (void)batch_size;
    *b = view(X, Y, 8);
    b->x_dtype = step == 3 ? 99 : TRAINRUN_FLOAT32;
    return 0;
}

Test(api, run_on_a_batch_callback)
{
    support_make_blobs(N, D, K, 1, X, Y);
    const int64_t shape[1] = {D};
    static trace t;
    trainrun_data *cb = NULL;
    trainrun_run *run = NULL;
    cr_assert_eq(trainrun_data_callback(blob_batches, NULL, shape, 1, &cb), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_open_yaml(run_yaml("callback", 48), NULL, 0, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, cb), TRAINRUN_OK);
    cr_expect_eq(trainrun_run_set_data(run, TRAINRUN_VAL, cb), TRAINRUN_E_INVALID, "a callback is training data");
    trainrun_run_set_callback(run, record, &t);
    cr_assert_eq(trainrun_run_wait(run), TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
    cr_expect_eq(t.n, 48);
    cr_expect_lt(mean(t.loss + 43, 5), 0.5 * mean(t.loss, 5));
    cr_expect_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, cb), TRAINRUN_E_INVALID, "after the start");
    trainrun_run_close(run);
    trainrun_data_close(cb);

    /* A bad view from the callback ends the run with a message naming the step and the field. */
    cr_assert_eq(trainrun_data_callback(failing_batches, NULL, shape, 1, &cb), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_open_yaml(run_yaml("callback-fails", 10), NULL, 0, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, cb), TRAINRUN_OK);
    cr_expect_eq(trainrun_run_wait(run), TRAINRUN_E_RUNTIME);
    cr_expect(strstr(trainrun_run_errmsg(run), "step 4") && strstr(trainrun_run_errmsg(run), "x_dtype 99"), "%s",
              trainrun_run_errmsg(run));
    trainrun_run_close(run);
    trainrun_data_close(cb);

    /* A callback run needs train.max_steps */
    cr_assert_eq(trainrun_data_callback(blob_batches, NULL, shape, 1, &cb), TRAINRUN_OK);
    const char *const ovr[] = {"train.max_steps=0"};
    cr_assert_eq(trainrun_run_open_yaml(run_yaml("callback-epochs", 10), ovr, 1, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, cb), TRAINRUN_OK);
    cr_expect_eq(trainrun_run_step(run), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_run_errmsg(run), "train.max_steps"), "%s", trainrun_run_errmsg(run));
    trainrun_run_close(run);
    trainrun_data_close(cb);
}

/* ------------------------------------------------------------------------------------------------ trainer */

Test(api, trainer_survives_a_failing_forward_and_resumes_bit_for_bit)
{
    support_make_blobs(N, D, K, 1, X, Y);
    const char *yaml = run_yaml("unused", 1);
    trainrun_trainer *a = NULL, *b = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &a), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(a));
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &b), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(b));

    /* a forward that does not fit: [32, 5] into a model for [8] features */
    trainrun_step_result ra, rb;
    trainrun_batch wrong = view(X, Y, 32);
    wrong.shape[1] = 5;
    cr_expect_eq(trainrun_trainer_train_step(a, &wrong, &ra), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(a), "batch dim 1 is 5; the model takes 8"), "%s",
              trainrun_trainer_errmsg(a));
    cr_expect_eq(trainrun_trainer_eval_step(a, &wrong, &ra), TRAINRUN_E_INVALID);
    wrong.ndim = 4;
    wrong.shape[1] = 1;
    wrong.shape[2] = wrong.shape[3] = 2;
    cr_expect_eq(trainrun_trainer_train_step(a, &wrong, &ra), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(a), "the model takes 2"), "%s", trainrun_trainer_errmsg(a));

    /* ... changed nothing: a and b (which never failed) go on identically */
    static double la[40];
    for (int s = 0; s < 40; s++) {
        const trainrun_batch v = view(X + (s % 16) * 32 * D, Y + (s % 16) * 32, 32);
        cr_assert_eq(trainrun_trainer_train_step(a, &v, &ra), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(a));
        cr_assert_eq(trainrun_trainer_train_step(b, &v, &rb), TRAINRUN_OK);
        cr_expect_eq(ra.loss, rb.loss, "step %d", s + 1);
        cr_expect_eq(ra.samples, 32);
        la[s] = ra.loss;
        if (s == 19) {
            char path[1200];
            cr_assert_eq(trainrun_trainer_save(a, support_path("ckpts"), path, sizeof path), TRAINRUN_OK, "%s",
                         trainrun_trainer_errmsg(a));
            cr_expect(strstr(path, "step-0000000020"), "%s", path);
        }
    }
    cr_expect_lt(mean(la + 35, 5), 0.5 * mean(la, 5));
    trainrun_step_result ev;
    const trainrun_batch all = view(X, Y, N);
    cr_assert_eq(trainrun_trainer_eval_step(a, &all, &ev), TRAINRUN_OK);
    cr_expect_gt(ev.accuracy, 0.9);
    cr_expect_eq(ev.samples, N);
    trainrun_memory m;
    cr_assert_eq(trainrun_trainer_memory(a, &m), TRAINRUN_OK);
    cr_expect_gt(m.allocated_bytes, 0);
    cr_expect_geq(m.peak_bytes, m.allocated_bytes);
    trainrun_trainer_close(a);
    trainrun_trainer_close(b);

    /* A new trainer loads step 20 and repeats steps 21..40 bit for bit (dropout draws included). */
    trainrun_trainer *c = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &c), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_load(c, support_path("ckpts")), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(c));
    int64_t steps = 0;
    trainrun_trainer_steps(c, &steps);
    cr_expect_eq(steps, 20);
    for (int s = 20; s < 40; s++) {
        const trainrun_batch v = view(X + (s % 16) * 32 * D, Y + (s % 16) * 32, 32);
        cr_assert_eq(trainrun_trainer_train_step(c, &v, &ra), TRAINRUN_OK);
        cr_expect_eq(ra.loss, la[s], "step %d: %a vs %a", s + 1, ra.loss, la[s]);
    }
    cr_expect_eq(trainrun_trainer_set_lr(c, 0.0), TRAINRUN_OK);
    trainrun_trainer_close(c);
}

/* A trainer's events, copied as they come (their strings live until the next call). */
typedef struct trainer_events {
    trainrun_event ev[64];
    char reason[64][16], path[64][1200];
    int n;
} trainer_events;

static void record_trainer(void *ctx, const trainrun_event *ev)
{
    trainer_events *t = ctx;
    if (t->n == 64) return;
    t->ev[t->n] = *ev;
    snprintf(t->reason[t->n], sizeof t->reason[0], "%s", ev->reason ? ev->reason : "");
    snprintf(t->path[t->n], sizeof t->path[0], "%s", ev->path ? ev->path : "");
    t->n++;
}

/* The run's guarantees as trainer calls (trainrun.h, "trainers"): the config's schedule, the EMA by its rule and
 * evaluated with its weights, the watchdog's baseline and limit, the checkpoint policy's intervals, and a save that
 * carries the EMA. */
Test(api, trainer_keeps_the_runs_guarantees_through_public_calls)
{
    support_make_blobs(N, D, K, 1, X, Y);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 5\nmodel: {spec: %s}\noptim: {name: adamw, lr: 0.01}\n"
             "schedule: {name: cosine, warmup_steps: 4, min_lr: 0.001}\n"
             "ema: {enabled: true, decay: 0.5, start_step: 3, every_steps: 2}\n"
             "watchdog: {warmup_steps: 2, every_steps: 1, limit_bytes: 1, limit_fraction: 0, action: checkpoint_exit}\n"
             "checkpoint: {every_steps: 4, every_seconds: 0}\n", write_model());
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    static trainer_events evs; /* every call below that raises an event is checked against what it returned */
    memset(&evs, 0, sizeof evs);
    cr_assert_eq(trainrun_trainer_set_callback(t, record_trainer, &evs), TRAINRUN_OK);
    const trainrun_batch all = view(X, Y, N);
    trainrun_step_result live, ema;
    /* before ema.start_step the EMA is the initial weights: it evaluates as the untrained model does */
    cr_assert_eq(trainrun_trainer_eval_step(t, &all, &live), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_eval_step_ema(t, &all, &ema), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect_eq(ema.loss, live.loss, "%a vs %a", ema.loss, live.loss);
    double lr = 0, lr1 = 0;
    /* the schedule: warm-up lr * (step + 1) / 4 for the first steps, then cosine down to min_lr */
    cr_assert_eq(trainrun_trainer_scheduled_lr(t, 20, 0, &lr1), TRAINRUN_OK);
    cr_expect_eq(lr1, 0.01 * 1.0 / 4.0, "%.17g", lr1);
    cr_expect_eq(trainrun_trainer_scheduled_lr(t, 0, 0, &lr), TRAINRUN_E_INVALID);
    double after3 = 0;
    for (int s = 0; s < 8; s++) {
        const trainrun_batch v = view(X + (s % 16) * 32 * D, Y + (s % 16) * 32, 32);
        cr_assert_eq(trainrun_trainer_scheduled_lr(t, 20, 0, &lr), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_set_lr(t, lr), TRAINRUN_OK);
        trainrun_step_result r;
        const int before = evs.n;
        cr_assert_eq(trainrun_trainer_train_step(t, &v, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        const int step = s + 1;
        /* one STEP event, carrying what the call returned and the lr it was given */
        cr_assert_eq(evs.n, before + 1, "step %d: %d events", step, evs.n - before);
        const trainrun_event *se = &evs.ev[before];
        cr_expect_eq(se->kind, TRAINRUN_EVENT_STEP);
        cr_expect_eq(se->step, step);
        cr_expect_eq(se->loss, r.loss, "%a vs %a", se->loss, r.loss);
        cr_expect_eq(se->lr, lr, "%a vs %a", se->lr, lr);
        cr_expect_eq(se->grad_norm, r.grad_norm);
        cr_expect_eq(se->samples, 32);
        cr_expect_eq(se->correct, r.correct);
        cr_expect_eq(se->accuracy, (double)r.correct / 32.0);
        cr_assert_eq(trainrun_trainer_update_ema(t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_expect_eq(evs.n, before + 1, "update_ema and evaluation raise no event");
        cr_assert_eq(trainrun_trainer_eval_step(t, &all, &live), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_eval_step_ema(t, &all, &ema), TRAINRUN_OK);
        if (step == 3) { /* ema.start_step: a fresh copy of the weights */
            cr_expect_eq(ema.loss, live.loss, "step 3: %a vs %a", ema.loss, live.loss);
            after3 = ema.loss;
        }
        if (step == 4) /* not due (every_steps 2 after step 3): the EMA still holds step 3's weights */
            cr_expect_eq(ema.loss, after3, "step 4: %a vs %a", ema.loss, after3);
        if (step == 5) /* due: decay 0.5 between step 3's and step 5's weights, neither of them */
            cr_expect(ema.loss != after3 && ema.loss != live.loss, "step 5: %a %a %a", ema.loss, after3, live.loss);
        trainrun_watchdog_report w;
        const int before_wd = evs.n;
        const int wrc = trainrun_trainer_watchdog(t, &w);
        /* a WATCHDOG event exactly when the report has a kind, with the report's figures */
        cr_assert_eq(evs.n, before_wd + (w.kind != 0), "step %d: kind %d, %d events", step, w.kind, evs.n - before_wd);
        if (w.kind) {
            const trainrun_event *we = &evs.ev[before_wd];
            cr_expect_eq(we->kind, TRAINRUN_EVENT_WATCHDOG);
            cr_expect_eq(we->watchdog, w.kind);
            cr_expect_eq(we->step, step);
            cr_expect_eq(we->allocated_bytes, w.allocated_bytes);
            cr_expect_eq(we->baseline_bytes, w.baseline_bytes);
            cr_expect_eq(we->limit_bytes, w.limit_bytes);
            cr_expect_gt(we->reserved_bytes, 0);
            cr_expect_gt(we->rss_bytes, 0);
        }
        char wmsg[512]; /* the next call's message replaces it */
        snprintf(wmsg, sizeof wmsg, "%s", trainrun_trainer_errmsg(t));
        int due = -1;
        cr_assert_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_OK);
        cr_expect_eq(due, step % 4 == 0, "step %d: due %d", step, due);
        if (step < 4) { /* warm-up lasts until watchdog.warmup_steps and the first save (checkpoint.every_steps) */
            cr_expect_eq(wrc, TRAINRUN_OK);
            cr_expect_eq(w.kind, 0, "step %d", step);
            cr_expect_eq(w.step, step);
            cr_expect_gt(w.allocated_bytes, 0);
        } else if (step == 5) { /* the first sample after the save at step 4: the baseline */
            cr_expect_eq(wrc, TRAINRUN_OK);
            cr_expect_eq(w.kind, TRAINRUN_WATCHDOG_BASELINE);
            cr_expect_eq(w.baseline_bytes, w.allocated_bytes);
        } else if (step == 6) { /* limit_bytes 1: the next sample is at the limit, and checkpoint_exit says stop */
            cr_expect_eq(wrc, TRAINRUN_E_WATCHDOG, "%s", wmsg);
            cr_expect_eq(w.kind, TRAINRUN_WATCHDOG_LIMIT);
            cr_expect_eq(w.limit_bytes, 1);
            cr_expect(strstr(wmsg, "save and stop"), "%s", wmsg);
        }
        if (due) {
            char saved[1200];
            const int before_save = evs.n;
            cr_assert_eq(trainrun_trainer_save(t, support_path("g"), saved, sizeof saved), TRAINRUN_OK, "%s",
                         trainrun_trainer_errmsg(t));
            /* a CHECKPOINT event: the watchdog's stop outranks checkpoint.every_steps as the reason */
            cr_assert_eq(evs.n, before_save + 1);
            const trainrun_event *ce = &evs.ev[before_save];
            cr_expect_eq(ce->kind, TRAINRUN_EVENT_CHECKPOINT);
            cr_expect_eq(ce->step, step);
            cr_expect_str_eq(evs.reason[before_save], wrc == TRAINRUN_E_WATCHDOG ? "watchdog" : "steps");
            cr_expect_str_eq(evs.path[before_save], saved);
            char name[32];
            snprintf(name, sizeof name, "/step-%010d", step);
            cr_expect(strstr(saved, name), "%s", saved);
            cr_expect_gt(ce->bytes, 1000, "%lld", (long long)ce->bytes);
            cr_expect_geq(ce->seconds, 0.0);
            cr_assert_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_OK);
            cr_expect_eq(due, 0, "step %d: due again right after its save", step);
        }
    }
    size_t grew = 99;
    cr_assert_eq(trainrun_trainer_memory_growth(t, NULL, 0, &grew), TRAINRUN_OK);
    /* the checkpoint of step 8 carries the EMA: a new trainer loaded from it evaluates the EMA's weights alike */
    cr_assert_eq(trainrun_trainer_eval_step_ema(t, &all, &ema), TRAINRUN_OK);
    trainrun_trainer *u = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &u), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_load(u, support_path("g")), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    trainrun_step_result ema_u;
    cr_assert_eq(trainrun_trainer_eval_step_ema(u, &all, &ema_u), TRAINRUN_OK);
    cr_expect_eq(ema_u.loss, ema.loss, "%a vs %a", ema_u.loss, ema.loss);
    int due = -1;
    cr_assert_eq(trainrun_trainer_checkpoint_due(u, &due), TRAINRUN_OK);
    cr_expect_eq(due, 0, "the loaded step's checkpoint exists");
    /* a save nothing asked for is the caller's own: reason "manual"; without a callback nothing is reported */
    cr_assert_eq(trainrun_trainer_set_callback(u, record_trainer, &evs), TRAINRUN_OK);
    const int before_manual = evs.n;
    cr_assert_eq(trainrun_trainer_save(u, support_path("g2"), NULL, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    cr_assert_eq(evs.n, before_manual + 1);
    cr_expect_str_eq(evs.reason[before_manual], "manual");
    cr_expect_eq(evs.ev[before_manual].step, 8);
    /* a trainer's checkpoint carries no lr (the loop sets it each step): without set_lr the loaded trainer's next
     * step uses the schedule's first, optim.lr / warmup_steps, and its event says so */
    cr_assert_eq(trainrun_trainer_train_step(u, &all, &live), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    cr_assert_eq(evs.n, before_manual + 2);
    cr_expect_eq(evs.ev[before_manual + 1].lr, lr1, "%a vs %a", evs.ev[before_manual + 1].lr, lr1);
    cr_assert_eq(trainrun_trainer_set_callback(u, NULL, NULL), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_train_step(u, &all, &live), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    cr_expect_eq(evs.n, before_manual + 2, "no callback: no event");
    trainrun_trainer_close(t);
    trainrun_trainer_close(u);

    /* without ema.enabled there is no EMA to evaluate; a plateau schedule starts from optim.lr and an EMA monitor
     * needs the EMA */
    trainrun_trainer *p = NULL;
    const char *ov[] = {"ema.enabled=false", "schedule.name=plateau"};
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, ov, 2, &p), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(p));
    cr_expect_eq(trainrun_trainer_eval_step_ema(p, &all, &ema), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(p), "ema.enabled"), "%s", trainrun_trainer_errmsg(p));
    cr_expect_eq(trainrun_trainer_update_ema(p), TRAINRUN_OK, "no EMA: nothing to do");
    cr_expect_eq(trainrun_trainer_scheduled_lr(p, 20, 0, &lr), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(p));
    trainrun_trainer_close(p);
    const char *ov2[] = {"ema.enabled=false", "checkpoint.monitor=val_ema_loss"};
    p = NULL;
    cr_expect_eq(trainrun_trainer_open_yaml(yaml, ov2, 2, &p), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(p), "checkpoint.monitor: val_ema_loss needs the EMA"), "%s",
              trainrun_trainer_errmsg(p));
    trainrun_trainer_close(p);
}

/* ------------------------------------------------------------------------------------------------ threads */

typedef struct thread_job {
    const char *yaml;
    trace t;
    int rc;
} thread_job;

static void *run_thread(void *arg)
{
    thread_job *j = arg;
    trainrun_summary s;
    char msg[2048];
    j->rc = run_arrays(j->yaml, &j->t, &s, msg, sizeof msg);
    return NULL;
}

Test(api, two_runs_in_two_threads_give_their_traces_alone)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 2, XV, YV);
    static char ya[2048], yb[2048];
    snprintf(ya, sizeof ya, "%s", run_yaml("alone-a", 80));
    snprintf(yb, sizeof yb, "%s", run_yaml_seed("alone-b", 80, 8));
    static trace alone_a, alone_b;
    trainrun_summary s;
    run_on_arrays(ya, &alone_a, &s);
    run_on_arrays(yb, &alone_b, &s);
    cr_assert_neq(alone_a.loss[0], alone_b.loss[0], "two seeds, two traces");

    /* same configs, other run names, at the same time */
    static char ya2[2048], yb2[2048];
    snprintf(ya2, sizeof ya2, "%s", run_yaml("together-a", 80));
    snprintf(yb2, sizeof yb2, "%s", run_yaml_seed("together-b", 80, 8));
    static thread_job ja, jb;
    ja.yaml = ya2;
    jb.yaml = yb2;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_thread, &ja);
    pthread_create(&tb, NULL, run_thread, &jb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_assert_eq(ja.rc, TRAINRUN_OK);
    cr_assert_eq(jb.rc, TRAINRUN_OK);
    cr_assert_eq(ja.t.n, 80);
    cr_assert_eq(jb.t.n, 80);
    for (int i = 0; i < 80; i++) {
        cr_expect_eq(ja.t.loss[i], alone_a.loss[i], "run a, step %d: %a vs %a", i + 1, ja.t.loss[i], alone_a.loss[i]);
        cr_expect_eq(jb.t.loss[i], alone_b.loss[i], "run b, step %d: %a vs %a", i + 1, jb.t.loss[i], alone_b.loss[i]);
    }
}

/* Log lines (issue 18): routed to the program's function, not its stderr; NULL silences them; after the first
 * step the routing can no longer change. */
typedef struct log_lines {
    int messages, progress;
    char first[256], last_progress[256];
} log_lines;

static void collect_log(void *ctx, int kind, const char *line)
{
    log_lines *l = ctx;
    if (kind == TRAINRUN_LOG_PROGRESS) {
        l->progress++;
        snprintf(l->last_progress, sizeof l->last_progress, "%s", line);
    } else if (l->messages++ == 0) {
        snprintf(l->first, sizeof l->first, "%s", line);
    }
}

/* A run of run_yaml(name, steps) with the n overrides `ov` on the blobs (seed 1) as arrays, *train their source. */
static trainrun_run *open_blob_run(const char *name, int steps, const char **ov, int n, trainrun_data **train)
{
    support_make_blobs(N, D, K, 1, X, Y);
    trainrun_batch all = view(X, Y, N);
    cr_assert_eq(trainrun_data_arrays(&all, train), TRAINRUN_OK);
    trainrun_run *run = NULL;
    cr_assert_eq(trainrun_run_open_yaml(run_yaml(name, steps), ov, n, &run), TRAINRUN_OK, "%s",
                 trainrun_run_errmsg(run));
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, *train), TRAINRUN_OK);
    return run;
}

Test(api, log_lines_go_to_the_log_function)
{
    const char *always[] = {"log.progress=always"};
    trainrun_data *train = NULL;
    trainrun_run *run = open_blob_run("logfn", 10, always, 1, &train);
    log_lines l;
    memset(&l, 0, sizeof l);
    cr_assert_eq(trainrun_run_set_log(run, collect_log, &l), TRAINRUN_OK);
    /* stderr is redirected to a file for the run: nothing may reach it */
    fflush(stderr);
    const int saved = dup(2);
    const int fd = open(support_path("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    dup2(fd, 2);
    close(fd);
    const int rc = trainrun_run_wait(run);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_expect_eq(rc, TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
    cr_expect_eq(trainrun_run_set_log(run, NULL, NULL), TRAINRUN_E_INVALID, "after the run started");
    trainrun_run_close(run);
    trainrun_data_close(train);
    char text[4096];
    support_read_file(support_path("stderr.txt"), text, sizeof text);
    cr_expect_str_eq(text, "", "the run wrote to stderr: %s", text);
    cr_expect(strstr(l.first, "parameters") != NULL, "first message: '%s'", l.first);
    cr_expect_geq(l.messages, 3, "start-up, threads, the end checkpoint");
    cr_expect_geq(l.progress, 1);
    cr_expect(strstr(l.last_progress, "  step 10/10  epoch 0  loss ") != NULL, "'%s'", l.last_progress);
}

/* trainrun_run_set_clock: a run on a clock that the loop moves 3 s after each step. Step k's interval check reads
 * 3 (k - 1) training seconds, so checkpoint.every_seconds 10 saves after steps 5, 9 and 13 (12, 24, 36 s) and the
 * summary's train time is exactly the 42 s the clock moved; a call after the first step is refused. */
static double run_fake_seconds;

static double run_fake_now(void *ctx)
{
    (void)ctx;
    return run_fake_seconds;
}

Test(api, an_injected_clock_times_interval_checkpoints)
{
    const char *ov[] = {"checkpoint.every_seconds=10", "checkpoint.keep_last=10"};
    trainrun_data *train = NULL;
    trainrun_run *run = open_blob_run("clock", 14, ov, 2, &train);
    run_fake_seconds = 0.0;
    cr_assert_eq(trainrun_run_set_clock(run, run_fake_now, NULL), TRAINRUN_OK);
    int64_t saved[8];
    int n_saved = 0, rc;
    do { /* a step's events, then the end's (a background save's event comes with the call that took its outcome) */
        rc = trainrun_run_step(run);
        run_fake_seconds += 3.0;
        trainrun_event ev;
        while (trainrun_run_next_event(run, &ev) == TRAINRUN_OK)
            if (ev.kind == TRAINRUN_EVENT_CHECKPOINT && strcmp(ev.reason, "interval") == 0 && n_saved < 8)
                saved[n_saved++] = ev.step;
    } while (rc == TRAINRUN_OK);
    cr_assert_eq(rc, TRAINRUN_DONE, "%s", trainrun_run_errmsg(run));
    cr_expect_eq(trainrun_run_set_clock(run, NULL, NULL), TRAINRUN_E_INVALID, "after the run started");
    cr_assert_eq(n_saved, 3, "interval checkpoints: %d", n_saved);
    cr_expect_eq(saved[0], 5);
    cr_expect_eq(saved[1], 9);
    cr_expect_eq(saved[2], 13);
    trainrun_summary sum;
    cr_assert_eq(trainrun_run_summary(run, &sum), TRAINRUN_OK);
    cr_expect_eq(sum.train_seconds, 42.0, "%.17g", sum.train_seconds);
    trainrun_run_close(run);
    trainrun_data_close(train);
}

/* trainrun_run_evaluate: the scheduled evaluation pass at the caller's moment. Right after the scheduled evaluation
 * of step 20 it gives that evaluation's loss exactly; one at step 15 changes nothing about training: the loss trace
 * equals the same config's run without it, step for step. */
typedef struct eval_seen {
    double loss[64];
    int steps;
    double loss20;
    int val_evals;
} eval_seen;

static void on_event(void *ctx, const trainrun_event *ev)
{
    eval_seen *e = ctx;
    if (ev->kind == TRAINRUN_EVENT_STEP && ev->step >= 1 && ev->step <= 64) {
        e->loss[ev->step - 1] = ev->loss;
        e->steps++;
    }
    if (ev->kind != TRAINRUN_EVENT_EVAL || strcmp(ev->split, "val") != 0) return;
    e->val_evals++;
    if (ev->step == 20 && e->loss20 == 0) e->loss20 = ev->loss;
}

Test(api, run_evaluate_gives_the_scheduled_pass_and_leaves_training_alone)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 2, XV, YV);
    static trace ref;
    trainrun_summary s;
    cr_assert_eq(run_on_arrays(run_yaml("plain", 30), &ref, &s), TRAINRUN_OK);

    trainrun_run *run = NULL;
    trainrun_data *train = NULL, *val = NULL;
    trainrun_batch all = view(X, Y, N), v = view(XV, YV, 128);
    cr_assert_eq(trainrun_run_open_yaml(run_yaml("evaluated", 30), NULL, 0, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_data_arrays(&all, &train), TRAINRUN_OK);
    cr_assert_eq(trainrun_data_arrays(&v, &val), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TRAIN, train), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_VAL, val), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(run, TRAINRUN_TEST, val), TRAINRUN_OK);
    static eval_seen seen;
    cr_assert_eq(trainrun_run_set_callback(run, on_event, &seen), TRAINRUN_OK);
    trainrun_eval_result r;
    cr_expect_eq(trainrun_run_evaluate(run, TRAINRUN_TRAIN, &r), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_run_evaluate(run, TRAINRUN_VAL, NULL), TRAINRUN_E_INVALID);
    int rc, step = 0;
    while ((rc = trainrun_run_step(run)) == TRAINRUN_OK) {
        step++;
        if (step != 15 && step != 20) continue;
        memset(&r, 0, sizeof r);
        cr_assert_eq(trainrun_run_evaluate(run, TRAINRUN_VAL, &r), TRAINRUN_OK, "%s", trainrun_run_errmsg(run));
        cr_expect_eq(r.step, step);
        cr_expect_eq(r.samples, 128);
        cr_expect(r.loss > 0 && r.accuracy > 0 && r.accuracy <= 1, "loss %g accuracy %g", r.loss, r.accuracy);
        if (step == 20)
            cr_expect_eq(r.loss, seen.loss20, "the scheduled evaluation of step 20 gave %.17g, evaluate %.17g",
                         seen.loss20, r.loss);
    }
    cr_expect_eq(rc, TRAINRUN_DONE, "%s", trainrun_run_errmsg(run));
    cr_expect_eq(seen.steps, 30);
    for (int i = 0; i < 30; i++)
        cr_expect_eq(seen.loss[i], ref.loss[i], "step %d: %.17g, without evaluate %.17g", i + 1, seen.loss[i],
                     ref.loss[i]);
    cr_expect_eq(seen.val_evals, 3 + 2, "3 scheduled (every 10 steps) + 2 asked for");
    cr_expect_eq(trainrun_run_evaluate(run, TRAINRUN_VAL, &r), TRAINRUN_E_INVALID, "an ended run");
    trainrun_run_close(run);
    trainrun_data_close(train);
    trainrun_data_close(val);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/evaluated", support_tmpdir);
    double steps[16], loss[16];
    const int n = support_read_field(dir, "eval", "loss", loss, steps, 16);
    cr_expect_eq(n, 5 + 1, "every evaluation is in metrics.jsonl: 3 scheduled, 2 asked for, the test at the end");
    cr_expect_eq(steps[1], 15);
}

/* ------------------------------------------------------------------------------------------------ rebuilt */

/* The whole file at `path` (malloc'd; NULL when it does not open) and its size. */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            char *grown = realloc(buf, cap = cap ? 2 * cap : 65536);
            if (!grown) break;
            buf = grown;
        }
        const size_t got = fread(buf + *n, 1, cap - *n, f);
        if (got == 0) break;
        *n += got;
    }
    fclose(f);
    return buf;
}

/* A run of yaml to its end on the arrays X, Y (N samples) as training data and, with val non-NULL, XV, YV (128) as
 * validation data, its events to fn(ctx) (fn may be NULL). The run and the sources are the caller's to close. */
static trainrun_run *run_on_blobs(const char *yaml, trainrun_data **train, trainrun_data **val, trainrun_event_fn fn,
                                  void *ctx)
{
    trainrun_run *r = NULL;
    const trainrun_batch all = view(X, Y, N), v = view(XV, YV, 128);
    cr_assert_eq(trainrun_run_open_yaml(yaml, NULL, 0, &r), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    cr_assert_eq(trainrun_data_arrays(&all, train), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_set_data(r, TRAINRUN_TRAIN, *train), TRAINRUN_OK);
    if (val) {
        cr_assert_eq(trainrun_data_arrays(&v, val), TRAINRUN_OK);
        cr_assert_eq(trainrun_run_set_data(r, TRAINRUN_VAL, *val), TRAINRUN_OK);
    }
    if (fn) cr_assert_eq(trainrun_run_set_callback(r, fn, ctx), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_wait(r), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    return r;
}

/* What trainrun.h promises of the trainer: a loop over its public calls (the custom-loop order) is trainrun_run's
 * loop. Same config (schedule with warm-up, EMA, dropout drawing from the generator), the run's batches in the run's
 * order (data.shuffle false: consecutive slices), no evaluation: every step's loss and lr are equal bit for bit,
 * and so is the EMA's evaluation at the end. */
Test(api, a_loop_over_the_trainer_calls_is_the_runs_loop)
{
    support_make_blobs(N, D, K, 1, X, Y);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 11\nmodel: {spec: %s}\noptim: {name: adamw, lr: 0.01}\n"
             "schedule: {name: cosine, warmup_steps: 5, min_lr: 0.0005}\n"
             "ema: {enabled: true, decay: 0.9, start_step: 4, every_steps: 2}\n"
             "data: {shuffle: false}\ntrain: {batch_size: 32, max_steps: 40}\n"
             "log: {every_steps: 5, progress: never}\ncheckpoint: {every_seconds: 0, every_steps: 0}\n"
             "run: {dir: %s, name: rebuilt}\n", write_model(), support_tmpdir);
    static trace run;
    memset(&run, 0, sizeof run);
    trainrun_summary s;
    trainrun_data *train = NULL;
    trainrun_run *r = run_on_blobs(yaml, &train, NULL, record, &run);
    cr_assert_eq(trainrun_run_summary(r, &s), TRAINRUN_OK);
    cr_assert_eq(run.n, 40);

    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    for (int step = 0; step < 40; step++) {
        const int64_t start = ((int64_t)step * 32) % N;
        const trainrun_batch b = view(X + start * D, Y + start, 32);
        double lr = 0;
        trainrun_step_result res;
        cr_assert_eq(trainrun_trainer_scheduled_lr(t, 40, N / 32, &lr), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_assert_eq(trainrun_trainer_set_lr(t, lr), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &res), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_assert_eq(trainrun_trainer_update_ema(t), TRAINRUN_OK);
        cr_expect_eq(lr, run.lr[step], "step %d: lr %a, the run's %a", step + 1, lr, run.lr[step]);
        cr_expect_eq(res.loss, run.loss[step], "step %d: loss %a, the run's %a", step + 1, res.loss, run.loss[step]);
    }
    /* the weights and the EMA the loop ends with are the run's: its end checkpoint's tensor files, byte for byte */
    char saved[1200];
    cr_assert_eq(trainrun_trainer_save(t, support_path("rebuilt-trainer"), saved, sizeof saved), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    const char *files[] = {"model.safetensors", "ema.safetensors"};
    for (int i = 0; i < 2; i++) {
        char a[1400], b[1400];
        snprintf(a, sizeof a, "%s/rebuilt/checkpoints/step-0000000040/%s", support_tmpdir, files[i]);
        snprintf(b, sizeof b, "%s/%s", saved, files[i]);
        size_t na = 0, nb = 0;
        char *fa = slurp(a, &na), *fb = slurp(b, &nb);
        cr_assert(fa && fb, "%s, %s", a, b);
        cr_expect(na == nb && na > 1000 && memcmp(fa, fb, na) == 0, "%s: %zu bytes, the run's %zu, differ", files[i],
                  nb, na);
        free(fa);
        free(fb);
    }
    trainrun_trainer_close(t);
    trainrun_run_close(r);
    trainrun_data_close(train);
}

/* What a run's model selection saw and did: each step's loss and lr, each validation figure, each save. */
typedef struct selection_trace {
    int n, evals, saves;
    double loss[512], lr[512];
    int64_t eval_step[128], save_step[128];
    double eval_loss[128], eval_accuracy[128];
    char save_reason[128][16];
} selection_trace;

static void record_selection(void *ctx, const trainrun_event *ev)
{
    selection_trace *t = ctx;
    if (ev->kind == TRAINRUN_EVENT_STEP && t->n < 512) {
        t->loss[t->n] = ev->loss;
        t->lr[t->n++] = ev->lr;
    } else if (ev->kind == TRAINRUN_EVENT_EVAL && strcmp(ev->split, "val") == 0 && t->evals < 128) {
        t->eval_step[t->evals] = ev->step;
        t->eval_loss[t->evals] = ev->loss;
        t->eval_accuracy[t->evals++] = ev->accuracy;
    } else if (ev->kind == TRAINRUN_EVENT_CHECKPOINT && t->saves < 128) {
        t->save_step[t->saves] = ev->step;
        snprintf(t->save_reason[t->saves++], 16, "%s", ev->reason);
    }
}

/* The names of DIR/checkpoints' step directories, sorted, joined by spaces. */
static void list_checkpoints(const char *dir, char *out, size_t n)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "ls %s/checkpoints | grep '^step-' | sort | tr '\\n' ' '", dir);
    FILE *p = popen(cmd, "r");
    out[0] = '\0';
    if (p) {
        const size_t got = fread(out, 1, n - 1, p);
        out[got] = '\0';
        pclose(p);
    }
}

/* Model selection through the trainer's public calls is the run's: the same config -- checkpoint.monitor val_loss
 * with save_top_k 2 and keep_last 1, a plateau schedule on val_loss, early stopping on val_accuracy -- trained by
 * trainrun_run and by a loop that offers the run's validation figures to trainrun_trainer_monitor after the same
 * steps: every step's loss and lr (the plateau's reductions) equal bit for bit, the same best saves, the same stop
 * with the same reason, the same checkpoints kept and best.json byte for byte. A trainer loaded from the loop's
 * last checkpoint continues the training and the selection where they were. */
Test(api, model_selection_through_the_trainer_is_the_runs)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 2, XV, YV);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 5\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.2, momentum: 0.9}\n"
             "schedule: {name: plateau, monitor: val_accuracy, mode: max, patience: 0, factor: 0.5, warmup_steps: 3}\n"
             "early_stopping: {monitor: val_loss, patience: 3, min_delta: 0.002}\n"
             "eval: {every_steps: 4, every_epoch: false}\n"
             "data: {shuffle: false}\ntrain: {batch_size: 32, max_steps: 300}\n"
             "log: {every_steps: 5, progress: never}\n"
             "checkpoint: {every_seconds: 0, every_steps: 0, monitor: val_loss, save_top_k: 2, keep_last: 1}\n"
             "run: {dir: %s, name: selected}\n", write_model(), support_tmpdir);
    static selection_trace run, loop;
    memset(&run, 0, sizeof run);
    memset(&loop, 0, sizeof loop);
    trainrun_data *train = NULL, *val = NULL;
    trainrun_run *r = run_on_blobs(yaml, &train, &val, record_selection, &run);
    trainrun_summary s;
    cr_assert_eq(trainrun_run_summary(r, &s), TRAINRUN_OK);
    cr_assert(s.early_stopped && run.n < 300, "early stopping ended the run (%d steps)", run.n);

    char dir[1200];
    snprintf(dir, sizeof dir, "%s", support_path("selected-trainer"));
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_set_callback(t, record_selection, &loop), TRAINRUN_OK);
    int e = 0, reduced = 0, evicted = 0, stopped = 0;
    char reason[320] = "";
    int64_t step = 0, saved_at = -1;
    while (step < 300 && !stopped) {
        const int64_t start = (step * 32) % N;
        const trainrun_batch b = view(X + start * D, Y + start, 32);
        double lr = 0;
        trainrun_step_result res;
        cr_assert_eq(trainrun_trainer_scheduled_lr(t, 300, N / 32, &lr), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_assert_eq(trainrun_trainer_set_lr(t, lr), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &res), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        step++;
        cr_assert(step <= run.n, "the loop goes on past the run's %d steps", run.n);
        cr_expect_eq(lr, run.lr[step - 1], "step %lld: lr %a, the run's %a", (long long)step, lr, run.lr[step - 1]);
        cr_expect_eq(res.loss, run.loss[step - 1], "step %lld: loss %a, the run's %a", (long long)step, res.loss,
                     run.loss[step - 1]);
        for (; e < run.evals && run.eval_step[e] == step; e++) {
            /* the loop's own pass over the validation set is the run's, bit for bit, and its figures are offered */
            trainrun_eval_result ev;
            const int evals = loop.evals;
            cr_assert_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &ev), TRAINRUN_OK,
                         "%s", trainrun_trainer_errmsg(t));
            cr_expect(ev.loss == run.eval_loss[e] && ev.accuracy == run.eval_accuracy[e] && ev.samples == 128 &&
                      ev.step == step, "step %lld: %a %a (%lld samples at step %lld), the run's %a %a",
                      (long long)step, ev.loss, ev.accuracy, (long long)ev.samples, (long long)ev.step,
                      run.eval_loss[e], run.eval_accuracy[e]);
            cr_expect(loop.evals == evals + 1 && loop.eval_loss[evals] == ev.loss && loop.eval_step[evals] == step,
                      "the pass is reported as an EVAL event of split val");
            trainrun_selection a, c;
            cr_assert_eq(trainrun_trainer_monitor(t, "val_loss", ev.loss, &a), TRAINRUN_OK);
            cr_assert_eq(trainrun_trainer_monitor(t, "val_accuracy", ev.accuracy, &c), TRAINRUN_OK);
            evicted += a.evicted_step >= 0;
            reduced += c.lr_reduced;
            cr_expect(!c.best && !c.stop && !a.lr_reduced, "each figure reaches only the monitors that name it");
            cr_expect_eq(trainrun_trainer_monitor(t, "val_loss", run.eval_loss[e], NULL), TRAINRUN_E_INVALID,
                         "a second val_loss after the same step");
            if (a.stop) {
                stopped = 1;
                snprintf(reason, sizeof reason, "%s", a.reason);
            }
        }
        int due = 0;
        cr_assert_eq(trainrun_trainer_checkpoint_due(t, &due), TRAINRUN_OK);
        if (due) {
            cr_assert_eq(trainrun_trainer_save(t, dir, NULL, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
            saved_at = step;
        }
    }
    if (saved_at != step) cr_assert_eq(trainrun_trainer_save(t, dir, NULL, 0), TRAINRUN_OK); /* the run's "end" */
    cr_expect(stopped && step == run.n, "the loop stopped after step %lld, the run after %d", (long long)step, run.n);
    cr_expect_str_eq(reason, s.stop_reason);
    cr_expect(reduced > 0 && evicted > 0, "the plateau reduced the lr %d times, the top-k evicted %d", reduced,
              evicted);
    cr_expect_eq(loop.saves, run.saves);
    for (int i = 0; i < run.saves && i < loop.saves; i++) {
        cr_expect_eq(loop.save_step[i], run.save_step[i], "save %d", i);
        const int end = strcmp(run.save_reason[i], "end") == 0; /* the loop's own save at the end */
        cr_expect_str_eq(loop.save_reason[i], end ? "manual" : "best", "save %d: the run's %s", i, run.save_reason[i]);
    }
    char a[1400], b[1400], ka[512], kb[512];
    snprintf(a, sizeof a, "%s/selected/best.json", support_tmpdir);
    snprintf(b, sizeof b, "%s/best.json", dir);
    size_t na = 0, nb = 0;
    char *fa = slurp(a, &na), *fb = slurp(b, &nb);
    cr_assert(fa && fb, "%s, %s", a, b);
    cr_expect(na == nb && memcmp(fa, fb, na) == 0, "best.json differs:\n%.*s\nthe run's:\n%.*s", (int)nb, fb, (int)na,
              fa);
    free(fa);
    free(fb);
    snprintf(a, sizeof a, "%s/selected", support_tmpdir);
    list_checkpoints(a, ka, sizeof ka);
    list_checkpoints(dir, kb, sizeof kb);
    cr_expect_str_eq(kb, ka, "the checkpoints kept (the top 2 and the newest)");

    /* a trainer loaded from the loop's newest checkpoint keeps the set, the counters and the plateau's lr */
    trainrun_trainer *u = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &u), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_load(u, dir), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    double lt = 0, lu = 0;
    cr_assert_eq(trainrun_trainer_scheduled_lr(t, 300, N / 32, &lt), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_scheduled_lr(u, 300, N / 32, &lu), TRAINRUN_OK);
    cr_expect(lt == lu && lu < 0.2, "the plateau's lr %a, loaded %a", lt, lu);
    cr_expect_eq(trainrun_trainer_monitor(u, "val_loss", 1.0, NULL), TRAINRUN_E_INVALID,
                 "the checkpoint's step had its evaluation");
    const int64_t start = (step * 32) % N;
    const trainrun_batch nb1 = view(X + start * D, Y + start, 32);
    trainrun_step_result rt, ru;
    cr_assert_eq(trainrun_trainer_set_lr(t, lt), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_set_lr(u, lu), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_train_step(t, &nb1, &rt), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_train_step(u, &nb1, &ru), TRAINRUN_OK);
    cr_expect_eq(rt.loss, ru.loss, "the next step after the load: %a, uninterrupted %a", ru.loss, rt.loss);
    trainrun_selection ot, ou;
    cr_assert_eq(trainrun_trainer_monitor(t, "val_loss", 1e-9, &ot), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_monitor(u, "val_loss", 1e-9, &ou), TRAINRUN_OK);
    cr_expect(ot.best && ou.best && ot.evicted_step == ou.evicted_step && ot.evicted_step >= 0,
              "a new best evicts step %lld, after the load %lld", (long long)ot.evicted_step,
              (long long)ou.evicted_step);
    trainrun_trainer_close(u);
    trainrun_trainer_close(t);
    trainrun_run_close(r);
    trainrun_data_close(train);
    trainrun_data_close(val);
}

/* A trainer's whole-split evaluation is a run's evaluation pass: a run with the EMA, eval.weights both, eval.top_k 2
 * and eval.batch_size 48 (128 validation samples: batches of 48, 48, 32) ends at step 30 with an evaluation and a
 * checkpoint; a trainer loaded from that checkpoint evaluates the same set with the live and the EMA weights and
 * gets the run's figures bit for bit. The confusion matrix adds up to the samples, its diagonal to the correct
 * ones; the refusals say why. */
Test(api, trainer_evaluate_is_the_runs_evaluation_pass)
{
    support_make_blobs(N, D, K, 1, X, Y);
    support_make_blobs(128, D, K, 3, XV, YV);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 9\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "ema: {enabled: true, decay: 0.8, start_step: 2, every_steps: 1}\n"
             "eval: {every_steps: 10, every_epoch: false, weights: both, top_k: 2, batch_size: 48}\n"
             "data: {shuffle: false}\ntrain: {batch_size: 32, max_steps: 30}\n"
             "log: {every_steps: 5, progress: never}\ncheckpoint: {every_seconds: 0, every_steps: 0}\n"
             "run: {dir: %s, name: whole-pass}\n", write_model(), support_tmpdir);
    trainrun_data *train = NULL, *val = NULL;
    trainrun_run *r = run_on_blobs(yaml, &train, &val, NULL, NULL);
    trainrun_summary s;
    cr_assert_eq(trainrun_run_summary(r, &s), TRAINRUN_OK);
    cr_assert(s.has_val_live && s.has_val_ema && s.val_live.step == 30 && s.val_ema.step == 30);

    trainrun_trainer *t = NULL;
    trainrun_eval_result live, ema;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    int64_t classes = -1, counts[K * K];
    cr_expect_eq(trainrun_trainer_confusion(t, counts, K * K, &classes), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "no evaluation yet"), "%s", trainrun_trainer_errmsg(t));
    char ckpt[1200];
    snprintf(ckpt, sizeof ckpt, "%s/whole-pass", support_tmpdir); /* the run directory: its newest checkpoint */
    cr_assert_eq(trainrun_trainer_load(t, ckpt), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &live), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_confusion(t, counts, K * K, &classes), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_EMA, &ema), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    const trainrun_eval_result *want[2] = {&s.val_live, &s.val_ema}, *got[2] = {&live, &ema};
    for (int i = 0; i < 2; i++)
        cr_expect(got[i]->loss == want[i]->loss && got[i]->accuracy == want[i]->accuracy &&
                  got[i]->top_k_accuracy == want[i]->top_k_accuracy && got[i]->samples == 128 &&
                  got[i]->step == 30,
                  "%s weights: loss %a accuracy %a top-2 %a (%lld samples, step %lld); the run's %a %a %a",
                  i ? "EMA" : "live", got[i]->loss, got[i]->accuracy, got[i]->top_k_accuracy,
                  (long long)got[i]->samples, (long long)got[i]->step, want[i]->loss, want[i]->accuracy,
                  want[i]->top_k_accuracy);
    cr_expect(live.loss != ema.loss, "the EMA's weights are not the live ones (%a both)", live.loss);
    cr_expect(live.top_k_accuracy >= live.accuracy && live.accuracy > 0.5, "accuracy %g, top-2 %g", live.accuracy,
              live.top_k_accuracy);
    int64_t sum = 0, diag = 0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            sum += counts[i * K + j];
            if (i == j) diag += counts[i * K + j];
        }
    cr_expect_eq(classes, K);
    cr_expect(sum == 128 && (double)diag / 128.0 == live.accuracy, "the live pass's matrix: %lld counts, %lld on "
              "the diagonal, accuracy %g", (long long)sum, (long long)diag, live.accuracy);

    /* refusals */
    trainrun_data *cb = NULL;
    const int64_t shape[1] = {D};
    cr_assert_eq(trainrun_data_callback(blob_batches, NULL, shape, 1, &cb), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_evaluate(t, cb, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &live), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "callback"), "%s", trainrun_trainer_errmsg(t));
    cr_expect_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_TRAIN, TRAINRUN_WEIGHTS_LIVE, &live), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, 7, &live), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_confusion(t, counts, K * K - 1, &classes), TRAINRUN_E_INVALID);
    cr_expect_eq(classes, K, "the count needed is said");
    trainrun_trainer *plain = NULL;
    const char *ov[] = {"ema.enabled=false", "eval.weights=live"};
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, ov, 2, &plain), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(plain));
    cr_expect_eq(trainrun_trainer_evaluate(plain, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_EMA, &ema), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(plain), "ema.enabled"), "%s", trainrun_trainer_errmsg(plain));
    trainrun_trainer_close(plain);
    trainrun_data_close(cb);
    trainrun_trainer_close(t);
    trainrun_run_close(r);
    trainrun_data_close(train);
    trainrun_data_close(val);
}

/* Gradient accumulation through the trainer is the run's: with train.accumulate_steps 2 and batch_size 16 a run
 * takes 32 samples a step in two micro-batches; a trainer of the same config given those 32 samples a step
 * splits them the same way, and every step's loss is the run's bit for bit. */
Test(api, trainer_accumulates_gradients_as_the_run_does)
{
    support_make_blobs(N, D, K, 4, X, Y);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 13\nmodel: {spec: %s}\noptim: {name: adamw, lr: 0.02}\n"
             "data: {shuffle: false}\ntrain: {batch_size: 16, accumulate_steps: 2, max_steps: 24}\n"
             "log: {every_steps: 4, progress: never}\ncheckpoint: {every_seconds: 0, every_steps: 0}\n"
             "run: {dir: %s, name: accumulated}\n", write_model(), support_tmpdir);
    static trace run;
    memset(&run, 0, sizeof run);
    trainrun_data *train = NULL;
    trainrun_run *r = run_on_blobs(yaml, &train, NULL, record, &run);
    cr_assert_eq(run.n, 24);

    trainrun_trainer *t = NULL, *one = NULL;
    const char *ov[] = {"train.accumulate_steps=1"};
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, ov, 1, &one), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(one));
    int differ = 0;
    for (int step = 0; step < 24; step++) {
        const int64_t start = ((int64_t)step * 32) % N;
        const trainrun_batch b = view(X + start * D, Y + start, 32);
        trainrun_step_result res, whole;
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &res), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_assert_eq(trainrun_trainer_train_step(one, &b, &whole), TRAINRUN_OK);
        cr_expect(res.loss == run.loss[step] && res.samples == 32, "step %d: loss %a over %lld samples, the run's %a",
                  step + 1, res.loss, (long long)res.samples, run.loss[step]);
        differ += whole.loss != res.loss;
    }
    /* one batch of 32 is the same mean loss in other float sums: the accumulation is what the trainer ran */
    cr_expect(differ > 0, "accumulate_steps 1 gave the same 24 losses bit for bit");
    trainrun_trainer_close(one);
    trainrun_trainer_close(t);
    trainrun_run_close(r);
    trainrun_data_close(train);
}

/* The safetensors files of two checkpoint directories are equal byte for byte (and there are some). */
static int same_tensor_files(const char *a, const char *b)
{
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "ema.safetensors"};
    int compared = 0;
    for (int i = 0; i < 3; i++) {
        char pa[1400], pb[1400];
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        size_t na = 0, nb = 0;
        char *fa = slurp(pa, &na), *fb = slurp(pb, &nb);
        const int same = (!fa && !fb) || (fa && fb && na == nb && memcmp(fa, fb, na) == 0);
        compared += fa != NULL;
        free(fa);
        free(fb);
        if (!same) {
            cr_log_error("%s differs from %s", pb, pa);
            return 0;
        }
    }
    return compared >= 2;
}

/* A background save is trainrun_trainer_save's checkpoint: a trainer saves at step 10 in the background and trains
 * five more steps while the files are written, its twin saves in the foreground; the tensor files are equal byte for
 * byte, the outcome comes from save_wait with its CHECKPOINT event, and a trainer loaded from the background
 * checkpoint repeats steps 11..15 bit for bit. A write that fails (EIO at its first counted call) is reported by
 * save_wait, and the checkpoint before it is still there and loads. */
Test(api, a_background_save_is_the_saves_checkpoint_and_resumes_bit_for_bit)
{
    support_make_blobs(N, D, K, 5, X, Y);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "seed: 21\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "ema: {enabled: true, decay: 0.9, start_step: 2}\ntrain: {batch_size: 32}\n"
             "checkpoint: {every_seconds: 0, every_steps: 0, keep_last: 3}\n", write_model());
    trainrun_trainer *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &a), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(a));
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &b), TRAINRUN_OK);
    static trainer_events ev;
    memset(&ev, 0, sizeof ev);
    cr_assert_eq(trainrun_trainer_set_callback(a, record_trainer, &ev), TRAINRUN_OK);
    double loss[16];
    trainrun_step_result res;
    for (int step = 0; step < 15; step++) {
        const int64_t start = ((int64_t)step * 32) % N;
        const trainrun_batch bt = view(X + start * D, Y + start, 32);
        cr_assert_eq(trainrun_trainer_train_step(a, &bt, &res), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(a));
        cr_assert_eq(trainrun_trainer_update_ema(a), TRAINRUN_OK);
        loss[step] = res.loss;
        if (step < 10) {
            cr_assert_eq(trainrun_trainer_train_step(b, &bt, &res), TRAINRUN_OK);
            cr_assert_eq(trainrun_trainer_update_ema(b), TRAINRUN_OK);
        }
        if (step == 9) {
            cr_assert_eq(trainrun_trainer_save_background(a, support_path("bg")), TRAINRUN_OK, "%s",
                         trainrun_trainer_errmsg(a));
            cr_assert_eq(trainrun_trainer_save(b, support_path("fg"), NULL, 0), TRAINRUN_OK);
        }
    }
    char bg[1200], fg[1200];
    cr_assert_eq(trainrun_trainer_save_wait(a, bg, sizeof bg), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(a));
    snprintf(fg, sizeof fg, "%s/checkpoints/step-0000000010", support_path("fg"));
    cr_expect(strstr(bg, "/bg/checkpoints/step-0000000010") != NULL, "save_wait's path: %s", bg);
    cr_expect(same_tensor_files(fg, bg), "the background checkpoint's tensors are the foreground one's");
    int checkpoints = 0;
    for (int i = 0; i < ev.n; i++)
        if (ev.ev[i].kind == TRAINRUN_EVENT_CHECKPOINT) {
            checkpoints++;
            cr_expect(ev.ev[i].step == 10 && strcmp(ev.path[i], bg) == 0 && strcmp(ev.reason[i], "manual") == 0 &&
                      ev.ev[i].bytes > 1000, "CHECKPOINT step %lld %s (%s, %lld bytes)", (long long)ev.ev[i].step,
                      ev.path[i], ev.reason[i], (long long)ev.ev[i].bytes);
        }
    cr_expect_eq(checkpoints, 1, "one CHECKPOINT event, from save_wait");
    char none[64] = "x";
    cr_expect_eq(trainrun_trainer_save_wait(a, none, sizeof none), TRAINRUN_OK, "nothing in flight");
    cr_expect_str_eq(none, "");

    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &c), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_load(c, support_path("bg")), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(c));
    for (int step = 10; step < 15; step++) {
        const int64_t start = ((int64_t)step * 32) % N;
        const trainrun_batch bt = view(X + start * D, Y + start, 32);
        cr_assert_eq(trainrun_trainer_train_step(c, &bt, &res), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_update_ema(c), TRAINRUN_OK);
        cr_expect_eq(res.loss, loss[step], "step %d after the load: %a, uninterrupted %a", step + 1, res.loss,
                     loss[step]);
    }

    /* a write that fails: reported by save_wait; what was saved before stays and loads */
    tr_io_fault_arm(1, 1, EIO, 0);
    cr_assert_eq(trainrun_trainer_save_background(a, support_path("bg")), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(a));
    cr_expect_eq(trainrun_trainer_save_wait(a, bg, sizeof bg), TRAINRUN_E_RUNTIME);
    cr_expect(strstr(trainrun_trainer_errmsg(a), "step-0000000015") != NULL, "the message names the checkpoint: %s",
              trainrun_trainer_errmsg(a));
    cr_expect_str_eq(bg, "");
    tr_io_fault_arm(0, 0, 0, 0);
    char kept[512];
    list_checkpoints(support_path("bg"), kept, sizeof kept);
    cr_expect_str_eq(kept, "step-0000000010 ", "the checkpoints left after the failed write");
    trainrun_trainer *d = NULL;
    int64_t steps = 0;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &d), TRAINRUN_OK);
    cr_expect_eq(trainrun_trainer_load(d, support_path("bg")), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(d));
    cr_expect_eq(trainrun_trainer_steps(d, &steps), TRAINRUN_OK);
    cr_expect_eq(steps, 10);
    trainrun_trainer_close(d);
    trainrun_trainer_close(c);
    trainrun_trainer_close(b);
    trainrun_trainer_close(a);
}
