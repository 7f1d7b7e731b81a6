/*
 * test_tfevents.c -- TensorBoard event files (tfevents.h, tensorboard.h): CRC-32C against RFC 3720's vectors and
 * TensorFlow's masked values; the bytes of a fixed sequence of events against tests/data/tensorboard/golden.tfevents,
 * written by TensorBoard's own protocol buffers and record writer (make_golden.py there); and a run with
 * log.tensorboard, killed past a checkpoint and resumed, read back frame by frame here and, when the TensorBoard venv
 * of scripts/setup.sh is there, by TensorBoard's EventAccumulator: every step once, the resumed process's values
 * superseding its predecessor's, the hyperparameters once.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"
#include "support.h"
#include "tensorboard.h"
#include "tensorboard/event.pb-c.h"
#include "tfevents.h"

TestSuite(tfevents, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 600);

Test(tfevents, crc32c_matches_rfc3720_and_tensorflows_mask)
{
    uint8_t zeros[32] = {0}, ones[32], up[32], down[32];
    for (int i = 0; i < 32; i++) ones[i] = 0xff, up[i] = (uint8_t)i, down[i] = (uint8_t)(31 - i);
    /* RFC 3720 appendix B.4, and the CRC catalogue's check value of "123456789" */
    cr_expect_eq(tr_crc32c(0, "123456789", 9), 0xe3069283u);
    cr_expect_eq(tr_crc32c(0, zeros, 32), 0x8a9136aau);
    cr_expect_eq(tr_crc32c(0, ones, 32), 0x62a8ab43u);
    cr_expect_eq(tr_crc32c(0, up, 32), 0x46dd794eu);
    cr_expect_eq(tr_crc32c(0, down, 32), 0x113fdb5cu);
    /* continued in pieces = in one go */
    cr_expect_eq(tr_crc32c(tr_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
    /* TensorBoard's masked_crc32c of the same data (make_golden.py prints them) */
    cr_expect_eq(tr_crc32c_mask(tr_crc32c(0, "123456789", 9)), 0xc78ab0e5u);
    cr_expect_eq(tr_crc32c_mask(tr_crc32c(0, zeros, 32)), 0x0fd7fffau);
    cr_expect_eq(tr_crc32c_mask(tr_crc32c(0, up, 32)), 0x951f7892u);
    cr_expect_eq(tr_crc32c_mask(tr_crc32c(0, "", 0)), 0xa282ead8u);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len + 1);
    cr_assert_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

Test(tfevents, writes_the_bytes_tensorboards_own_writer_writes)
{
    tr_tfevents w;
    tr_error err = {0};
    const double W = 1700000000.25;
    const char *path = support_path("events.out.tfevents.test");
    cr_assert_eq(tr_tfevents_create(&w, path, W, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(tr_tfevents_session_start(&w, W, 41, &err), TR_OK);
    const tr_hparam hp[] = {{.key = "data.format", .kind = 2, .text = "image_folder"},
                            {.key = "data.shuffle", .kind = 1, .boolean = 1},
                            {.key = "optim.lr", .kind = 0, .number = 0.001}};
    cr_assert_eq(tr_tfevents_hparams(&w, W, hp, 3, &err), TR_OK);
    const char *t1[] = {"train/loss", "train/accuracy"}, *t2[] = {"val/loss"};
    const double v1[] = {0.693359375, 0.75}, v2[] = {1.0 / 3.0};
    cr_assert_eq(tr_tfevents_scalars(&w, W + 1.5, 50, t1, v1, 2, &err), TR_OK);
    cr_assert_eq(tr_tfevents_scalars(&w, W + 2.0, 100, t2, v2, 1, &err), TR_OK);
    cr_assert_eq(tr_tfevents_close(&w, &err), TR_OK);
    size_t n, m;
    uint8_t *ours = slurp(path, &n), *golden = slurp(TR_SOURCE_DIR "/tests/data/tensorboard/golden.tfevents", &m);
    cr_expect_eq(n, m, "%zu bytes, TensorBoard's file has %zu", n, m);
    size_t first = 0;
    while (first < n && first < m && ours[first] == golden[first]) first++;
    cr_expect(n == m && first == n, "the files differ from byte %zu", first);
    free(ours);
    free(golden);
    /* an existing file is never overwritten */
    cr_expect_eq(tr_tfevents_create(&w, path, W, &err), TR_E_RUNTIME);
    cr_expect(strstr(err.msg, "cannot create"), "%s", err.msg);
}

/* ---------------------------------------------------------------------------------------------- a run */

typedef struct seen {
    int files, starts, hparams;
    int64_t start_step[4];
    int64_t train_steps[4][64];
    int n_train[4];
} seen;

/* Every record of every events file of `dir`, in name order: framing and CRCs checked, events unpacked. */
static void read_dir(const char *dir, seen *s)
{
    memset(s, 0, sizeof *s);
    struct dirent **names;
    const int n = scandir(dir, &names, NULL, alphasort);
    cr_assert_geq(n, 0, "%s", dir);
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i]->d_name, "events.out.tfevents.", 20) != 0) {
            free(names[i]);
            continue;
        }
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        free(names[i]);
        const int f = s->files++;
        cr_assert_lt(f, 4);
        size_t len;
        uint8_t *b = slurp(path, &len);
        size_t off = 0;
        int records = 0;
        while (off < len) {
            cr_assert_leq(off + 12, len, "%s: a record cut at %zu", path, off);
            uint64_t l = 0;
            uint32_t c1 = 0, c2 = 0;
            for (int k = 0; k < 8; k++) l |= (uint64_t)b[off + k] << (8 * k);
            for (int k = 0; k < 4; k++) c1 |= (uint32_t)b[off + 8 + k] << (8 * k);
            cr_assert_eq(c1, tr_crc32c_mask(tr_crc32c(0, b + off, 8)), "%s: length CRC at %zu", path, off);
            cr_assert_leq(off + 16 + l, len);
            for (int k = 0; k < 4; k++) c2 |= (uint32_t)b[off + 12 + l + k] << (8 * k);
            cr_assert_eq(c2, tr_crc32c_mask(tr_crc32c(0, b + off + 12, l)), "%s: data CRC at %zu", path, off);
            Tensorboard__Event *ev = tensorboard__event__unpack(NULL, l, b + off + 12);
            cr_assert_not_null(ev, "%s: record %d is not an Event", path, records);
            if (records == 0) cr_expect_str_eq(ev->file_version, "brain.Event:2");
            if (ev->what_case == TENSORBOARD__EVENT__WHAT_SESSION_LOG) {
                cr_expect_eq(records, 1, "START follows the file header");
                s->starts++;
                s->start_step[f] = ev->step;
            }
            if (ev->what_case == TENSORBOARD__EVENT__WHAT_SUMMARY)
                for (size_t v = 0; v < ev->summary->n_value; v++) {
                    const char *tag = ev->summary->value[v]->tag;
                    if (strcmp(tag, "_hparams_/session_start_info") == 0) s->hparams++;
                    if (strcmp(tag, "train/loss") == 0 && s->n_train[f] < 64)
                        s->train_steps[f][s->n_train[f]++] = ev->step;
                }
            tensorboard__event__free_unpacked(ev, NULL);
            off += 16 + l;
            records++;
        }
        free(b);
    }
    free(names);
}

