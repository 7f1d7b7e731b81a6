/*
 * test_trainer_data.c -- a trainer over the config's data (trainrun_trainer_open_data, trainrun_trainer_next_batch):
 * a loop of public calls over the config's files takes a run's steps loss for loss -- shuffled epochs, augmentation,
 * the prefetching loader, an epoch boundary -- evaluates the run's validation split to the same figures, and a
 * trainer loaded from its checkpoint takes the batches the loop would have taken next.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support.h"
#include "trainrun/trainrun.h"

TestSuite(trainer_data, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

#define STEPS 50        /* past the end of the first epoch: 1000 - 200 samples carved for val, 32 a step = 25 */
#define PER_EPOCH 25

/* The Fashion-MNIST MLP on a subset, shuffled, augmented and prefetched, with a warm-up and cosine schedule. */
static const char *const overrides[] = {
    "data.train_subset=1000", "data.val_size=200",      "eval.test_at_end=false", "eval.every_epoch=false", "eval.every_steps=50",
    "train.batch_size=32",    "train.max_steps=50",      "schedule.warmup_steps=10", "data.augment.crop_padding=2",
    "data.augment.hflip=0.5", "data.prefetch=true",      "log.progress=never",     "checkpoint.every_seconds=0",
    "checkpoint.every_steps=0", NULL,                   NULL};
#define N_OVERRIDES 16

typedef struct steps {
    int n;
    double loss[STEPS], lr[STEPS];
    trainrun_eval_result val, test; /* the run's validation pass after its last step, its test pass */
} steps;

static void record(void *ctx, const trainrun_event *ev)
{
    steps *s = ctx;
    if (ev->kind == TRAINRUN_EVENT_STEP && s->n < STEPS) {
        s->lr[s->n] = ev->lr;
        s->loss[s->n++] = ev->loss;
    } else if (ev->kind == TRAINRUN_EVENT_EVAL) {
        *(strcmp(ev->split, "val") == 0 ? &s->val : &s->test) = (trainrun_eval_result){.step = ev->step, .samples = ev->samples, .loss = ev->loss,
                                        .accuracy = ev->accuracy};
    }
}

static const char *config(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/configs/fashion_mnist_mlp.yaml", TR_SOURCE_DIR);
    return path;
}

/* The overrides with run.dir and run.name: the run's, or a trainer's (which writes nothing there). */
static const char *const *with_dir(const char *name)
{
    static char dir[1100], run[200];
    static const char *all[N_OVERRIDES];
    memcpy(all, overrides, sizeof overrides[0] * (N_OVERRIDES - 2));
    snprintf(dir, sizeof dir, "run.dir=%s", support_tmpdir);
    snprintf(run, sizeof run, "run.name=%s", name);
    all[N_OVERRIDES - 2] = dir;
    all[N_OVERRIDES - 1] = run;
    return all;
}

/* Steps from..to-1 of the custom loop: the run's batch, the scheduled lr, the step; each loss and lr checked
 * against the run's. */
