/*
 * custom_loop.c -- your own training loop with the trainer API, keeping the guarantees of a trainrun run: a model and
 * optimizer built from a config, a train step on batches you assemble, the config's lr schedule, the EMA of the
 * weights evaluated beside the live ones, a pass over the validation set every 15 steps (trainrun_trainer_evaluate)
 * whose loss drives the model selection (the two best checkpoints by val_loss kept, early stopping), the memory
 * watchdog, and the checkpoint policy (every 10 steps, every 30 s of training time, and each new best) whose
 * checkpoints resume bit for bit -- also after SIGKILL; the run directory's protocol (one writer, the newest
 * valid checkpoint resumed: trainrun_trainer_open_dir); the run's metrics.jsonl and metrics.csv (open_log); under
 * torchrun, data-parallel over the ranks (init_process_group);
 * SIGINT / SIGTERM save and stop, as `trainrun CONFIG` does;
 * the watchdog's reports, the saves and the warnings are printed from the trainer's events.
 *
 *   cc custom_loop.c $(pkg-config --cflags --libs trainrun) -o custom_loop
 *   ./custom_loop DIR [--stop-at STEP | --kill-at STEP]
 *       trains to step 60; --stop-at asks itself to stop after STEP (as a signal does: it saves and exits);
 *       --kill-at dies by SIGKILL after STEP, with no clean-up (what a crash or the OOM killer does). Started again
 *       on DIR, it resumes the newest checkpoint in it; the steps it prints after that equal the uninterrupted
 *       loop's. A second process on the same DIR is refused while the first runs. Data-parallel on 2 processes:
 *   torchrun --no_python --nproc_per_node 2 ./custom_loop DIR
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <trainrun/trainrun.h>

#define N 512
#define D 8
#define K 4
#define BATCH 32
#define NV 128 /* validation samples */
#define STEPS 60
#define EVAL_EVERY 15

static float x[N * D], xv[NV * D];
static int64_t y[N], yv[NV];
static trainrun_data *val; /* the validation set, a data source for trainrun_trainer_evaluate */
static trainrun_trainer *current; /* the trainer a signal stops */

/* SIGINT / SIGTERM: the loop saves at the end of this step and stops (request_stop only sets a flag) */
static void on_signal(int sig)
{
    (void)sig;
    trainrun_trainer_request_stop(current);
}

/* n samples of K Gaussian-ish blobs in D dimensions: x[n, D] float32, y[n] int64 class ids */
static void make_blobs(uint32_t seed, int n, float *xs, int64_t *ys)
{
    for (int i = 0; i < n; i++) {
        ys[i] = i % K;
        for (int j = 0; j < D; j++) {
            seed = seed * 1664525u + 1013904223u;
            xs[i * D + j] = (j % K == ys[i] ? 1.0f : -0.3f) + 1.5f * ((float)(seed >> 8) / 16777216.0f - 0.5f);
        }
    }
}

/* The trainer's events: its watchdog reports and its saves, as the calls that produced them return. */
static void on_event(void *ctx, const trainrun_event *ev)
{
    (void)ctx;
    if (ev->kind == TRAINRUN_EVENT_WATCHDOG && ev->watchdog == TRAINRUN_WATCHDOG_BASELINE)
        printf("watchdog baseline %lld bytes at step %lld\n", (long long)ev->baseline_bytes, (long long)ev->step);
    else if (ev->kind == TRAINRUN_EVENT_WATCHDOG)
        printf("watchdog %s: %lld bytes allocated at step %lld, baseline %lld, %+.0f bytes/step\n",
               ev->watchdog == TRAINRUN_WATCHDOG_WARN ? "warning" : "limit", (long long)ev->allocated_bytes,
               (long long)ev->step, (long long)ev->baseline_bytes, ev->growth_per_step);
    else if (ev->kind == TRAINRUN_EVENT_CHECKPOINT)
        printf("saved %s (%s, %lld bytes)\n", ev->path, ev->reason, (long long)ev->bytes);
    else if (ev->kind == TRAINRUN_EVENT_WARNING)
        printf("warning: %s\n", ev->message);
}