/* The venv scripts/setup.sh installs TensorBoard into; "" when it is not there. */
static const char *tensorboard_python(void)
{
    static char py[1024];
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (cache && cache[0]) snprintf(py, sizeof py, "%s/trainrun/tensorboard-venv/bin/python", cache);
    else snprintf(py, sizeof py, "%s/.cache/trainrun/tensorboard-venv/bin/python", home ? home : "");
    return access(py, X_OK) == 0 ? py : "";
}

Test(tfevents, a_resumed_run_continues_the_same_curves_without_duplicated_steps)
{
    support_require_fmnist();
    tr_config cfg;
    tr_summary s;
    tr_error err = {0};
    /* the first process: 100 steps, checkpoints at 40 and 80 only -- as if killed after logging step 100 */
    const char *const first[] = {
        "train.max_steps=100",     "log.every_steps=10",  "log.tensorboard=true",       "checkpoint.every_steps=40",
        "checkpoint.at_end=false", "eval.every_steps=50", "checkpoint.every_seconds=0", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "tb", first);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);
    /* the second: resumes from step 80, logs 90 and 100 again and goes on to 120 */
    const char *const second[] = {
        "train.max_steps=120",     "log.every_steps=10",  "log.tensorboard=true",       "checkpoint.every_steps=40",
        "checkpoint.at_end=false", "eval.every_steps=50", "checkpoint.every_seconds=0", NULL};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", "tb", second);
    cr_assert_eq(tr_run(&cfg, &s, &err), TR_OK, "%s", err.msg);

    seen sn;
    read_dir(support_path("tb/tensorboard"), &sn);
    cr_assert_eq(sn.files, 2, "a file per process");
    cr_expect_eq(sn.starts, 2);
    cr_expect_eq(sn.start_step[0], 1);
    cr_expect_eq(sn.start_step[1], 81, "the resumed process supersedes steps from 81 on");
    cr_expect_eq(sn.hparams, 1, "the hyperparameters once");
    cr_assert_eq(sn.n_train[0], 10);
    cr_assert_eq(sn.n_train[1], 4);
    for (int i = 0; i < 10; i++) cr_expect_eq(sn.train_steps[0][i], 10 * (i + 1));
    for (int i = 0; i < 4; i++) cr_expect_eq(sn.train_steps[1][i], 90 + 10 * i);

    /* TensorBoard itself */
    const char *py = tensorboard_python();
    if (!py[0])
        support_skip("TensorBoard is not installed (scripts/setup.sh puts it into "
                     "${XDG_CACHE_HOME:-~/.cache}/trainrun/tensorboard-venv): the EventAccumulator check is skipped");
    char cmd[2400], *out = malloc(1 << 20);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/tensorboard/read_back.py' '%s' 2>%s", py, TR_SOURCE_DIR,
             support_path("tb/tensorboard"), support_path("read_back.err"));
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    const size_t got = fread(out, 1, (1 << 20) - 1, p);
    out[got] = '\0';
    cr_assert_eq(pclose(p), 0, "%s failed: %s", cmd, out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "%s", out);
    const cJSON *sc = cJSON_GetObjectItem(j, "scalars"), *loss = cJSON_GetObjectItem(sc, "train/loss");
    cr_assert(cJSON_IsArray(loss), "%s", out);
    cr_assert_eq(cJSON_GetArraySize(loss), 12, "steps 10 .. 120, each once: %s", cJSON_Print(loss));
    /* the values at the steps logged twice are the resumed process's: metrics.jsonl's last records of them */
    double mloss[32], msteps[32];
    const int nrec = support_read_field(support_path("tb"), "train", "loss", mloss, msteps, 32);
    cr_assert_eq(nrec, 14);
    for (int i = 0; i < 12; i++) {
        const cJSON *e = cJSON_GetArrayItem(loss, i);
        const int64_t step = (int64_t)cJSON_GetArrayItem(e, 0)->valuedouble;
        cr_expect_eq(step, 10 * (i + 1));
        const double v = cJSON_GetArrayItem(e, 1)->valuedouble;
        int last = -1;
        for (int r = 0; r < nrec; r++)
            if ((int64_t)msteps[r] == step) last = r;
        cr_assert_geq(last, 0);
        cr_expect_eq(v, (double)(float)mloss[last], "step %lld: %.9g, metrics.jsonl's last %.9g", (long long)step, v,
                     mloss[last]);
    }
    const char *tags[] = {"train/accuracy",        "train/lr", "train/samples_per_s", "memory/allocated_bytes",
                          "memory/reserved_bytes", "val/loss", "val/accuracy",        "test/loss",
                          "test/accuracy"};
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
        cr_expect(cJSON_IsArray(cJSON_GetObjectItem(sc, tags[i])), "no %s in %s", tags[i], out);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(sc, "val/loss")), 2, "evaluations at 50 and 100");
    const cJSON *hp = cJSON_GetObjectItem(j, "hparams");
    cr_expect_eq(cJSON_GetObjectItem(hp, "optim.lr")->valuedouble, 1e-3);
    cr_expect_str_eq(cJSON_GetObjectItem(hp, "data.format")->valuestring, "idx");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(hp, "log.tensorboard")));
    cr_expect_gt(cJSON_GetArraySize(hp), 100, "every config key");
    cJSON_Delete(j);
    free(out);
}
