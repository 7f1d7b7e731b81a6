/*
 * test_trainer_dist.c -- a trainer in a data-parallel group (trainrun_trainer_init_process_group), two real
 * processes over c10d/Gloo: two ranks of 16 train as one process of 32 (losses to a relative 1e-5); a stop
 * requested on one rank stops both at the same step with one checkpoint, written by rank 0, saved by 2 ranks --
 * the pair started again resumes it and repeats the uninterrupted pair's losses bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"
#include "trainrun/trainrun.h"

TestSuite(trainer_dist, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

#define D 8
#define K 4
#define N 512
#define GLOBAL 32
#define STEPS 20

static float X[N * D];
static int64_t Y[N];

/* The config: a model with dropout (every step draws from each rank's generator) or without. */
static const char *config(int dropout)
{
    static char buf[1024];
    const char *model = support_path(dropout ? "dropout.yaml" : "plain.yaml");
    char text[256];
    snprintf(text, sizeof text, "input: [%d]\nlayers:\n  - linear: {in: %d, out: 32}\n  - relu\n%s"
             "  - linear: {in: 32, out: %d}\n", D, D, dropout ? "  - dropout: {p: 0.1}\n" : "", K);
    support_write_file(model, text);
    snprintf(buf, sizeof buf, "seed: 9\nmodel: {spec: %s}\noptim: {name: adamw, lr: 0.01}\n"
             "checkpoint: {every_seconds: 0, every_steps: 10, keep_last: 5}\nlog: {every_steps: 5, progress: never}\n"
             "dist: {timeout_seconds: 60}\n", model);
    return buf;
}

/* Each failing check in a process exits with its own code, so the parent names it. */
#define CHILD_CHECK(code, cond)                                                                       \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "check %d failed: %s (%s)\n", code, #cond, trainrun_trainer_errmsg(t)); \
            _exit(code);                                                                              \
        }                                                                                             \
    } while (0)

/* One process's loop: steps up to STEPS over its shard of each global batch (all of it alone), saving into dir
 * when the policy says so; rank `stopper` asks to stop after step `stop_after` (0: never). Its losses, "%a\n" per
 * step taken here, into losses_path. Exits: 0 done or stopped; 4 stopped (checkpoint_due said so); else a check. */
static void loop(const char *cfg, const char *dir, const char *losses_path, int stopper, int stop_after)
{
    trainrun_trainer *t = NULL;
    CHILD_CHECK(10, trainrun_trainer_open_yaml(cfg, NULL, 0, &t) == TRAINRUN_OK);
    CHILD_CHECK(11, trainrun_trainer_init_process_group(t) == TRAINRUN_OK);
    int rank = -1, world = -1, resumed = 0;
    CHILD_CHECK(12, trainrun_trainer_rank(t, &rank, &world) == TRAINRUN_OK);
    CHILD_CHECK(13, trainrun_trainer_open_dir(t, dir, &resumed) == TRAINRUN_OK);
    CHILD_CHECK(14, trainrun_trainer_open_log(t, STEPS) == TRAINRUN_OK);
    int64_t s = 0;
    trainrun_trainer_steps(t, &s);
    FILE *f = fopen(losses_path, "w");
    CHILD_CHECK(15, f != NULL);
    fprintf(f, "rank %d of %d from %lld\n", rank, world, (long long)s);
    const int64_t share = GLOBAL / world;
    for (; s < STEPS; s++) {
        const int64_t start = (s * GLOBAL) % N + rank * share;
        const trainrun_batch b = {X + start * D, TRAINRUN_FLOAT32, 2, {share, D, 0, 0}, Y + start, TRAINRUN_INT64};
        trainrun_step_result r;
        CHILD_CHECK(16, trainrun_trainer_train_step(t, &b, &r) == TRAINRUN_OK);
        CHILD_CHECK(17, r.samples == GLOBAL && r.accuracy >= 0 && r.accuracy <= 1); /* the counts are every rank's */
        fprintf(f, "%a\n", r.loss);
        if (rank == stopper && s + 1 == stop_after) trainrun_trainer_request_stop(t);
        int due = 0;
        const int rc = trainrun_trainer_checkpoint_due(t, &due);
        CHILD_CHECK(18, rc == TRAINRUN_OK || rc == TRAINRUN_E_STOPPED);
        if (due) CHILD_CHECK(19, trainrun_trainer_save(t, NULL, NULL, 0) == TRAINRUN_OK);
        if (rc == TRAINRUN_E_STOPPED) {
            fprintf(f, "stopped after %lld\n", (long long)s + 1);
            fclose(f);
            trainrun_trainer_close(t);
            _exit(4);
        }
    }
    fclose(f);
    trainrun_trainer_close(t);
    _exit(0);
}

/* Run `world` processes of loop() (world 1: no group) and wait for them; their exit codes into codes[]. */
static void run_group(int world, const char *cfg, const char *dir, const char *tag, int stopper, int stop_after,
                      int *codes)
{
    const int port = support_free_port();
    pid_t pids[2];
    for (int r = 0; r < world; r++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/losses-%s-%d.txt", support_tmpdir, tag, r);
        pids[r] = fork();
        cr_assert_geq(pids[r], 0);
        if (pids[r] == 0) {
            if (world > 1) support_dist_env(r, world, port);
            else unsetenv("WORLD_SIZE");
            loop(cfg, dir, path, stopper, stop_after);
        }
    }
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
}

