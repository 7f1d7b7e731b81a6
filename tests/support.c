#include "support.h"

#include "checkpoint.h"
#include "run.h"
#include "safetensors.h"

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

char support_tmpdir[256];

/* The temp dir goes under $TMPDIR (ctest sets it to the build tree's test-tmp/, which a last test checks is left
 * empty), else /tmp. While the test runs TMPDIR names the test's own dir, so what a program it starts puts there
 * (`trainrun check`'s scratch runs, a script's mktemp) goes when the test's dir goes. */
void support_tmp_init(void)
{
    static char base[200];
    if (!base[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s", t && *t ? t : "/tmp");
    }
    snprintf(support_tmpdir, sizeof support_tmpdir, "%s/trainrun-test-XXXXXX", base);
    cr_assert_not_null(mkdtemp(support_tmpdir), "%s", support_tmpdir);
    cr_assert_eq(setenv("TMPDIR", support_tmpdir, 1), 0);
}

void support_tmp_fini(void)
{
    if (!support_tmpdir[0]) return; /* removed already: a skipped test (support_skip_cleanup) */
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", support_tmpdir);
    cr_expect_eq(system(cmd), 0);
    support_tmpdir[0] = '\0';
}

void support_skip_cleanup(void) { support_tmp_fini(); }

const char *support_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", support_tmpdir, name);
    return p;
}

