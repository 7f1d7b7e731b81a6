/*
 * test_text.c -- language modelling: the text / tokens readers (every error names the file and byte offset), the
 * vocabulary, training windows as a pure function of (seed, step), a tiny GPT (tests/data/lm/tiny_gpt.pt, made by
 * models/gpt.py) trained from C with bits per byte = nats / ln 2 in its records, an exact resume, sampling
 * (same seed -> same text; top-k 1 = argmax) and the start-up refusals (block size over the position table, a text
 * too short for a window, a checkpoint of another vocabulary). A generated text, no package needed.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "text.h"
#include "trace.h"
#include "trainrun/trainrun.h"

TestSuite(text, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 300);

#define TINY TR_SOURCE_DIR "/tests/data/lm/tiny_gpt.pt"

/* ------------------------------------------------------------------------------------------------ readers */

Test(text, utf8_decoding_is_strict_and_names_the_byte)
{
    const unsigned char ok[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z"; /* a é € 😀 z */
    uint32_t cp[16];
    int64_t n = 0;
    tr_error err = {0};
    cr_assert_eq(tr_utf8_decode("t.txt", ok, sizeof ok - 1, cp, &n, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(n, 5);
    cr_expect(cp[0] == 'a' && cp[1] == 0xe9 && cp[2] == 0x20ac && cp[3] == 0x1f600 && cp[4] == 'z');
    char enc[4];
    cr_expect_eq(tr_utf8_encode(0x20ac, enc), 3);
    cr_expect(memcmp(enc, "\xe2\x82\xac", 3) == 0);
    const struct {
        const char *bytes;
        const char *msg;
    } bad[] = {
        {"ab\xc3(", "t.txt: byte 2: invalid UTF-8 (0xc3 starts a 2-byte sequence but byte 3 is 0x28)"},
        {"abc\x80", "t.txt: byte 3: invalid UTF-8 (0x80 cannot start a character (a continuation byte"},
        {"\xe0\x80\xaf", "t.txt: byte 0: invalid UTF-8 (overlong encoding of U+002F)"},
        {"x\xed\xa0\x80", "t.txt: byte 1: invalid UTF-8 (U+D800 is a UTF-16 surrogate)"},
        {"xy\xf0\x9f", "t.txt: byte 2: invalid UTF-8 (0xf0 starts a 4-byte sequence but the file ends after 2)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(tr_utf8_decode("t.txt", (const unsigned char *)bad[i].bytes, strlen(bad[i].bytes), cp, &n, &err),
                     TR_E_CONFIG);
        cr_expect(strstr(err.msg, bad[i].msg), "case %zu: %s", i, err.msg);
    }
}

Test(text, token_files_are_little_endian_and_checked)
{
    const unsigned char b[] = {0x01, 0x00, 0x34, 0x12, 0xff, 0xff, 0x07};
    uint32_t ids[4];
    tr_error err = {0};
    cr_assert_eq(tr_tokens_parse("train.bin", b, 6, 2, 0, ids, &err), TR_OK, "%s", err.msg);
    cr_expect(ids[0] == 1 && ids[1] == 0x1234 && ids[2] == 0xffff);
    cr_assert_eq(tr_tokens_parse("train.bin", b, 4, 4, 0, ids, &err), TR_OK);
    cr_expect_eq(ids[0], 0x12340001u);
    cr_expect_eq(tr_tokens_parse("train.bin", b, 7, 2, 0, ids, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "train.bin: byte 6: truncated: 7 bytes are not a whole number of 2-byte uint16 tokens"),
              "%s", err.msg);
    cr_expect_eq(tr_tokens_parse("val.bin", b, 6, 2, 0x1000, ids, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "val.bin: byte 2: token id 4660 is outside the vocabulary of 4096"), "%s", err.msg);
}

Test(text, vocabulary_round_trips_and_untrusted_json_is_checked)
{
    const uint32_t cps[] = {'b', 'a', 0xe9, 'a', '\n', 0x20ac};
    tr_vocab v, w;
    tr_error err = {0};
    cr_assert_eq(tr_vocab_build_chars(cps, 6, &v, &err), TR_OK);
    cr_assert_eq(v.size, 5);
    cr_expect(v.chars[0] == '\n' && v.chars[1] == 'a' && v.chars[2] == 'b' && v.chars[3] == 0xe9 && v.chars[4] == 0x20ac);
    cr_expect_eq(tr_vocab_char_id(&v, 0xe9), 3);
    cr_expect_eq(tr_vocab_char_id(&v, 'z'), -1);
    char *json = tr_vocab_to_json(&v);
    cr_assert_not_null(json);
    cr_assert_eq(tr_vocab_from_json(json, "vocab.json", &w, &err), TR_OK, "%s", err.msg);
    cr_expect(tr_vocab_equal(&v, &w));
    tr_vocab_free(&w); /* tr_vocab_from_json overwrites its out: the next calls below would leak this one */
    free(json);
    int64_t ids[16], n = 0;
    cr_assert_eq(tr_vocab_encode(&v, "ab\xc3\xa9", 4, ids, &n, &err), TR_OK);
    cr_expect(n == 3 && ids[0] == 1 && ids[1] == 2 && ids[2] == 3);
    char text[16];
    cr_expect_eq(tr_vocab_decode(&v, ids, n, text, sizeof text), 4);
    cr_expect_str_eq(text, "ab\xc3\xa9");
    cr_expect_eq(tr_vocab_encode(&v, "az", 2, ids, &n, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "--prompt: byte 1: character U+007A is not in the vocabulary of 5 characters"), "%s",
              err.msg);
    cr_expect_eq(tr_vocab_from_json("{\"kind\":\"chars\",\"size\":2,\"chars\":\"ba\"}", "v.json", &w, &err),
                 TR_E_CONFIG);
    cr_expect(strstr(err.msg, "v.json: field chars: character 1 (U+0061) is not above the one before it"), "%s",
              err.msg);
    cr_expect_eq(tr_vocab_from_json("{\"kind\":\"bytes\",\"size\":255}", "v.json", &w, &err), TR_E_CONFIG);
    cr_expect(strstr(err.msg, "v.json: field size: a bytes vocabulary has 256 tokens"), "%s", err.msg);
    tr_vocab_free(&v);
    tr_vocab_free(&w);
}

Test(text, window_starts_are_a_pure_function_of_seed_and_index)
{
    const int64_t n = 1000, block = 16;
    int64_t seen_first = -1;
    int differ = 0, zero = 0, top = 0;
    for (uint64_t g = 0; g < 20000; g++) {
        const int64_t s = tr_window_start(7, g, n, block);
        cr_assert(s >= 0 && s < n - block, "window %llu starts at %lld", (unsigned long long)g, (long long)s);
        cr_assert_eq(s, tr_window_start(7, g, n, block)); /* again: the same */
        differ += s != tr_window_start(8, g, n, block);
        zero += s == 0;
        top += s == n - block - 1;
        if (g == 0) seen_first = s;
    }
    printf("window 0 of seed 7 starts at %lld\n", (long long)seen_first);
    cr_expect_gt(differ, 19900, "another seed gives other windows (%d of 20000 differ)", differ);
    cr_expect(zero > 0 && top > 0, "both ends of the range are drawn (0: %d, last: %d)", zero, top);
    /* a window's targets are its inputs shifted by one */
    const uint32_t tok[] = {10, 11, 12, 13, 14, 15};
    const int64_t starts[] = {2, 0};
    int64_t x[6], y[6];
    tr_window_cut(tok, starts, 2, 3, x, y);
    const int64_t ex[] = {12, 13, 14, 10, 11, 12}, ey[] = {13, 14, 15, 11, 12, 13};
    cr_expect(memcmp(x, ex, sizeof ex) == 0 && memcmp(y, ey, sizeof ey) == 0);
}

/* ------------------------------------------------------------------------------------------------ runs */

/* ~22 KB of text with 30-odd distinct characters, the same bytes every time. */
static void write_corpus(const char *name, int lines, const char *salt)
{
    static const char *const words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and",
                                        "sleeps", "under", "a", "tree", "while", "rain", "falls"};
    FILE *f = fopen(support_path(name), "w");
    cr_assert_not_null(f);
    uint64_t s = 12345;
    for (int l = 0; l < lines; l++) {
        for (int w = 0; w < 8; w++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            fprintf(f, "%s%s", w ? " " : "", words[(s >> 33) % 16]);
        }
        fprintf(f, "%s.\n", salt);
    }
    fclose(f);
}

static void write_config(const char *name, const char *extra)
{
    char text[4096];
    snprintf(text, sizeof text,
             "seed: 3\n"
             "data: {format: text, root: %s, train_text: corpus.txt, vocab: bytes, block_size: 16, val_fraction: 0.1,"
             " val_windows: 8, prefetch: true}\n"
             "model: {torchscript: " TINY "}\n"
             "optim: {name: adamw, lr: 3.0e-3, weight_decay: 0.1, no_decay: auto, grad_clip_norm: 1.0}\n"
             "schedule: {name: cosine, warmup_steps: 5}\n"
             "train: {max_steps: 30, batch_size: 4}\n"
             "eval: {every_steps: 10, every_epoch: false, batch_size: 8, test_at_end: false, weights: both}\n"
             "ema: {enabled: true, decay: 0.9}\n"
             "checkpoint: {every_steps: 15, every_seconds: 0}\n"
             "watchdog: {warmup_steps: 10, every_steps: 5}\n"
             "log: {every_steps: 5, progress: never}\n"
             "run: {dir: %s}\n%s",
             support_tmpdir, support_tmpdir, extra);
    support_write_file(support_path(name), text);
}

static void read_bytes(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(*len + 1);
    cr_assert_eq(fread(*buf, 1, *len, f), *len);
    (*buf)[*len] = '\0'; /* a string too, for strstr */
    fclose(f);
}

Test(text, tiny_gpt_trains_on_text_with_bits_per_byte_and_resumes_exactly)
{
    write_corpus("corpus.txt", 400, "");
    write_config("lm.yaml", "");
    char args[2048], out[16384];
    /* a constant lr after warm-up: the schedule then does not depend on train.max_steps, which the halves below
     * change (cosine decays over the planned steps) */
    snprintf(args, sizeof args, "%s run.name=whole schedule.name=constant", support_path("lm.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    const char *whole = support_path("whole");
    double loss[8], bits[8], ppl[8], tokens[8], steps[8];
    const int n = support_read_field(whole, "eval", "loss", loss, steps, 8);
    cr_assert_eq(n, 6, "3 evaluations, live and EMA weights: %d", n);
    cr_assert_eq(support_read_field(whole, "eval", "bpb", bits, NULL, 8), 6);
    cr_assert_eq(support_read_field(whole, "eval", "perplexity", ppl, NULL, 8), 6);
    cr_assert_eq(support_read_field(whole, "eval", "tokens", tokens, NULL, 8), 6);
    for (int i = 0; i < n; i++) {
        cr_expect(fabs(bits[i] - loss[i] / log(2.0)) <= 1e-12 * bits[i], "bpb %.17g, loss %.17g", bits[i], loss[i]);
        cr_expect(fabs(ppl[i] - exp(loss[i])) <= 1e-12 * ppl[i], "perplexity %.17g, loss %.17g", ppl[i], loss[i]);
        cr_expect_eq(tokens[i], 8 * 16, "8 windows of 16 tokens");
    }
    /* an untrained model of 256 bytes starts near ln 256 = 5.545 nats; 30 steps must have learnt something */
    printf("val loss at steps 10, 20, 30: %.4f %.4f %.4f nats\n", loss[0], loss[2], loss[4]);
    cr_expect(loss[0] < log(256.0) && loss[0] > 2.0, "step 10: %.4f", loss[0]);
    cr_expect_lt(loss[4], loss[0], "the loss went down: %.4f -> %.4f", loss[0], loss[4]);
    char *vocab = NULL;
    size_t vlen = 0;
    read_bytes(support_path("whole/checkpoints/step-0000000030/vocab.json"), &vocab, &vlen);
    cr_expect(strstr(vocab, "\"bytes\""), "%s", vocab);
    free(vocab);

    /* the same run in two processes, 15 steps then the rest: the same windows, byte-identical weights */
    snprintf(args, sizeof args, "%s run.name=halves train.max_steps=15 schedule.name=constant", support_path("lm.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    snprintf(args, sizeof args, "%s run.name=halves schedule.name=constant", support_path("lm.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "resum"), "%s", out);
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    read_bytes(support_path("whole/checkpoints/step-0000000030/model.safetensors"), &a, &la);
    read_bytes(support_path("halves/checkpoints/step-0000000030/model.safetensors"), &b, &lb);
    cr_expect(la == lb && memcmp(a, b, la) == 0, "final parameters differ after the resume");
    free(a);
    free(b);
    double loss2[8];
    cr_assert_eq(support_read_field(support_path("halves"), "eval", "loss", loss2, NULL, 8), 6);
    cr_expect_eq(loss2[4], loss[4], "final val loss %.17g vs %.17g", loss2[4], loss[4]);

    /* sampling: same seed, same text; a prompt is continued */
    char s1[8192], s2[8192], s3[8192];
    snprintf(args, sizeof args, "sample %s --tokens 60 --seed 11 --temperature 0.9 --top-k 20", whole);
    cr_assert_eq(support_cli(args, s1, sizeof s1), 0, "%s", s1);
    cr_assert_eq(support_cli(args, s2, sizeof s2), 0, "%s", s2);
    cr_expect_str_eq(s1, s2);
    snprintf(args, sizeof args, "sample %s --tokens 60 --seed 12 --temperature 0.9 --top-k 20", whole);
    cr_assert_eq(support_cli(args, s3, sizeof s3), 0, "%s", s3);
    cr_expect_str_neq(s1, s3, "another seed, other text");
    /* which weights it samples with is said, and can be chosen: the run has an EMA, the default */
    cr_expect(strstr(s1, ", EMA weights, 60 tokens") != NULL, "%s", s1);
    snprintf(args, sizeof args, "sample %s --tokens 60 --seed 11 --temperature 0.9 --top-k 20 --weights live", whole);
    cr_assert_eq(support_cli(args, s3, sizeof s3), 0, "%s", s3);
    cr_expect(strstr(s3, ", live weights, 60 tokens") != NULL, "%s", s3);
    cr_expect_str_neq(s1, s3, "the live weights are not the EMA's (decay 0.9 after 30 steps)");
    snprintf(args, sizeof args, "sample %s --weights best", whole);
    cr_expect_eq(support_cli(args, s3, sizeof s3), 2, "%s", s3);
    snprintf(args, sizeof args, "sample %s/checkpoints/step-0000000030 --tokens 30 --prompt 'the lazy' --seed 1",
             whole);
    cr_assert_eq(support_cli(args, s3, sizeof s3), 0, "%s", s3);
    cr_expect(strstr(s3, "\nthe lazy"), "the output starts with the prompt: %s", s3);
    snprintf(args, sizeof args, "sample %s --prompt 'caf\xc3\xa9' --tokens 3", whole);
    cr_expect_eq(support_cli(args, s3, sizeof s3), 0, "bytes take any text: %s", s3);
}

Test(text, generate_is_deterministic_and_top_k_1_is_the_argmax)
{
    const char *yaml = "seed: 0\nmodel: {torchscript: " TINY ", input_shape: [16]}\noptim: {name: sgd, lr: 0.5}\n";
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, NULL, 0, &t), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    /* train a few steps on a repeating pattern so the logits are far from uniform */
    int64_t x[4 * 16], y[4 * 16];
    for (int i = 0; i < 4 * 16; i++) {
        x[i] = 'a' + (i % 16) % 5;
        y[i] = 'a' + (i % 16 + 1) % 5;
    }
    trainrun_batch b;
    memset(&b, 0, sizeof b);
    b.x = x;
    b.x_dtype = TRAINRUN_INT64;
    b.ndim = 2;
    b.shape[0] = 4;
    b.shape[1] = 16;
    b.y = y;
    b.y_dtype = TRAINRUN_INT64;
    trainrun_step_result r;
    for (int s = 0; s < 5; s++) cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK);
    const int64_t prompt[3] = {'a', 'b', 'c'};
    int64_t g1[24], g2[24], greedy[24];
    cr_assert_eq(trainrun_trainer_generate(t, prompt, 3, 24, 1.0, 0, 99, g1), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_generate(t, prompt, 3, 24, 1.0, 0, 99, g2), TRAINRUN_OK);
    cr_expect(memcmp(g1, g2, sizeof g1) == 0, "same seed, same ids");
    /* top-k 1 = the argmax of predict's logits at the last position, fed back: 24 tokens, past the block of 16 */
    cr_assert_eq(trainrun_trainer_generate(t, prompt, 3, 24, 0.7, 1, 5, greedy), TRAINRUN_OK);
    int64_t ctx[64];
    int64_t len = 3;
    memcpy(ctx, prompt, sizeof prompt);
    float logits[16 * 256];
    for (int k = 0; k < 24; k++) {
        const int64_t tlen = len < 16 ? len : 16;
        trainrun_batch p;
        memset(&p, 0, sizeof p);
        p.x = ctx + len - tlen;
        p.x_dtype = TRAINRUN_INT64;
        p.ndim = 2;
        p.shape[0] = 1;
        p.shape[1] = tlen;
        /* the trainer was opened for windows of 16: shorter contexts are what generate feeds; predict takes 16 */
        if (tlen < 16) {
            ctx[len] = greedy[k];
            len++;
            continue;
        }
        cr_assert_eq(trainrun_trainer_predict(t, &p, logits, sizeof logits / sizeof logits[0]), TRAINRUN_OK, "%s",
                     trainrun_trainer_errmsg(t));
        const float *last = logits + 15 * 256;
        int best = 0;
        for (int c = 1; c < 256; c++)
            if (last[c] > last[best]) best = c;
        cr_expect_eq(greedy[k], best, "token %d: top-k 1 drew %lld, the argmax is %d", k, (long long)greedy[k], best);
        ctx[len++] = greedy[k];
    }
    /* refusals: the trainer stays usable */
    cr_expect_eq(trainrun_trainer_generate(t, prompt, 3, 4, 0.0, 0, 1, g1), TRAINRUN_E_INVALID);
    const int64_t bad[1] = {256};
    cr_expect_eq(trainrun_trainer_generate(t, bad, 1, 4, 1.0, 0, 1, g1), TRAINRUN_E_INVALID);
    cr_expect(strstr(trainrun_trainer_errmsg(t), "prompt token 0 is 256, outside [0, 256)"), "%s",
              trainrun_trainer_errmsg(t));
    cr_expect_eq(trainrun_trainer_generate(t, prompt, 3, 4, 1.0, 0, 1, g1), TRAINRUN_OK);
    trainrun_trainer_close(t);
}

Test(text, refusals_name_the_file_and_exit_2)
{
    write_corpus("corpus.txt", 400, "");
    write_config("lm.yaml", "");
    char args[2048], out[16384];
    /* a window longer than the model's position table (16) */
    snprintf(args, sizeof args, "%s run.name=long data.block_size=32", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "tiny_gpt.pt: forward fails on a batch of shape [2, 32] (2 samples of the data's shape): "
                          "RuntimeError: AssertionError: sequence longer than the position table (block_size)"),
              "%s", out);
    /* a text too short for one window */
    support_write_file(support_path("short.txt"), "too short\n");
    snprintf(args, sizeof args, "%s run.name=short data.train_text=short.txt", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "short.txt: the training split has 9 tokens, too short for one window of data.block_size 16"),
              "%s", out);
    /* invalid UTF-8 with a character vocabulary: file and byte offset, exit 2 (the user's input) */
    support_write_file(support_path("bad.txt"), "hello world, this is text long enough for a window \xff and more");
    snprintf(args, sizeof args, "%s run.name=bad data.train_text=bad.txt data.vocab=chars", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    char want[1200]; /* led by the config key that named the file, then the file */
    snprintf(want, sizeof want, "data.train_text: %s: byte 51: invalid UTF-8 (0xff cannot start a character)",
             support_path("bad.txt"));
    cr_expect(strstr(out, want), "'%s' in %s", want, out);
    snprintf(want, sizeof want, "data.train_text: %s: the training split has 9 tokens", support_path("short.txt"));
    snprintf(args, sizeof args, "%s run.name=short data.train_text=short.txt", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, want), "'%s' in %s", want, out);
    snprintf(args, sizeof args, "%s run.name=none data.train_text=nothing.txt", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    snprintf(want, sizeof want, "data.train_text: %s: ", support_path("nothing.txt"));
    cr_expect(strstr(out, want), "'%s' in %s", want, out);
    /* a checkpoint of another corpus: trained on one character set, resumed on another */
    snprintf(args, sizeof args, "%s run.name=corpus data.vocab=chars train.max_steps=5 checkpoint.every_steps=5",
             support_path("lm.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    write_corpus("other.txt", 400, " ZQX");
    snprintf(args, sizeof args, "%s run.name=corpus data.vocab=chars train.max_steps=10 data.train_text=other.txt",
             support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "checkpoints/step-0000000005/vocab.json: the weights were trained with another vocabulary"),
              "%s", out);
}

Test(text, tokens_format_reads_uint16_files)
{
    /* the corpus's bytes as uint16 token ids, with a separate val.bin */
    write_corpus("corpus.txt", 200, "");
    char *text = NULL;
    size_t len = 0;
    read_bytes(support_path("corpus.txt"), &text, &len);
    FILE *tr = fopen(support_path("train.bin"), "wb"), *va = fopen(support_path("val.bin"), "wb");
    for (size_t i = 0; i < len; i++) {
        const unsigned char le[2] = {(unsigned char)text[i], 0};
        fwrite(le, 1, 2, i < len - 400 ? tr : va);
    }
    fclose(tr);
    fclose(va);
    free(text);
    write_config("tok.yaml", "");
    char args[2048], out[16384];
    snprintf(args, sizeof args, "%s run.name=tok data.format=tokens data.train_tokens=train.bin "
             "data.val_tokens=val.bin train.max_steps=10", support_path("tok.yaml"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    double bits[4], tokens[4];
    cr_assert_eq(support_read_field(support_path("tok"), "eval", "bits_per_token", bits, NULL, 4), 2);
    cr_assert_eq(support_read_field(support_path("tok"), "eval", "tokens", tokens, NULL, 4), 2);
    cr_expect_eq(tokens[0], 8 * 16);
    snprintf(args, sizeof args, "sample %s --tokens 5 --prompt '116 104'", support_path("tok"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "\n116 104 "), "ids in, ids out: %s", out);
    /* a truncated token file */
    FILE *f = fopen(support_path("odd.bin"), "ab");
    fwrite("\x01\x00\x02\x00\x03", 1, 5, f);
    fclose(f);
    snprintf(args, sizeof args, "%s run.name=odd data.format=tokens data.train_tokens=odd.bin", support_path("tok.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    char want[1200]; /* led by the config key that named the file: the training or the validation tokens */
    snprintf(want, sizeof want, "data.train_tokens: %s: byte 4: truncated: 5 bytes are not a whole number of 2-byte "
             "uint16 tokens", support_path("odd.bin"));
    cr_expect(strstr(out, want), "'%s' in %s", want, out);
    snprintf(args, sizeof args, "%s run.name=odd data.format=tokens data.train_tokens=train.bin data.val_tokens=odd.bin",
             support_path("tok.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    snprintf(want, sizeof want, "data.val_tokens: %s: byte 4: truncated", support_path("odd.bin"));
    cr_expect(strstr(out, want), "'%s' in %s", want, out);
}

/* The final-parameter checksum of a 2-step run of lm.yaml with `extra` overrides (its --trace). */
static uint32_t final_crc(const char *name, const char *extra)
{
    char args[2048], out[16384], trace[512];
    snprintf(trace, sizeof trace, "%s.trace", support_path(name));
    snprintf(args, sizeof args, "%s run.name=%s train.max_steps=2 %s --trace '%s'", support_path("lm.yaml"), name,
             extra, trace);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    tr_trace tr = {0};
    tr_error err = {0};
    cr_assert_eq(tr_trace_read(trace, &tr, &err), TR_OK, "%s", err.msg);
    cr_assert(tr.has_final, "%s", trace);
    const uint32_t crc = tr.params_crc32;
    tr_trace_free(&tr);
    return crc;
}

/* model.init_method: the archive's init_weights (models/gpt.py) draws the weights from `seed` at start-up -- the
 * same seed, the same weights; another seed, other weights; without it, the archive's own -- and a method that is
 * missing, takes arguments or is not a name is refused at start-up with exit 2. (That the drawn weights equal
 * PyTorch's torch.manual_seed(seed); m.init_weights() is test_parity's GPT case, bit for bit over 200 steps.) */
Test(text, init_method_draws_the_weights_from_the_seed)
{
    write_corpus("corpus.txt", 400, "");
    write_config("lm.yaml", "");
    const uint32_t a = final_crc("a", "seed=5 model.init_method=init_weights");
    const uint32_t b = final_crc("b", "seed=5 model.init_method=init_weights");
    const uint32_t c = final_crc("c", "seed=6 model.init_method=init_weights");
    const uint32_t d = final_crc("d", "seed=5");
    cr_log_info("params_crc32: seed 5 %08x, again %08x, seed 6 %08x, archive's weights %08x", a, b, c, d);
    cr_expect_eq(a, b, "the same seed drew other weights");
    cr_expect_neq(a, c, "seeds 5 and 6 drew the same weights");
    cr_expect_neq(a, d, "init_weights changed nothing");

    char args[2048], out[16384];
    snprintf(args, sizeof args, "%s run.name=e model.init_method=reset", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "tiny_gpt.pt: model.init_method: the module has no method 'reset' (define it in the "
                          "nn.Module and mark it @torch.jit.export before scripting)"), "%s", out);
    snprintf(args, sizeof args, "%s run.name=f model.init_method=forward", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "tiny_gpt.pt: model.init_method: method 'forward' must take no arguments besides self"),
              "%s", out);
    snprintf(args, sizeof args, "%s run.name=g model.init_method=9lives", support_path("lm.yaml"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "model.init_method: '9lives' is not a method name"), "%s", out);
}

/* A trainer of lm.yaml (chars) over `overrides` with a callback-free setup; NULL-checked. */
static trainrun_trainer *lm_trainer(const char *const *overrides, int n)
{
    trainrun_trainer *t = NULL;
    cr_assert_eq(trainrun_trainer_open(support_path("lm.yaml"), overrides, n, &t), TRAINRUN_OK, "%s",
                 trainrun_trainer_errmsg(t));
    return t;
}

/* A trainer's loop over the config's text (open_data, next_batch) leaves vocab.json in its run directory and its
 * checkpoints, so `trainrun sample DIR` decodes them as a run's; a checkpoint of another corpus's vocabulary is
 * refused whichever of open_dir and open_data comes first, and its vocab.json is left as it was. */
Test(text, a_trainers_run_directory_keeps_its_vocabulary_and_refuses_another)
{
    write_corpus("corpus.txt", 400, "");
    write_corpus("other.txt", 400, "!?"); /* two characters more */
    write_config("lm.yaml", "");
    const char *const mine[] = {"data.vocab=chars"}, *const other[] = {"data.vocab=chars", "data.train_text=other.txt"};
    const char *dir = support_path("loop");
    trainrun_trainer *t = lm_trainer(mine, 1);
    trainrun_data *train = NULL, *val = NULL;
    cr_assert_eq(trainrun_trainer_open_dir(t, dir, NULL), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    cr_assert_eq(trainrun_trainer_open_data(t, &train, &val, NULL), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    support_train_steps(t, train, 15, NULL);
    cr_assert_eq(trainrun_trainer_save(t, NULL, NULL, 0), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(t));
    trainrun_trainer_close(t);
    char *vocab = NULL, *copy = NULL;
    size_t vlen = 0, clen = 0;
    read_bytes(support_path("loop/vocab.json"), &vocab, &vlen);
    read_bytes(support_path("loop/checkpoints/step-0000000015/vocab.json"), &copy, &clen);
    cr_expect(strstr(vocab, "\"chars\"") && !strchr(vocab, '!'), "%s", vocab);
    cr_expect(vlen == clen && memcmp(vocab, copy, vlen) == 0, "the checkpoint's copy: %s", copy);
    free(copy);

    char args[2048], out[8192];
    snprintf(args, sizeof args, "sample %s --tokens 20 --prompt 'the' --seed 1", dir);
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "\nthe"), "the output starts with the prompt: %s", out);

    /* another corpus: open_dir resumes step 15, then open_data refuses its vocabulary ... */
    trainrun_trainer *u = lm_trainer(other, 2);
    int resumed = 0;
    cr_assert_eq(trainrun_trainer_open_dir(u, dir, &resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(u));
    cr_expect_eq(resumed, 1);
    trainrun_data *train2 = NULL;
    cr_expect_eq(trainrun_trainer_open_data(u, &train2, NULL, NULL), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(u), "step-0000000015/vocab.json: the weights were trained with another "
                                                 "vocabulary"), "%s", trainrun_trainer_errmsg(u));
    cr_expect_null(train2);
    trainrun_trainer_close(u);
    /* ... and with open_data first, open_dir refuses before loading, and frees the directory */
    trainrun_trainer *v = lm_trainer(other, 2);
    cr_assert_eq(trainrun_trainer_open_data(v, &train2, NULL, NULL), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(v));
    cr_expect_eq(trainrun_trainer_open_dir(v, dir, &resumed), TRAINRUN_E_CONFIG);
    cr_expect(strstr(trainrun_trainer_errmsg(v), "another vocabulary"), "%s", trainrun_trainer_errmsg(v));
    int64_t steps = -1;
    trainrun_trainer_steps(v, &steps);
    cr_expect_eq(steps, 0, "nothing was loaded");
    trainrun_trainer_close(v);
    read_bytes(support_path("loop/vocab.json"), &copy, &clen);
    cr_expect(vlen == clen && memcmp(vocab, copy, vlen) == 0, "vocab.json is the corpus's still: %s", copy);
    free(copy);
    free(vocab);
    trainrun_trainer *w = lm_trainer(mine, 1);
    cr_expect_eq(trainrun_trainer_open_dir(w, dir, &resumed), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(w));
    trainrun_trainer_close(w);
    trainrun_data_close(train2);
    trainrun_data_close(train);
    trainrun_data_close(val);
}
