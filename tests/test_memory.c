/*
 * test_memory.c -- the caching CPU allocator and leak attribution, measured to the byte: reserved vs allocated
 * with and without the cache, the c10 size rounding, the cache given back on demand and past its limit, blocks
 * tagged with the phase that allocated them, threads, and the leak report of a run: a leak in the forward pass
 * named "train forward" with its exact block size, one in the eval pass named "eval", and none in a clean run.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "memreport.h"
#include "run.h"
#include "support.h"
#include "trainrun/trainrun.h"
#include "trainrun_shim.h"

TestSuite(memory, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 300);

/* A 784-16-10 MLP: parameters of 50176, 64, 640 and 40 bytes. */
static trs_model *make_mlp(void)
{
    const trs_layer layers[] = {{.kind = TRS_LAYER_LINEAR, .in = 784, .out = 16, .bias = 1},
                                {.kind = TRS_LAYER_LINEAR, .in = 16, .out = 10, .bias = 1}};
    const int64_t shape[1] = {784};
    trs_model *m = NULL;
    cr_assert_eq(trs_model_create(layers, 2, shape, 1, &m), TRS_OK, "%s", trs_last_error());
    return m;
}

static trs_memory_stats stats(void)
{
    trs_memory_stats s;
    cr_assert_eq(trs_memory_stats_get(&s), TRS_OK);
    return s;
}

/* The four parameters, each with a 64-byte header, their data rounded up to 512 bytes (c10's kMinBlockSize). */
static const int64_t k_param_bytes = 50176 + 64 + 640 + 40;
static const int64_t k_cached_block_bytes = (50176 + 64) + (512 + 64) + (1024 + 64) + (512 + 64);

Test(memory, cache_keeps_freed_blocks_reserved_and_reuses_them)
{
    cr_assert_eq(trs_memory_configure(1, 0, 0), TRS_OK);
    cr_assert_eq(trs_memory_empty_cache(NULL), TRS_OK);
    const trs_memory_stats s0 = stats();
    cr_expect_eq(s0.cached_bytes, 0);
    trs_model *m = make_mlp();
    cr_assert_eq(trs_memory_empty_cache(NULL), TRS_OK); /* whatever initialisation freed goes back */
    const trs_memory_stats s1 = stats();
    cr_expect_eq(s1.allocated_bytes - s0.allocated_bytes, k_param_bytes);
    cr_expect_eq(s1.reserved_bytes - s0.reserved_bytes, k_cached_block_bytes, "reserved grew by %lld",
                 (long long)(s1.reserved_bytes - s0.reserved_bytes));
    cr_expect(s1.cache_enabled);

    trs_model_free(m);
    const trs_memory_stats s2 = stats();
    cr_expect_eq(s2.allocated_bytes, s0.allocated_bytes, "allocated falls at once");
    cr_expect_eq(s2.reserved_bytes, s1.reserved_bytes, "reserved keeps the freed blocks");
    cr_expect_eq(s2.cached_bytes, k_cached_block_bytes);

    /* The same sizes again: the parameters come from the cache. Initialisation's temporaries (freed at s1's
     * empty_cache) come from the system once, and are cached when freed; from then on nothing grows. */
    trs_model_free(make_mlp());
    const trs_memory_stats s2b = stats();
    cr_expect_geq(s2b.cache_hits - s2.cache_hits, 4);
    m = make_mlp();
    const trs_memory_stats s3 = stats();
    cr_expect_gt(s3.cache_hits, s2b.cache_hits);
    cr_expect_eq(s3.reserved_bytes, s2b.reserved_bytes, "no new block from the system");
    cr_expect_eq(s3.allocated_bytes - s0.allocated_bytes, k_param_bytes);
    trs_model_free(m);

    int64_t released = -1;
    cr_assert_eq(trs_memory_empty_cache(&released), TRS_OK);
    const trs_memory_stats s4 = stats();
    cr_expect_eq(released, s3.cached_bytes + k_cached_block_bytes, "released %lld", (long long)released);
    cr_expect_eq(s4.reserved_bytes, s0.reserved_bytes, "empty_cache gives every cached byte back");
    cr_expect_eq(s4.cached_bytes, 0);
    cr_expect_gt(s4.cache_releases, s0.cache_releases);
}