static int fail(trainrun_trainer *t, int rc)
{
    fprintf(stderr, "custom_loop: %s: %s\n", trainrun_errstr(rc), trainrun_trainer_errmsg(t));
    trainrun_trainer_close(t);
    trainrun_data_close(val);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: custom_loop DIR [--stop-at STEP | --kill-at STEP]\n");
        return 2;
    }
    const char *dir = argv[1];
    const long stop_at = argc > 3 && strcmp(argv[2], "--stop-at") == 0 ? atol(argv[3]) : 0;
    const long kill_at = argc > 3 && strcmp(argv[2], "--kill-at") == 0 ? atol(argv[3]) : 0;
    mkdir(dir, 0777);
    char model[1024], tmp[1100], config[2048];
    snprintf(model, sizeof model, "%s/model.yaml", dir);
    snprintf(tmp, sizeof tmp, "%s.%ld", model, (long)getpid()); /* renamed into place: each rank reads it whole */
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        return 1;
    }
    /* dropout draws from the generator every step: the checkpoint carries its state, so a resume still matches */
    fprintf(f, "input: [%d]\nlayers:\n  - linear: {in: %d, out: 32}\n  - relu\n  - dropout: {p: 0.1}\n"
               "  - linear: {in: 32, out: %d}\n", D, D, K);
    if (fclose(f) != 0 || rename(tmp, model) != 0) {
        perror(model);
        return 1;
    }
    snprintf(config, sizeof config,
             "seed: 3\nmodel: {spec: %s}\noptim: {name: adamw, lr: 0.01}\n"
             "schedule: {name: cosine, warmup_steps: 5}\n"
             "ema: {enabled: true, decay: 0.9, start_step: 10}\n"
             "watchdog: {warmup_steps: 10, every_steps: 5}\n"
             "checkpoint: {every_steps: 10, every_seconds: 30, keep_last: 2, monitor: val_loss, save_top_k: 2}\n"
             "early_stopping: {monitor: val_loss, patience: 2}\n"
             "log: {every_steps: 10, progress: never}\n", model);

    trainrun_trainer *t = NULL;
    int rc = trainrun_trainer_open_yaml(config, NULL, 0, &t);
    if (rc != TRAINRUN_OK) return fail(t, rc);
    /* under torchrun (WORLD_SIZE > 1) the ranks join one group and train data-parallel; alone this joins nothing */
    int rank = 0, world = 1;
    if ((rc = trainrun_trainer_init_process_group(t)) != TRAINRUN_OK) return fail(t, rc);
    trainrun_trainer_rank(t, &rank, &world);
    if (rank > 0 && !freopen("/dev/null", "w", stdout)) return 1; /* rank 0 speaks for the group */
    if ((rc = trainrun_trainer_set_callback(t, on_event, NULL)) != TRAINRUN_OK) return fail(t, rc);
    /* DIR is the loop's run directory: its lock for as long as the trainer is open, and the newest checkpoint
     * from an earlier start (if any) resumed; the saves below go into it */
    int64_t step = 0;
    int resumed = 0;
    if ((rc = trainrun_trainer_open_dir(t, dir, &resumed)) != TRAINRUN_OK) return fail(t, rc);
    /* DIR/metrics.jsonl and metrics.csv as a run writes them: `trainrun plot DIR` draws this loop's curves */
    if ((rc = trainrun_trainer_open_log(t, STEPS)) != TRAINRUN_OK) return fail(t, rc);
    if (resumed) {
        trainrun_trainer_steps(t, &step);
        printf("resumed at step %lld\n", (long long)step);
    }
    current = t;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    make_blobs(7, N, x, y);
    make_blobs(11, NV, xv, yv);
    const trainrun_batch vview = {xv, TRAINRUN_FLOAT32, 2, {NV, D, 0, 0}, yv, TRAINRUN_INT64};
    if ((rc = trainrun_data_arrays(&vview, &val)) != TRAINRUN_OK) return fail(t, rc); /* copied */
    while (step < STEPS) {
        /* the batch of a step is a function of the step, so a resumed loop picks up the same data; each rank of
         * a group takes its share of it (the step's loss and counts come back as the whole batch's) */
        const int64_t share = BATCH / world, start = (step * BATCH) % N + rank * share;
        const trainrun_batch b = {x + start * D, TRAINRUN_FLOAT32, 2, {share, D, 0, 0}, y + start, TRAINRUN_INT64};
        double lr;
        trainrun_step_result r;
        int due = 0;
        /* the order that keeps every guarantee (trainrun.h, trainers): lr, step, EMA, evaluation and its monitor,
         * watchdog, checkpoint */
        if ((rc = trainrun_trainer_scheduled_lr(t, STEPS, N / BATCH, &lr)) != TRAINRUN_OK) return fail(t, rc);
        if ((rc = trainrun_trainer_set_lr(t, lr)) != TRAINRUN_OK) return fail(t, rc);
        if ((rc = trainrun_trainer_train_step(t, &b, &r)) != TRAINRUN_OK) return fail(t, rc);
        if ((rc = trainrun_trainer_update_ema(t)) != TRAINRUN_OK) return fail(t, rc);
        step++;
        printf("step %lld loss %.9g lr %.9g\n", (long long)step, r.loss, lr);
        trainrun_selection sel = {0};
        if (step % EVAL_EVERY == 0) { /* no_grad passes over the validation set, live and EMA weights */
            trainrun_eval_result v, vema;
            if ((rc = trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_LIVE, &v)) != TRAINRUN_OK)
                return fail(t, rc);
            if ((rc = trainrun_trainer_evaluate(t, val, TRAINRUN_VAL, TRAINRUN_WEIGHTS_EMA, &vema)) != TRAINRUN_OK)
                return fail(t, rc);
            /* checkpoint.monitor and early_stopping.monitor name val_loss: a new best makes the next
             * checkpoint_due say 1 (reason "best"); sel.stop ends the loop after this step's save */
            if ((rc = trainrun_trainer_monitor(t, "val_loss", v.loss, &sel)) != TRAINRUN_OK) return fail(t, rc);
            printf("val step %lld loss %.9g accuracy %.4f; EMA weights loss %.9g%s\n", (long long)step, v.loss,
                   v.accuracy, vema.loss, sel.best ? " (best)" : "");
        }
        rc = trainrun_trainer_watchdog(t, NULL); /* its reports come as events */
        if (rc != TRAINRUN_OK && rc != TRAINRUN_E_WATCHDOG) return fail(t, rc);
        const int watchdog_stop = rc == TRAINRUN_E_WATCHDOG; /* save and stop, as a run does */
        if (step == stop_at) trainrun_trainer_request_stop(t);
        rc = trainrun_trainer_checkpoint_due(t, &due);
        if (rc != TRAINRUN_OK && rc != TRAINRUN_E_STOPPED) return fail(t, rc);
        const int stopped = rc == TRAINRUN_E_STOPPED; /* a signal (or --stop-at): save and stop */
        if ((due || watchdog_stop || sel.stop) && (rc = trainrun_trainer_save(t, NULL, NULL, 0)) != TRAINRUN_OK)
            return fail(t, rc);
        if (sel.stop) {
            printf("stopped early: %s\n", sel.reason);
            break;
        }
        if (stopped || watchdog_stop) {
            if (watchdog_stop) fprintf(stderr, "custom_loop: %s\n", trainrun_trainer_errmsg(t));
            else printf("stopped after step %lld; checkpoint saved\n", (long long)step);
            trainrun_trainer_close(t);
            trainrun_data_close(val);
            return watchdog_stop ? 3 : 0;
        }
        if (step == kill_at) raise(SIGKILL);
    }
    const trainrun_batch all = {x, TRAINRUN_FLOAT32, 2, {N, D, 0, 0}, y, TRAINRUN_INT64};
    trainrun_step_result e, ema;
    trainrun_memory m;
    size_t grew = 0;
    if ((rc = trainrun_trainer_eval_step(t, &all, &e)) != TRAINRUN_OK) return fail(t, rc);
    if ((rc = trainrun_trainer_eval_step_ema(t, &all, &ema)) != TRAINRUN_OK) return fail(t, rc);
    if ((rc = trainrun_trainer_memory(t, &m)) != TRAINRUN_OK) return fail(t, rc);
    if ((rc = trainrun_trainer_memory_growth(t, NULL, 0, &grew)) != TRAINRUN_OK) return fail(t, rc);
    printf("eval loss %.6f accuracy %.4f; EMA weights loss %.6f accuracy %.4f\n", e.loss, e.accuracy, ema.loss,
           ema.accuracy);
    printf("memory %lld bytes in tensors (peak %lld); %zu (phase, size) keys grew since the watchdog's baseline\n",
           (long long)m.allocated_bytes, (long long)m.peak_bytes, grew);
    trainrun_trainer_close(t);
    trainrun_data_close(val);
    return 0;
}