void support_subset_config(tr_config *cfg, const char *config, const char *name, const char *const *extra)
{
    tr_error err = {0};
    char path[1024], kv[512];
    tr_config_defaults(cfg);
    snprintf(path, sizeof path, "%s/configs/%s", TR_SOURCE_DIR, config);
    cr_assert_eq(tr_config_load_file(cfg, path, &err), TR_OK, "%s", err.msg);
    const char *const overrides[] = {"data.train_subset=3000", "data.val_size=500", "data.test_subset=1000",
                                     "train.batch_size=64",    "log.every_steps=1", "log.progress=never",
                                     "eval.every_epoch=false", "eval.every_steps=60", NULL};
    for (int i = 0; overrides[i]; i++) cr_assert_eq(tr_config_override(cfg, overrides[i], &err), TR_OK, "%s", err.msg);
    for (int i = 0; extra && extra[i]; i++) cr_assert_eq(tr_config_override(cfg, extra[i], &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.dir=%s", support_tmpdir);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
    snprintf(kv, sizeof kv, "run.name=%s", name);
    cr_assert_eq(tr_config_override(cfg, kv, &err), TR_OK, "%s", err.msg);
}

static FILE *open_metrics(const char *run_dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    return f;
}

int support_read_field(const char *run_dir, const char *type, const char *field, double *out, double *steps, int max)
{
    char line[2048], tkey[64], fkey[64];
    snprintf(tkey, sizeof tkey, "\"type\":\"%s\"", type);
    snprintf(fkey, sizeof fkey, "\"%s\":", field);
    FILE *f = open_metrics(run_dir);
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        if (!strstr(line, tkey)) continue;
        const char *p = strstr(line, fkey);
        cr_assert_not_null(p, "no %s in %s", field, line);
        out[n] = strtod(p + strlen(fkey), NULL);
        if (steps) {
            const char *s = strstr(line, "\"step\":");
            cr_assert_not_null(s);
            steps[n] = strtod(s + 7, NULL);
        }
        n++;
    }
    fclose(f);
    return n;
}

int support_count_records(const char *run_dir, const char *needle)
{
    char line[2048];
    FILE *f = open_metrics(run_dir);
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}

const char *support_cli_path(void)
{
    const char *fault = getenv("TRAINRUN_TEST_IO_FAULT");
    return fault && *fault ? TR_TEST_CLI : TR_CLI;
}

int support_cli(const char *args, char *out, size_t n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", TR_SOURCE_DIR, support_cli_path(), args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = '\0';
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void support_read_file(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    const size_t len = fread(out, 1, n - 1, f);
    out[len] = '\0';
    fclose(f);
}

void support_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

int support_spawn(const char *const *args, const char *log_path)
{
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        const int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (chdir(TR_SOURCE_DIR) != 0) _exit(126);
        const char *argv[64] = {support_cli_path()};
        int n = 1;
        for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return (int)pid;
}

int support_wait(int pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

long long support_last_step(const char *run_dir, const char *type)
{
    char path[1200], line[4096], key[64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    snprintf(key, sizeof key, "\"type\":\"%s\"", type);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long last = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"step\":");
        if (strstr(line, key) && p && strchr(line, '\n')) last = strtoll(p + 7, NULL, 10);
    }
    fclose(f);
    return last;
}

void support_require_fmnist(void)
{
    if (access(FMNIST_TRAIN, R_OK) == 0) return;
    const char *ci = getenv("CI");
    if (ci && *ci) cr_assert_fail("Fashion-MNIST is missing under CI: %s (scripts/setup.sh installs it)", FMNIST_TRAIN);
    support_skip_cleanup();
    cr_skip_test("Fashion-MNIST is not installed (%s)", FMNIST_TRAIN);
}

void support_require_fortunes(void)
{
    static const char path[] = "/usr/share/games/fortunes/art";
    if (access(path, R_OK) == 0) return;
    const char *ci = getenv("CI");
    if (ci && *ci) cr_assert_fail("the fortunes package is missing under CI: %s (scripts/setup.sh installs it)", path);
    support_skip_cleanup();
    cr_skip_test("the fortunes package is not installed (%s)", path);
}

unsigned support_seed(const char *what)
{
    const char *env = getenv("TRAINRUN_TEST_SEED");
    unsigned seed;
    if (env && *env) {
        char *end = NULL;
        const unsigned long v = strtoul(env, &end, 10);
        cr_assert(*end == '\0' && v <= 0xffffffffUL && env[0] != '-', "TRAINRUN_TEST_SEED=%s: not an unsigned 32-bit number",
                  env);
        seed = (unsigned)v;
    } else {
        seed = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
    }
    fprintf(stderr, "%s: seed %u (TRAINRUN_TEST_SEED=%u reproduces it)\n", what, seed, seed);
    srand(seed);
    return seed;
}

void support_make_blobs(int n, int d, int k, uint64_t seed, float *x, int64_t *y)
{
    uint64_t s = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        y[i] = i % k;
        for (int j = 0; j < d; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const float noise = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
            x[i * d + j] = ((j % k) == y[i] ? 1.0f : -0.3f) + 1.5f * noise;
        }
    }
}

void support_assert_flat(const tr_summary *s, int records)
{
    static double alloc[4096], steps[4096];
    const int k = support_read_field(s->run_dir, "train", "allocated", alloc, steps, 4096);
    cr_assert_eq(k, records);
    int checked = 0;
    for (int i = 0; i < k; i++) {
        if (steps[i] < (double)s->baseline_step) continue;
        cr_assert_eq((int64_t)alloc[i], s->baseline_bytes, "step %.0f: allocated %.0f != baseline %lld", steps[i],
                     alloc[i], (long long)s->baseline_bytes);
        checked++;
    }
    cr_expect_geq(checked, 50);
    cr_expect_eq(s->final_bytes, s->baseline_bytes);
    cr_expect_eq(s->growth_per_step, 0.0);
    cr_expect_eq(support_count_records(s->run_dir, "\"event\":\"warn\""), 0);
}

void support_edit_checkpoint_json(const char *ckpt, const char *file, void (*edit)(cJSON *json, void *ctx),
                                  void *ctx)
{
    char path[800];
    static char text[1 << 20];
    snprintf(path, sizeof path, "%s/%s", ckpt, file);
    support_read_file(path, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "%s", path);
    edit(o, ctx);
    char *printed = cJSON_Print(o);
    support_write_file(path, printed);
    free(printed);
    cJSON_Delete(o);
    support_resign_checkpoint_file(ckpt, file);
}

void support_resign_checkpoint_file(const char *ckpt, const char *file)
{
    char path[800], mpath[800];
    static char text[1 << 20];
    char *printed;
    snprintf(path, sizeof path, "%s/%s", ckpt, file);
    char hex[TR_HASH_HEX_MAX];
    uint64_t size = 0;
    tr_error err = {0};
    snprintf(mpath, sizeof mpath, "%s/MANIFEST.json", ckpt);
    support_read_file(mpath, text, sizeof text);
    tr_ckpt_manifest *man = malloc(sizeof *man); /* its algorithm: SHA-256 (format 1) or XXH3-128 (2) */
    cr_assert_eq(tr_ckpt_parse_manifest(text, mpath, man, &err), TR_OK, "%s", err.msg);
    const tr_hash_algo algo = man->algo;
    free(man);
    cr_assert_eq(tr_hash_file(path, algo, hex, &size, &err), TR_OK, "%s", err.msg);
    cJSON *m = cJSON_Parse(text);
    cr_assert_not_null(m, "%s", mpath);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "files"), file);
    cr_assert_not_null(e, "%s lists no %s", mpath, file);
    char size_text[32]; /* int64 values are decimal strings in trainrun's JSON */
    snprintf(size_text, sizeof size_text, "%llu", (unsigned long long)size);
    cJSON_ReplaceItemInObjectCaseSensitive(e, "size", cJSON_CreateString(size_text));
    cJSON_ReplaceItemInObjectCaseSensitive(e, tr_hash_name(algo), cJSON_CreateString(hex));
    printed = cJSON_Print(m);
    support_write_file(mpath, printed);
    free(printed);
    cJSON_Delete(m);
}