Test(memory, without_the_cache_reserved_is_live_blocks_and_headers)
{
    cr_assert_eq(trs_memory_configure(0, 0, 0), TRS_OK);
    const trs_memory_stats s0 = stats();
    cr_expect_eq(s0.cached_bytes, 0, "turning the cache off gives it back");
    trs_model *m = make_mlp();
    const trs_memory_stats s1 = stats();
    cr_expect_eq(s1.allocated_bytes - s0.allocated_bytes, k_param_bytes);
    cr_expect_eq(s1.reserved_bytes - s0.reserved_bytes, k_param_bytes + 4 * 64, "exact sizes plus headers");
    trs_model_free(m);
    const trs_memory_stats s2 = stats();
    cr_expect_eq(s2.reserved_bytes, s0.reserved_bytes);
    cr_expect_eq(s2.cached_bytes, 0);
    cr_expect_eq(s2.cache_enabled, 0);
    cr_assert_eq(trs_memory_configure(1, 0, 0), TRS_OK);
}

Test(memory, past_the_limit_freed_blocks_go_back_to_the_system)
{
    cr_assert_eq(trs_memory_configure(1, 0, 0), TRS_OK);
    cr_assert_eq(trs_memory_empty_cache(NULL), TRS_OK);
    const trs_memory_stats s0 = stats();
    /* a limit just above what is held now: the model's blocks push reserved past it, so they are not cached */
    cr_assert_eq(trs_memory_configure(1, s0.reserved_bytes + 1000, 0), TRS_OK);
    trs_model *m = make_mlp();
    trs_model_free(m);
    const trs_memory_stats s1 = stats();
    cr_expect_leq(s1.reserved_bytes, s0.reserved_bytes + 1000, "reserved %lld, limit %lld",
                  (long long)s1.reserved_bytes, (long long)(s0.reserved_bytes + 1000));
    cr_expect_eq(trs_memory_configure(1, -1, 0), TRS_E_INVALID);
    cr_assert_eq(trs_memory_configure(1, 0, 0), TRS_OK);
}

static int64_t key_blocks(const trs_memory_key *k, size_t n, int phase, int64_t size)
{
    for (size_t i = 0; i < n; i++)
        if (k[i].phase == phase && k[i].size == size) return k[i].blocks;
    return 0;
}

Test(memory, live_blocks_carry_their_phase_and_size)
{
    int prev = -1;
    cr_assert_eq(trs_memory_set_phase(TRS_PHASE_CHECKPOINT, &prev), TRS_OK);
    cr_expect_eq(prev, TRS_PHASE_OUTSIDE);
    trs_model *m = make_mlp();
    cr_assert_eq(trs_memory_set_phase(prev, NULL), TRS_OK);
    size_t n = 0;
    cr_assert_eq(trs_memory_live_keys(NULL, 0, &n), TRS_OK);
    trs_memory_key keys[256];
    cr_assert_leq(n, 256);
    cr_assert_eq(trs_memory_live_keys(keys, 256, &n), TRS_OK);
    const int64_t sizes[4] = {50176, 64, 640, 40};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(key_blocks(keys, n, TRS_PHASE_CHECKPOINT, sizes[i]), 1, "size %lld", (long long)sizes[i]);
    for (size_t i = 1; i < n; i++)
        cr_expect(keys[i - 1].phase < keys[i].phase ||
                  (keys[i - 1].phase == keys[i].phase && keys[i - 1].size < keys[i].size), "sorted");
    trs_model_free(m);
    cr_assert_eq(trs_memory_live_keys(keys, 256, &n), TRS_OK);
    cr_expect_eq(key_blocks(keys, n, TRS_PHASE_CHECKPOINT, 50176), 0, "freed blocks leave the snapshot");
    cr_expect_str_eq(trs_memory_phase_name(TRS_PHASE_FORWARD), "train forward");
    cr_expect_str_eq(trs_memory_phase_name(TRS_PHASE_EVAL), "eval");
    cr_expect_eq(trs_memory_set_phase(TRS_PHASE_COUNT, NULL), TRS_E_INVALID);
    cr_expect_eq(trs_memory_live_keys(NULL, 4, &n), TRS_E_INVALID);
}