/* The losses a process wrote: its header line into head, the losses into v (at most max); returns their count. */
static int read_losses(const char *tag, int rank, char *head, size_t head_n, double *v, int max)
{
    char path[1200], line[256];
    snprintf(path, sizeof path, "%s/losses-%s-%d.txt", support_tmpdir, tag, rank);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    cr_assert(fgets(head, (int)head_n, f));
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max)
        if (strncmp(line, "stopped", 7) != 0) v[n++] = strtod(line, NULL);
    fclose(f);
    return n;
}

Test(trainer_dist, two_ranks_of_16_train_as_one_process_of_32)
{
    support_make_blobs(N, D, K, 3, X, Y);
    int codes[2];
    run_group(1, config(0), support_path("one"), "one", -1, 0, codes);
    cr_assert_eq(codes[0], 0, "one process: exit %d (the failed check)", codes[0]);
    run_group(2, config(0), support_path("pair"), "pair", -1, 0, codes);
    cr_assert(codes[0] == 0 && codes[1] == 0, "ranks exited %d, %d (the failed checks)", codes[0], codes[1]);
    char head[128];
    static double one[STEPS], r0[STEPS], r1[STEPS];
    cr_assert_eq(read_losses("one", 0, head, sizeof head, one, STEPS), STEPS);
    cr_expect_str_eq(head, "rank 0 of 1 from 0\n");
    cr_assert_eq(read_losses("pair", 0, head, sizeof head, r0, STEPS), STEPS);
    cr_expect_str_eq(head, "rank 0 of 2 from 0\n");
    cr_assert_eq(read_losses("pair", 1, head, sizeof head, r1, STEPS), STEPS);
    cr_expect_str_eq(head, "rank 1 of 2 from 0\n");
    for (int s = 0; s < STEPS; s++) {
        cr_expect_eq(r0[s], r1[s], "step %d: the ranks' all-reduced losses differ: %a vs %a", s + 1, r0[s], r1[s]);
        cr_expect_leq(fabs(r0[s] - one[s]), 1e-5 * fabs(one[s]), "step %d: pair %.9g vs one process %.9g", s + 1,
                      r0[s], one[s]);
    }
    cr_expect_lt(one[STEPS - 1], 0.5 * one[0], "it trains: %g -> %g", one[0], one[STEPS - 1]);
    /* rank 0 alone wrote the directory: the checkpoints and the log */
    struct stat st;
    cr_expect_eq(stat(support_path("pair/checkpoints/step-0000000020/MANIFEST.json"), &st), 0);
    cr_expect_eq(support_count_records(support_path("pair"), "\"type\":\"train\""), 4);
}

Test(trainer_dist, a_stop_on_one_rank_stops_both_and_the_pair_resumes_bit_for_bit)
{
    support_make_blobs(N, D, K, 3, X, Y);
    int codes[2];
    run_group(2, config(1), support_path("whole"), "whole", -1, 0, codes);
    cr_assert(codes[0] == 0 && codes[1] == 0, "ranks exited %d, %d", codes[0], codes[1]);
    /* rank 1 asks after step 12; the ranks agree at step 13's all-reduce and both save step 13 and stop */
    run_group(2, config(1), support_path("parts"), "part1", 1, 12, codes);
    cr_assert(codes[0] == 4 && codes[1] == 4, "ranks exited %d, %d, not both 4 (stopped)", codes[0], codes[1]);
    struct stat st;
    cr_expect_eq(stat(support_path("parts/checkpoints/step-0000000013/MANIFEST.json"), &st), 0);
    char trainer_json[4096];
    support_read_file(support_path("parts/checkpoints/step-0000000013/trainer.json"), trainer_json,
                      sizeof trainer_json);
    cr_expect(strstr(trainer_json, "\"world_size\":\t\"2\""), "trainer.json does not say 2 ranks saved it");
    run_group(2, config(1), support_path("parts"), "part2", -1, 0, codes);
    cr_assert(codes[0] == 0 && codes[1] == 0, "resumed ranks exited %d, %d", codes[0], codes[1]);
    char head[128];
    static double whole[STEPS], part[STEPS];
    cr_assert_eq(read_losses("whole", 1, head, sizeof head, whole, STEPS), STEPS);
    for (int r = 0; r < 2; r++) {
        const int n = read_losses("part2", r, head, sizeof head, part, STEPS);
        char want[64];
        snprintf(want, sizeof want, "rank %d of 2 from 13\n", r);
        cr_expect_str_eq(head, want);
        cr_assert_eq(n, STEPS - 13);
        /* dropout draws every step (here the ranks' generators are equal: one seed, the same draws, as in a run) */
        for (int s = 13; s < STEPS; s++)
            cr_expect_eq(part[s - 13], whole[s], "rank %d step %d: %a vs %a", r, s + 1, part[s - 13], whole[s]);
    }
}
