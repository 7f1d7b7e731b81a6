/*
 * test_tokens.c -- a TorchScript module over token ids: int64 [N, T] in, [N, T, C] logits out, per-position targets
 * [N, T] with ignore_index -100. The loss at the initial weights and after each of two SGD steps, and the correct
 * counts, equal what PyTorch computed for the same archive and batch (tests/data/tokens/make_token_tagger.py wrote
 * token_tagger.pt and token_tagger.expected; no Python here).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "trainrun/trainrun.h"

TestSuite(tokens, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 120);

#define DIR TR_SOURCE_DIR "/tests/data/tokens/"
enum { NB = 3, T = 4, C = 5 };

typedef struct expected {
    int64_t ids[NB * T], targets[NB * T];
    double loss[3];
    int64_t correct[3];
} expected;

static void read_expected(expected *e)
{
    FILE *f = fopen(DIR "token_tagger.expected", "r");
    cr_assert_not_null(f);
    char word[32];
    cr_assert_eq(fscanf(f, "%31s", word), 1);
    cr_assert_str_eq(word, "ids");
    for (int i = 0; i < NB * T; i++) cr_assert_eq(fscanf(f, "%lld", (long long *)&e->ids[i]), 1);
    cr_assert_eq(fscanf(f, "%31s", word), 1);
    cr_assert_str_eq(word, "targets");
    for (int i = 0; i < NB * T; i++) cr_assert_eq(fscanf(f, "%lld", (long long *)&e->targets[i]), 1);
    for (int s = 0; s < 3; s++) {
        int step;
        char hex[64];
        cr_assert_eq(fscanf(f, " loss %d %63s correct %lld", &step, hex, (long long *)&e->correct[s]), 3);
        cr_assert_eq(step, s);
        e->loss[s] = strtod(hex, NULL); /* float.hex() is C99's %a */
    }
    fclose(f);
}

Test(tokens, token_ids_and_per_position_targets_match_pytorch)
{
    expected e;
    read_expected(&e);
    const char *yaml = "seed: 0\nmodel: {torchscript: " DIR "token_tagger.pt, input_shape: [4]}\n"
                       "optim: {name: sgd, lr: 0.5}\n";
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    int64_t oshape[8];
    int ondim = 0;
    cr_assert_eq(trainrun_trainer_output_shape(t, oshape, &ondim), TRAINRUN_OK);
    cr_assert_eq(ondim, 2);
    cr_expect(oshape[0] == T && oshape[1] == C, "[%lld, %lld]", (long long)oshape[0], (long long)oshape[1]);

    trainrun_batch b;
    memset(&b, 0, sizeof b);
    b.x = e.ids;
    b.x_dtype = TRAINRUN_INT64;
    b.ndim = 2;
    b.shape[0] = NB;
    b.shape[1] = T;
    b.y = e.targets;
    b.y_dtype = TRAINRUN_INT64;
    int64_t kept = 0;
    for (int i = 0; i < NB * T; i++) kept += e.targets[i] != TRAINRUN_IGNORE_INDEX;

    trainrun_step_result r;
    cr_assert_eq(trainrun_trainer_eval_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_expect(fabs(r.loss - e.loss[0]) <= 1e-6 * fabs(e.loss[0]), "eval loss %a, PyTorch %a", r.loss, e.loss[0]);
    for (int s = 0; s < 3; s++) {
        /* PyTorch's step s computed the loss before its update: so does a train step */
        if (s < 2) {
            cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        } else {
            cr_assert_eq(trainrun_trainer_eval_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
        }
        cr_expect(fabs(r.loss - e.loss[s]) <= 1e-6 * fabs(e.loss[s]), "step %d: loss %a, PyTorch %a", s, r.loss,
                  e.loss[s]);
        cr_expect_eq(r.correct, e.correct[s], "step %d", s);
        cr_expect(fabs(r.accuracy - (double)e.correct[s] / (double)kept) < 1e-15);
    }
    cr_expect_neq(e.loss[2], e.loss[0], "the steps must have changed the loss");

    /* predictions: [N, T, C] logits into caller memory */
    float logits[NB * T * C];
    cr_assert_eq(trainrun_trainer_predict(t, &b, logits, NB * T * C), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    int64_t correct = 0;
    for (int i = 0; i < NB * T; i++) {
        int best = 0;
        for (int c = 1; c < C; c++)
            if (logits[i * C + c] > logits[i * C + best]) best = c;
        correct += e.targets[i] != TRAINRUN_IGNORE_INDEX && best == e.targets[i];
    }
    cr_expect_eq(correct, e.correct[2]);

    /* float features for a model of token ids: refused before the forward, the trainer stays usable */
    float fx[NB * T] = {0};
    b.x = fx;
    b.x_dtype = TRAINRUN_FLOAT32;
    cr_expect_neq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK);
    b.x = e.ids;
    b.x_dtype = TRAINRUN_INT64;
    cr_expect_eq(trainrun_trainer_eval_step(t, &b, &r), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    trainrun_trainer_close(t);
}