Test(memory, backtrace_names_the_allocating_calls)
{
    cr_assert_eq(trs_memory_configure(1, 0, 1), TRS_OK);
    cr_assert_eq(trs_memory_set_phase(TRS_PHASE_EMA, NULL), TRS_OK);
    trs_model *m = make_mlp();
    cr_assert_eq(trs_memory_set_phase(TRS_PHASE_OUTSIDE, NULL), TRS_OK);
    cr_assert_eq(trs_memory_configure(1, 0, 0), TRS_OK);
    char bt[8192];
    int frames = 0;
    cr_assert_eq(trs_memory_key_backtrace(TRS_PHASE_EMA, 50176, bt, sizeof bt, &frames), TRS_OK);
    cr_expect_gt(frames, 3);
    /* libtorch's frames are dynamic symbols: the Linear module's reset allocated the weight */
    cr_expect(strstr(bt, "torch::nn::LinearImpl") != NULL, "%s", bt);
    cr_assert_eq(trs_memory_key_backtrace(TRS_PHASE_EVAL, 50176, bt, sizeof bt, &frames), TRS_OK);
    cr_expect_eq(frames, 0);
    cr_expect_str_eq(bt, "");
    trs_model_free(m);
}

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 50; i++) trs_model_free(make_mlp());
    return NULL;
}

Test(memory, threads_allocate_and_free_concurrently)
{
    const trs_memory_stats s0 = stats();
    pthread_t th[4];
    for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&th[i], NULL, churn, NULL), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    const trs_memory_stats s1 = stats();
    cr_expect_eq(s1.allocated_bytes, s0.allocated_bytes, "every byte came back");
    cr_expect_eq(s1.live_allocations, s0.live_allocations);
    cr_expect_geq(s1.total_allocations - s0.total_allocations, 4 * 50 * 4);
}

/* ------------------------------------------------------------------------------------------- attribution */

/* A short run on the Fashion-MNIST subset: baseline at step 40 (after warm-up and the first eval), 120 steps. */
static void short_run(const char *name, const char *extra_kv, tr_summary *s)
{
    support_require_fmnist();
    const char *const extra[] = {"train.max_steps=120",   "log.every_steps=10",     "watchdog.every_steps=10",
                                 "watchdog.warmup_steps=20", "eval.every_steps=40", "eval.test_at_end=false",
                                 "eval.batch_size=250",   extra_kv,                 NULL};
    tr_config cfg;
    tr_error err = {0};
    support_subset_config(&cfg, "fashion_mnist_mlp.yaml", name, extra);
    tr_run_state *run = NULL;
    int rc = tr_run_open(&cfg, NULL, &run, &err);
    while (rc == TR_OK) rc = tr_run_step(run, &err);
    if (rc == TR_RUN_DONE) rc = tr_run_finish(run, &err);
    cr_assert_eq(tr_run_close(run, rc, &err, s), TR_OK, "%s", err.msg);
    cr_assert_eq(s->baseline_step, 40);
}

static cJSON *read_report(const char *run_dir)
{
    char path[1200];
    static char text[1 << 16];
    snprintf(path, sizeof path, "%s/memory_report.json", run_dir);
    support_read_file(path, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "%s does not parse", path);
    return o;
}

Test(memory, a_forward_leak_is_named_train_forward_with_its_block_size)
{
    tr_summary s;
    short_run("fwd", "debug.leak_bytes_per_step=4096", &s);
    cJSON *o = read_report(s.run_dir);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "growth");
    cr_assert_eq(cJSON_GetArraySize(g), 1, "only the leak grew");
    const cJSON *e = cJSON_GetArrayItem(g, 0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(e, "phase")->valuestring, "train forward");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(e, "block_bytes")->valuedouble, 4096.0);
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(e, "blocks")->valuedouble, 80.0, "one block per step, 40..120");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(e, "bytes_per_step")->valuedouble, 4096.0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(e, "line")->valuestring,
                     "+4096 B/step: 1 block of 4096 B per step, allocated in train forward, still alive "
                     "(+80 blocks, 327680 B since step 40)");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(o, "reason")->valuestring, "end");
    cJSON_Delete(o);
    cr_expect_gt(s.final_reserved_bytes, s.final_bytes, "reserved holds the live blocks and more");
}

Test(memory, an_eval_leak_is_named_eval)
{
    tr_summary s;
    /* 500 validation samples at eval.batch_size 250: 2 blocks per evaluation, evaluations at 80 and 120 */
    short_run("eval", "debug.leak_bytes_per_eval_batch=8192", &s);
    cJSON *o = read_report(s.run_dir);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "growth");
    cr_assert_eq(cJSON_GetArraySize(g), 1);
    const cJSON *e = cJSON_GetArrayItem(g, 0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(e, "phase")->valuestring, "eval");
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(e, "block_bytes")->valuedouble, 8192.0);
    cr_expect_eq(cJSON_GetObjectItemCaseSensitive(e, "blocks")->valuedouble, 4.0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(e, "line")->valuestring,
                     "+409.6 B/step: 1 block of 8192 B every 20 steps, allocated in eval, still alive "
                     "(+4 blocks, 32768 B since step 40)");
    cJSON_Delete(o);
}