void support_manifest_digest(const char *ckpt, const char *file, char out[TR_HASH_HEX_MAX])
{
    char mpath[1200];
    static char text[1 << 16];
    snprintf(mpath, sizeof mpath, "%s/MANIFEST.json", ckpt);
    out[0] = '\0';
    FILE *f = fopen(mpath, "r");
    if (!f) return;
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    tr_ckpt_manifest *man = malloc(sizeof *man);
    tr_error err = {0};
    cr_assert_not_null(man);
    if (tr_ckpt_parse_manifest(text, mpath, man, &err) == TR_OK)
        for (int i = 0; i < man->n; i++)
            if (strcmp(man->files[i].name, file) == 0) snprintf(out, TR_HASH_HEX_MAX, "%s", man->files[i].digest);
    free(man);
}

char *support_trace_computed(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t cap = 1 << 20, len = 0;
    char *s = malloc(cap), line[4096];
    cr_assert_not_null(s);
    s[0] = '\0';
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "step ", 5) == 0 || strncmp(line, "eval ", 5) == 0 || strncmp(line, "final ", 6) == 0) {
            const size_t l = strlen(line);
            cr_assert_lt(len + l, cap);
            memcpy(s + len, line, l + 1);
            len += l;
        }
    fclose(f);
    return s;
}

int support_free_port(void)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

void support_dist_env(int rank, int world, int port)
{
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
}

void support_flip_byte(const char *path, long offset, int whence, int mask)
{
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fseek(f, offset, whence), 0, "%s: seek to %ld", path, offset);
    const int byte = fgetc(f);
    cr_assert_neq(byte, EOF, "%s: no byte at %ld", path, offset);
    cr_assert_eq(fseek(f, offset, whence), 0);
    cr_assert_neq(fputc(byte ^ mask, f), EOF);
    cr_assert_eq(fclose(f), 0, "%s", path);
}

void support_train_steps(trainrun_trainer *t, trainrun_data *train, int n, double *loss)
{
    for (int step = 0; step < n; step++) {
        trainrun_batch b;
        trainrun_step_result r;
        cr_assert_eq(trainrun_trainer_next_batch(t, train, &b), TRAINRUN_OK, "step %d: %s", step + 1,
                     trainrun_trainer_errmsg(t));
        cr_assert_eq(trainrun_trainer_train_step(t, &b, &r), TRAINRUN_OK, "step %d: %s", step + 1,
                     trainrun_trainer_errmsg(t));
        if (loss) loss[step] = r.loss;
    }
}

void support_summary_member(const char *run_dir, const char *key, char *out, size_t n)
{
    char file[1100];
    static char text[1 << 16];
    snprintf(file, sizeof file, "%s/summary.json", run_dir);
    support_read_file(file, text, sizeof text);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "%s: %s", file, text);
    char *v = cJSON_GetObjectItem(o, key) ? cJSON_PrintUnformatted(cJSON_GetObjectItem(o, key)) : NULL;
    snprintf(out, n, "%s", v ? v : "");
    free(v);
    cJSON_Delete(o);
}