static void loop(trainrun_trainer *t, trainrun_data *train, int from, int to, const steps *run)
{
    for (int step = from; step < to; step++) {
        trainrun_batch b;
        trainrun_step_result r;
        double lr = 0;
        cr_assert_eq(trainrun_trainer_next_batch(t, train, &b), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_assert_eq(b.shape[0], 32);
        cr_assert(b.ndim == 4 && b.shape[1] == 1 && b.shape[2] == 28 && b.shape[3] == 28,
                  "the MLP's input is [1, 28, 28]: batches [32, 1, 28, 28]");
        cr_assert_eq(trainrun_trainer_scheduled_lr(t, STEPS, PER_EPOCH, &lr), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_set_lr(t, lr), TRAINRUN_OK);
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        cr_expect_eq(lr, run->lr[step], "step %d: lr %a, the run's %a", step + 1, lr, run->lr[step]);
        cr_expect_eq(r.loss, run->loss[step], "step %d: loss %a, the run's %a", step + 1, r.loss, run->loss[step]);
    }
}

/* The run of the config's files into run directory `name`, its events recorded into *s. */
static void run_files(const char *name, steps *s)
{
    memset(s, 0, sizeof *s);
    trainrun_run *r = NULL;
    cr_assert_eq(trainrun_run_open(config(), with_dir(name), N_OVERRIDES, &r), TRAINRUN_OK, "%s",
                 trainrun_run_errmsg(r));
    cr_assert_eq(trainrun_run_set_callback(r, record, s), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_wait(r), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    trainrun_run_close(r);
}

/* A trainer of the same config and the config's data as sources (trainrun_trainer_open_data). */
static trainrun_trainer *trainer_with_data(trainrun_data **train, trainrun_data **val, trainrun_data **test)
{
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open(config(), with_dir("trainer"), N_OVERRIDES, &t), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_data(t, train, val, test), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    return t;
}

Test(trainer_data, a_loop_over_the_configs_files_takes_the_runs_steps)
{
    support_require_fmnist();
    static steps run;
    run_files("run", &run);
    cr_assert_eq(run.n, STEPS);
    const trainrun_eval_result run_val = run.val;
    cr_assert(run_val.step == STEPS && run_val.samples == 200, "the run's validation after step %lld of %lld samples",
              (long long)run_val.step, (long long)run_val.samples);

    trainrun_data *train = NULL, *val = NULL, *test = NULL;
    trainrun_trainer *t = trainer_with_data(&train, &val, &test);
    cr_assert(train && val);
    cr_expect_null(test, "eval.test_at_end false: the config reads no test set");
    const char *loop_dir = support_path("loop");
    cr_assert_eq(trainrun_trainer_open_dir(t, loop_dir, NULL), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_log(t, STEPS), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    loop(t, train, 0, 30, &run);
    int64_t epoch = -1, pos = -1;
    cr_assert_eq(trainrun_trainer_data_position(t, &epoch, &pos), TRAINRUN_OK);
    cr_expect(epoch == 1 && pos == 5 * 32, "after 30 steps of 25 an epoch: epoch 1, position 160, not %lld, %lld",
              (long long)epoch, (long long)pos);
    cr_expect_eq(trainrun_data_close(train), TRAINRUN_E_BUSY, "the trainer batches it");
    char saved[1200];
    cr_assert_eq(trainrun_trainer_save(t, support_path("at30"), saved, sizeof saved), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    loop(t, train, 30, STEPS, &run);
    trainrun_eval_result v;
    cr_assert_eq(trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &v), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_expect(v.samples == 200 && v.loss == run_val.loss && v.accuracy == run_val.accuracy,
              "the validation split's figures: %lld samples, loss %a, accuracy %a; the run's %lld, %a, %a",
              (long long)v.samples, v.loss, v.accuracy, (long long)run_val.samples, run_val.loss, run_val.accuracy);
    /* the evaluation's files in the loop's directory, as in the run's: the confusion matrix byte for byte (its
     * counts are the trainer's), curves.png drawn from the loop's metrics.jsonl */
    static char mine[8192], runs[8192];
    support_read_file(support_path("loop/confusion_val.csv"), mine, sizeof mine);
    support_read_file(support_path("run/confusion_val.csv"), runs, sizeof runs);
    cr_expect(strlen(mine) > 20 && strcmp(mine, runs) == 0, "the loop's confusion_val.csv:\n%s\nthe run's:\n%s", mine,
              runs);
    int64_t counts[100], classes = 0, sum = 0;
    cr_assert_eq(trainrun_trainer_confusion(t, counts, 100, &classes), TRAINRUN_OK);
    for (int i = 0; i < classes * classes; i++) sum += counts[i];
    cr_expect(classes == 10 && sum == 200, "%lld classes, %lld samples", (long long)classes, (long long)sum);
    char png[9] = "";
    FILE *f = fopen(support_path("loop/curves.png"), "rb");
    cr_assert_not_null(f, "no curves.png after the loop's evaluation");
    cr_expect_eq(fread(png, 1, 8, f), 8);
    fclose(f);
    cr_expect(memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0, "curves.png is not a PNG");

    /* a second trainer loaded from step 30 takes the batches of steps 31.. and so the run's losses */
    trainrun_trainer *u = NULL;
    cr_assert_eq(trainrun_trainer_open(config(), with_dir("resumed"), N_OVERRIDES, &u), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(u));
    cr_assert_eq(trainrun_trainer_load(u, saved), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    cr_assert_eq(trainrun_trainer_data_position(u, &epoch, &pos), TRAINRUN_OK);
    cr_expect(epoch == 1 && pos == 160, "the checkpoint carries the position: %lld, %lld", (long long)epoch,
              (long long)pos);
    loop(u, train, 30, STEPS, &run);
    /* the first trainer's source moves to the second: moving the position back replays from there */
    cr_assert_eq(trainrun_trainer_set_data_position(u, 1, 160), TRAINRUN_OK);
    trainrun_batch again, first;
    cr_assert_eq(trainrun_trainer_next_batch(u, train, &again), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    static float row[784];
    memcpy(row, again.x, sizeof row);
    const int64_t label = ((const int64_t *)again.y)[0];
    cr_assert_eq(trainrun_trainer_set_data_position(u, 1, 160), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_next_batch(u, train, &first), TRAINRUN_OK);
    cr_expect(memcmp(row, first.x, sizeof row) == 0 && label == ((const int64_t *)first.y)[0],
              "the batch at a position is a function of the position");
    trainrun_trainer_close(u);
    trainrun_trainer_close(t);
    cr_expect_eq(trainrun_data_close(train), TRAINRUN_OK, "no trainer holds it once they are closed");
    /* the closed loop's summary.json says what the run's does of the same 50 steps (timings and memory apart) */
    static const char *const same[] = {"status", "params", "steps", "epochs", "epochs_completed", "last_loss",
                                       "val_loss", "val_accuracy", "val_metrics", "memory_cache", "device",
                                       "prefetch", "malloc_tuning", "threads"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        char a[512], b[512];
        support_summary_member(support_path("loop"), same[i], a, sizeof a);
        support_summary_member(support_path("run"), same[i], b, sizeof b);
        cr_expect(a[0] && strcmp(a, b) == 0, "summary.json %s: the loop's %s, the run's %s", same[i], a, b);
    }
    char status[64];
    support_summary_member(support_path("loop"), "status", status, sizeof status);
    cr_expect_str_eq(status, "\"completed\"");
    trainrun_data_close(val);
}

/* A run given a trainer's open_data sources (trainrun_run_set_data) trains as the run that reads the files: the
 * crop pads with the normalised black pixel, not with 0, so the augmented losses are the same bit for bit. */
Test(trainer_data, a_run_given_open_data_sources_trains_as_the_run_of_the_files)
{
    support_require_fmnist();
    static steps files, given;
    memset(&given, 0, sizeof given);
    run_files("files", &files);
    trainrun_data *train = NULL, *val = NULL, *test = NULL;
    trainrun_trainer *t = trainer_with_data(&train, &val, &test);
    trainrun_run *r = NULL;
    cr_assert_eq(trainrun_run_open(config(), with_dir("given"), N_OVERRIDES, &r), TRAINRUN_OK, "%s",
                 trainrun_run_errmsg(r));
    cr_assert_eq(trainrun_run_set_data(r, TRAINRUN_TRAIN, train), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    cr_assert_eq(trainrun_run_set_data(r, TRAINRUN_VAL, val), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    cr_assert_eq(trainrun_run_set_callback(r, record, &given), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_wait(r), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    trainrun_run_close(r);
    cr_assert_eq(given.n, files.n);
    for (int i = 0; i < files.n; i++)
        cr_expect_eq(given.loss[i], files.loss[i], "step %d: loss %a, the files' run %a", i + 1, given.loss[i],
                     files.loss[i]);
    cr_expect(given.val.samples == 200 && given.val.loss == files.val.loss, "val: %lld samples, %a vs %a",
              (long long)given.val.samples, given.val.loss, files.val.loss);
    trainrun_trainer_close(t);
    trainrun_data_close(train);
    trainrun_data_close(val);
}

static int no_batches(void *ctx, int64_t step, int64_t batch_size, trainrun_batch *batch)
{
    (void)ctx, (void)step, (void)batch_size, (void)batch;
    return 1;
}

/* An arrays source is batched as a run batches it: shuffled per epoch; the refusals say what is wrong. */
Test(trainer_data, next_batch_refuses_what_it_cannot_batch)
{
    static float x[40 * 4];
    static int64_t y[40];
    support_make_blobs(40, 4, 2, 3, x, y);
    const char *model = support_path("model.yaml");
    support_write_file(model, "input: [4]\nlayers:\n  - linear: {in: 4, out: 2}\n");
    char yaml[1024];
    snprintf(yaml, sizeof yaml, "seed: 5\nmodel: {spec: %s}\ntrain: {batch_size: 16, drop_last: false}\nlog: {progress: never}\n",
             model);
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    trainrun_data *arrays = NULL, *small = NULL, *cb = NULL;
    const trainrun_batch all = {x, TRAINRUN_FLOAT32, 2, {40, 4, 0, 0}, y, TRAINRUN_INT64};
    const trainrun_batch few = {x, TRAINRUN_FLOAT32, 2, {8, 4, 0, 0}, y, TRAINRUN_INT64};
    cr_assert_eq(trainrun_data_arrays(&all, &arrays), TRAINRUN_OK);
    cr_assert_eq(trainrun_data_arrays(&few, &small), TRAINRUN_OK);
    const int64_t shape[] = {4};
    cr_assert_eq(trainrun_data_callback(no_batches, NULL, shape, 1, &cb), TRAINRUN_OK);
    trainrun_batch b;
    cr_expect_eq(trainrun_trainer_next_batch(NULL, arrays, &b), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_next_batch(t, NULL, &b), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_next_batch(t, arrays, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_open_data(t, NULL, NULL, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_next_batch(t, cb, &b), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "callback"), "%s", trainrun_trainer_errmsg(t));
    cr_expect_eq(trainrun_trainer_next_batch(t, small, &b), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "8 training samples"), "%s", trainrun_trainer_errmsg(t));
    /* 40 samples, 16 a step: batches of 16, 16, 8, then the next epoch in another order */
    int seen[40] = {0};
    int64_t sizes[3];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(trainrun_trainer_next_batch(t, arrays, &b), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        sizes[i] = b.shape[0];
        for (int64_t r = 0; r < b.shape[0]; r++)
            for (int s = 0; s < 40; s++)
                if (memcmp((const float *)b.x + r * 4, x + s * 4, 4 * sizeof(float)) == 0) seen[s]++;
    }
    cr_expect(sizes[0] == 16 && sizes[1] == 16 && sizes[2] == 8, "%lld %lld %lld", (long long)sizes[0],
              (long long)sizes[1], (long long)sizes[2]);
    int once = 0;
    for (int s = 0; s < 40; s++) once += seen[s] >= 1;
    cr_expect_eq(once, 40, "an epoch takes every sample");
    int64_t epoch, pos;
    trainrun_trainer_data_position(t, &epoch, &pos);
    cr_expect(epoch == 0 && pos == 40, "%lld %lld", (long long)epoch, (long long)pos);
    cr_assert_eq(trainrun_trainer_next_batch(t, arrays, &b), TRAINRUN_OK);
    trainrun_trainer_data_position(t, &epoch, &pos);
    cr_expect(epoch == 1 && pos == 16, "%lld %lld", (long long)epoch, (long long)pos);
    trainrun_trainer_close(t);
    cr_expect_eq(trainrun_data_close(arrays), TRAINRUN_OK);
    trainrun_data_close(small);
    trainrun_data_close(cb);
}

/* n gray 8 x 8 PNGs of class c under DIR/c/ (c's images brighter on the left, others on the right). */
static void write_pngs(const char *dir, int c, int n, uint64_t seed)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%d", dir, c);
    mkdir(dir, 0755);
    mkdir(path, 0755);
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        uint8_t px[64];
        for (int j = 0; j < 64; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            px[j] = (uint8_t)(((j % 8 < 4) == (c == 0) ? 128 : 0) + ((s >> 40) & 127));
        }
        png_image im = {.version = PNG_IMAGE_VERSION, .width = 8, .height = 8, .format = PNG_FORMAT_GRAY};
        snprintf(path, sizeof path, "%s/%d/%03d.png", dir, c, i);
        cr_assert(png_image_write_to_file(&im, path, 0, px, 0, NULL), "%s: %s", path, im.message);
    }
}

/* Image folders through a trainer: the files decoded (training batches on the loader's thread, the test pass on
 * the caller's), augmented and normalized as a run's; the loop's losses and its test figures are the run's. */
Test(trainer_data, image_folders_train_and_evaluate_as_a_run)
{
    const unsigned seed = support_seed("image_folders");
    char train_dir[1100], test_dir[1100], yaml[3000];
    snprintf(train_dir, sizeof train_dir, "%s/train", support_tmpdir);
    snprintf(test_dir, sizeof test_dir, "%s/test", support_tmpdir);
    for (int c = 0; c < 2; c++) {
        write_pngs(train_dir, c, 20, seed + (unsigned)c);
        write_pngs(test_dir, c, 6, seed + 10u + (unsigned)c);
    }
    const char *model = support_path("model.yaml");
    support_write_file(model, "input: [1, 8, 8]\nlayers:\n  - flatten\n  - linear: {in: 64, out: 16}\n  - relu\n"
                              "  - dropout: {p: 0.1}\n  - linear: {in: 16, out: 2}\n");
    snprintf(yaml, sizeof yaml,
             "seed: 3\nmodel: {spec: %s}\noptim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
             "data: {format: image_folder, root: %s, train_root: train, test_root: test, image_mode: L, "
             "val_size: 0, mean: [0.5], std: [0.25], augment: {hflip: 0.5, crop_padding: 1}, prefetch: true}\n"
             "train: {batch_size: 8, max_steps: 12}\neval: {every_epoch: false, test_at_end: true}\n"
             "log: {progress: never}\ncheckpoint: {every_seconds: 0, every_steps: 0}\nrun: {dir: %s, name: png}\n",
             model, support_tmpdir, support_tmpdir);
    static steps run;
    memset(&run, 0, sizeof run);
    trainrun_run *r = NULL;
    cr_assert_eq(trainrun_run_open_yaml(yaml, NULL, 0, &r), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    cr_assert_eq(trainrun_run_set_callback(r, record, &run), TRAINRUN_OK);
    cr_assert_eq(trainrun_run_wait(r), TRAINRUN_OK, "%s", trainrun_run_errmsg(r));
    cr_assert_eq(run.n, 12);
    cr_assert_eq(run.test.samples, 12, "the run's test pass: %lld samples", (long long)run.test.samples);
    trainrun_run_close(r);

    trainrun_trainer *t = NULL;
    trainrun_data *train = NULL, *val = NULL, *test = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_data(t, &train, &val, &test), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect_null(val, "data.val_size 0 and no data.val_root: no validation split");
    cr_assert_not_null(test);
    double loss[12];
    support_train_steps(t, train, 12, loss);
    for (int step = 0; step < 12; step++)
        cr_expect_eq(loss[step], run.loss[step], "step %d: loss %a, the run's %a", step + 1, loss[step],
                     run.loss[step]);
    trainrun_eval_result e;
    cr_assert_eq(trainrun_trainer_evaluate(t, test, TRAINRUN_TEST, TRAINRUN_WEIGHTS_LIVE, &e), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_expect(e.samples == 12 && e.loss == run.test.loss && e.accuracy == run.test.accuracy,
              "test: %lld samples, loss %a, accuracy %a; the run's %a, %a", (long long)e.samples, e.loss, e.accuracy,
              run.test.loss, run.test.accuracy);
    trainrun_trainer_close(t);
    trainrun_data_close(train);
    trainrun_data_close(test);
}

/* A custom loop's run directory is a run's to the command line: open_dir writes config.yaml and the model's copy,
 * so `trainrun predict DIR` predicts with the loop's newest checkpoint, its correct count the trainer's own test
 * evaluation's. */
Test(trainer_data, trainrun_predict_reads_a_trainers_run_directory)
{
    support_require_fmnist();
    const char *const *base = with_dir("loop");
    const char *all[N_OVERRIDES + 1];
    memcpy(all, base, sizeof all[0] * N_OVERRIDES);
    for (int i = 0; i < N_OVERRIDES; i++)
        if (strcmp(all[i], "eval.test_at_end=false") == 0) all[i] = "eval.test_at_end=true";
    all[N_OVERRIDES] = "data.test_subset=200";
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open(config(), all, N_OVERRIDES + 1, &t), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/loop", support_tmpdir);
    int resumed = -1;
    cr_assert_eq(trainrun_trainer_open_dir(t, dir, &resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(resumed, 0);
    trainrun_data *train = NULL, *test = NULL;
    cr_assert_eq(trainrun_trainer_open_data(t, &train, NULL, &test), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_not_null(test);
    support_train_steps(t, train, 25, NULL);
    cr_assert_eq(trainrun_trainer_save(t, NULL, NULL, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    trainrun_eval_result e;
    cr_assert_eq(trainrun_trainer_evaluate(t, test, TRAINRUN_TEST, TRAINRUN_WEIGHTS_LIVE, &e), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_assert_eq(e.samples, 200);
    const long long correct = (long long)(e.accuracy * 200.0 + 0.5);
    cr_expect(correct > 20 && correct < 200, "part-trained: %lld of 200 right", correct);
    trainrun_trainer_close(t);
    trainrun_data_close(train);
    trainrun_data_close(test);

    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.yaml", dir);
    cr_expect_eq(stat(path, &st), 0, "%s: the model's copy", path);
    static char out[16384];
    char args[3000];
    snprintf(args, sizeof args, "predict %s -o %s/preds.csv", dir, support_tmpdir);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    snprintf(path, sizeof path, "%s/preds.csv", support_tmpdir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char line[4096];
    cr_assert_not_null(fgets(line, sizeof line, f));
    long long rows = 0, good = 0;
    while (fgets(line, sizeof line, f)) {
        long long idx, target, pred;
        cr_assert_eq(sscanf(line, "%lld,%lld,%lld", &idx, &target, &pred), 3, "%s", line);
        good += target == pred;
        rows++;
    }
    fclose(f);
    cr_expect_eq(rows, 200);
    cr_expect_eq(good, correct, "predict: %lld right; the trainer's test evaluation: %lld", good, correct);
}