Test(memory, a_clean_run_attributes_nothing_and_reports_reserved_and_rss)
{
    tr_summary s;
    short_run("clean", "ema.enabled=true", &s);
    cJSON *o = read_report(s.run_dir);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "growth")), 0);
    cJSON_Delete(o);
    cr_expect_eq(support_count_records(s.run_dir, "\"event\":\"warn\""), 0);
    cr_expect_eq(s.final_bytes, s.baseline_bytes);
    double res[64], rss[64], alloc[64];
    const int n = support_read_field(s.run_dir, "train", "reserved", res, NULL, 64);
    cr_assert_eq(n, 12);
    cr_assert_eq(support_read_field(s.run_dir, "train", "rss", rss, NULL, 64), 12);
    cr_assert_eq(support_read_field(s.run_dir, "train", "allocated", alloc, NULL, 64), 12);
    for (int i = 0; i < n; i++) {
        cr_expect_geq(res[i], alloc[i], "reserved >= allocated");
        cr_expect_gt(rss[i], alloc[i], "the process holds more than its tensors");
    }
    cr_expect_gt(s.peak_rss_bytes, 0);
}

/* ------------------------------------------------------------------------------------------- trainrun.h */

Test(memory, the_trainer_api_returns_the_growing_keys)
{
    support_require_fmnist();
    char model[600], yaml[2048];
    snprintf(model, sizeof model, "%s/m.yaml", support_tmpdir);
    support_write_file(model, "input: [4]\nlayers:\n  - linear: {in: 4, out: 3}\n");
    snprintf(yaml, sizeof yaml, "model: {spec: %s}\ntrain: {batch_size: 8}\nrun: {dir: %s}\n", model, support_tmpdir);
    const char *const ovr[] = {"debug.leak_bytes_per_step=1000"};
    trainrun_trainer *tr = NULL;
    cr_assert_eq(trainrun_trainer_open_yaml(yaml, ovr, 1, &tr), TRAINRUN_OK, "%s", trainrun_trainer_errmsg(tr));
    float x[8 * 4];
    int64_t y[8];
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < 8; i++) y[i] = i % 3;
    trainrun_batch b = {.x = x, .x_dtype = TRAINRUN_FLOAT32, .ndim = 2, .shape = {8, 4}, .y = y,
                        .y_dtype = TRAINRUN_INT64};
    trainrun_step_result r;
    size_t count = 99;
    trainrun_memory_growth g[4];
    cr_expect_eq(trainrun_trainer_memory_growth(tr, g, 4, &count), TRAINRUN_OK);
    cr_expect_eq(count, 0, "nothing before a baseline");
    for (int i = 0; i < 3; i++) cr_assert_eq(trainrun_trainer_train_step(tr, &b, &r), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_memory_baseline(tr), TRAINRUN_OK);
    for (int i = 0; i < 5; i++) cr_assert_eq(trainrun_trainer_train_step(tr, &b, &r), TRAINRUN_OK);
    cr_assert_eq(trainrun_trainer_memory_growth(tr, g, 4, &count), TRAINRUN_OK);
    cr_assert_eq(count, 1);
    cr_expect_str_eq(g[0].phase, "train forward");
    cr_expect_eq(g[0].block_bytes, 1000);
    cr_expect_eq(g[0].blocks, 5);
    cr_expect_eq(g[0].bytes, 5000);
    cr_expect_eq(g[0].bytes_per_step, 1000.0);
    cr_expect_eq(g[0].blocks_per_step, 1.0);
    trainrun_memory m;
    cr_assert_eq(trainrun_trainer_memory(tr, &m), TRAINRUN_OK);
    cr_expect_geq(m.reserved_bytes, m.allocated_bytes);
    cr_expect_gt(m.rss_bytes, 0);
    cr_expect_eq(trainrun_trainer_memory_growth(tr, NULL, 1, &count), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_memory_growth(tr, g, 4, NULL), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_memory_growth(NULL, g, 4, &count), TRAINRUN_E_INVALID);
    cr_expect_eq(trainrun_trainer_memory_baseline(NULL), TRAINRUN_E_INVALID);
    trainrun_trainer_close(tr);
}
