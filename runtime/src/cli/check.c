/*
 * check.c -- `trainrun verify` and `trainrun check` (see check.h).
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "error.h"
#include "io.h"
#include "log.h"
#include "run.h"
#include "trace.h"
#include "units.h"

/* rm -rf a scratch directory we made (mkdtemp under /tmp), without a shell. */
static void remove_tree(const char *dir)
{
    const pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
}

static int make_scratch(char *dir, size_t n, const char *what)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, n, "%s/trainrun-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "trainrun %s: cannot create a scratch directory %s\n", what, dir);
        return TR_E_RUNTIME;
    }
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------------ verify */

/* Keys whose difference from the recording does not make `verify` refuse: where a run writes, its cadence of
 * checkpoints and memory samples, settings that leave the numbers alone (prefetch, the image cache, malloc) or move
 * only their last bits, which verify notes and --rtol is for (threads, deterministic, device), and paths, whose
 * targets the config fingerprint covers (the model spec's text, the data directory). */
static int verify_ignores(const char *key)
{
    static const char *const prefixes[] = {"run.", "log.", "checkpoint.", "watchdog.", "debug.", "dist."};
    static const char *const keys[] = {"threads", "interop_threads", "deterministic", "malloc_tuning", "device",
                                       "data.prefetch", "data.cache", "data.cache_dir", "data.root", "model.spec",
                                       "init.from"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strcmp(key, keys[i]) == 0) return 1;
    return 0;
}

/* 1 when one of the n overrides sets the key of `kv`. */
static int sets_key(char *const *overrides, int n, const char *kv)
{
    const size_t klen = strcspn(kv, "=");
    for (int i = 0; i < n; i++)
        if (strncmp(overrides[i], kv, klen) == 0 && overrides[i][klen] == '=') return 1;
    return 0;
}

/* The recording's config against this one: TR_OK to go on (same config, or only the model spec's text or the
 * data directory differ: then the traces decide, with a warning), TR_E_CONFIG when keys differ (named). */
static int compare_configs(const tr_config *cfg, const tr_trace *want, const char *recorded)
{
    if (!want->config_yaml || !want->config_fingerprint[0]) return TR_OK; /* a trace from before they existed */
    char fp[65] = "";
    tr_error err = {0};
    if (tr_config_fingerprint(cfg, fp, &err) == TR_OK && strcmp(fp, want->config_fingerprint) == 0) return TR_OK;
    tr_config *rec = malloc(sizeof *rec);
    if (!rec) return TR_E_RUNTIME;
    tr_config_defaults(rec);
    char name[600];
    snprintf(name, sizeof name, "%s (recorded config)", recorded);
    int rc = tr_config_load_string(rec, want->config_yaml, name, &err);
    if (rc) {
        fprintf(stderr, "trainrun verify: %s\n", err.msg);
        free(rec);
        return TR_E_CONFIG;
    }
    char diff[2048];
    const int n = tr_config_diff(rec, cfg, verify_ignores, diff, sizeof diff);
    const int other = n > 0 ? 0 : tr_config_diff(rec, cfg, tr_config_not_fingerprinted, diff, sizeof diff);
    free(rec);
    if (n > 0) {
        fprintf(stderr, "trainrun verify: the config differs from the one %s was recorded with (recorded -> now): "
                        "%s. Nothing was trained; run with the recorded values, or record a new trace\n",
                recorded, diff);
        return TR_E_CONFIG;
    }
    if (other > 0)
        fprintf(stderr, "trainrun verify: note: settings differ from the recording's (recorded -> now): %s; "
                        "comparing the traces\n", diff);
    else
        fprintf(stderr, "trainrun verify: warning: the model spec's text or the data directory differ from the "
                        "recording's (the config's keys agree); comparing the traces\n");
    return TR_OK;
}

/* tr_run, but refused right after set-up when the run plans another number of steps than the recording has (a
 * trace without its config, verified without the recording's overrides, would otherwise train the whole default
 * run before saying so). */
static int run_planned(const tr_config *cfg, const tr_trace *want, const char *recorded, tr_error *err)
{
    tr_run_state *run = NULL;
    int rc = tr_run_open(cfg, NULL, &run, err);
    if (rc == TR_OK && !tr_run_summary(run)->already_complete && tr_run_total_steps(run) != want->n_steps &&
        want->resumes == 0) {
        fprintf(stderr, "trainrun verify: %s holds %lld steps; this config trains %lld (train.max_steps, "
                        "train.epochs or the data differ): give the recording's overrides after the trace. Nothing "
                        "was trained\n", recorded, (long long)want->n_steps, (long long)tr_run_total_steps(run));
        tr_run_close(run, TR_E_CONFIG, err, NULL);
        return TR_E_CONFIG;
    }
    while (rc == TR_OK) rc = tr_run_step(run, err);
    if (rc == TR_RUN_DONE) rc = tr_run_finish(run, err);
    return tr_run_close(run, rc, err, NULL);
}

int tr_cli_verify(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: trainrun verify CONFIG TRACE [--rtol X] [key=value ...]\n");
        return TR_E_CONFIG;
    }
    const char *config = argv[1], *recorded = argv[2];
    double rtol = 0.0;
    tr_trace want = {0}, got = {0};
    tr_error err = {0};
    if (tr_trace_read(recorded, &want, &err) != TR_OK) {
        fprintf(stderr, "trainrun verify: %s\n", err.msg);
        return TR_E_CONFIG;
    }
    char **overrides = calloc((size_t)argc + (size_t)want.n_overrides + 4, sizeof *overrides);
    char **user = calloc((size_t)argc, sizeof *user);
    char scratch[512], trace[600], kv_dir[600], kv_trace[700];
    int n = 0, n_user = 0;
    if (!overrides || !user) {
        free(overrides);
        free(user);
        tr_trace_free(&want);
        return TR_E_RUNTIME;
    }
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc) {
            char *end;
            rtol = strtod(argv[++i], &end);
            if (*end || !(rtol >= 0)) {
                fprintf(stderr, "trainrun verify: --rtol '%s' is not a number >= 0\n", argv[i]);
                free(overrides);
                free(user);
                tr_trace_free(&want);
                return TR_E_CONFIG;
            }
        } else {
            user[n_user++] = argv[i];
        }
    }
    /* the recording's overrides, except those the command line sets again; then the command line's */
    char used[1024] = "";
    for (int i = 0; i < want.n_overrides; i++) {
        if (sets_key(user, n_user, want.overrides[i])) continue;
        overrides[n++] = want.overrides[i];
        const size_t len = strlen(used);
        snprintf(used + len, sizeof used - len, "%s%s", len ? " " : "", want.overrides[i]);
    }
    if (used[0]) fprintf(stderr, "trainrun verify: with the recording's overrides: %s\n", used);
    for (int i = 0; i < n_user; i++) overrides[n++] = user[i];
    free(user);
    if (make_scratch(scratch, sizeof scratch, "verify")) {
        free(overrides);
        tr_trace_free(&want);
        return TR_E_RUNTIME;
    }
    snprintf(trace, sizeof trace, "%s/run.trace", scratch);
    snprintf(kv_dir, sizeof kv_dir, "run.dir=%s", scratch);
    snprintf(kv_trace, sizeof kv_trace, "log.trace=%s", trace);
    overrides[n++] = kv_dir;
    overrides[n++] = kv_trace;
    overrides[n++] = "run.resume=never";

    tr_config *cfg = malloc(sizeof *cfg);
    int rc = cfg ? tr_config_load_cli(cfg, config, overrides, n, &err) : TR_E_RUNTIME;
    if (rc == TR_E_CONFIG) {
        fprintf(stderr, "trainrun verify: %s\n", err.msg);
    } else if (rc == TR_OK && (rc = compare_configs(cfg, &want, recorded)) == TR_OK) {
        rc = run_planned(cfg, &want, recorded, &err);
        if (rc == TR_OK) rc = tr_trace_read(trace, &got, &err);
        if (rc != TR_OK && rc != TR_E_CONFIG) fprintf(stderr, "trainrun verify: %s\n", err.msg);
    }
    if (rc == TR_OK) {
        char msg[512], warn[512];
        const int diff = tr_trace_compare(&got, &want, rtol, 1, msg, sizeof msg, warn, sizeof warn);
        if (warn[0]) fprintf(stderr, "trainrun verify: warning: %s\n", warn);
        const int identical = diff ? 0 : rtol == 0 || !tr_trace_compare(&got, &want, 0, 1, msg, sizeof msg, warn, sizeof warn);
        if (!identical) tr_trace_drift_report(stdout, &got, &want); /* how far apart, whatever --rtol decides */
        if (diff) {
            printf("verify: FAILED against %s: %s\n", recorded, msg);
            rc = TR_E_DIFFERENCE;
        } else {
            printf("verify: OK: %lld steps%s match %s\n", (long long)want.n_steps,
                   rtol > 0 ? " (within --rtol)" : ", eval counts and final parameters", recorded);
        }
    }
    tr_trace_free(&want);
    tr_trace_free(&got);
    free(cfg);
    free(overrides);
    remove_tree(scratch);
    return rc;
}

/* ------------------------------------------------------------------------------------------------ check */

typedef struct check_ctx {
    const char *self;
    const char *config;
    char **user;        /* the user's key=value overrides */
    int n_user;
    int64_t steps;
    int64_t kill_at;    /* the step at whose end the next spawned run kills itself; 0 = none */
    unsigned seed;      /* draws the kill step: --seed, else time ^ pid (printed either way) */
    int seed_given;
    char scratch[512];
} check_ctx;

/* 1 if the user already set `key` (then theirs stands). */
static int user_sets(const check_ctx *c, const char *kv)
{
    const size_t klen = strcspn(kv, "=");
    for (int i = 0; i < c->n_user; i++)
        if (strncmp(c->user[i], kv, klen) == 0 && c->user[i][klen] == '=') return 1;
    return 0;
}

/* Start one run as a fresh process: CONFIG, the user's overrides, then check's own. Output to name.log. */
static pid_t spawn_run(const check_ctx *c, const char *name)
{
    static char own[16][700];
    int k = 0;
    snprintf(own[k++], sizeof own[0], "train.max_steps=%lld", (long long)c->steps);
    snprintf(own[k++], sizeof own[0], "run.dir=%s", c->scratch);
    snprintf(own[k++], sizeof own[0], "run.name=%s", name);
    snprintf(own[k++], sizeof own[0], "log.trace=%s/%s.trace", c->scratch, name);
    snprintf(own[k++], sizeof own[0], "log.progress=never");
    snprintf(own[k++], sizeof own[0], "run.resume=auto");
    /* defaults the user may change: sample memory often, checkpoint often enough for a resume to matter */
    const long long every = c->steps / 8 < 10 ? (c->steps / 8 > 0 ? c->steps / 8 : 1) : 10;
    snprintf(own[k++], sizeof own[0], "watchdog.every_steps=%lld", every);
    snprintf(own[k++], sizeof own[0], "log.every_steps=%lld", every);
    snprintf(own[k++], sizeof own[0], "watchdog.warmup_steps=%lld", (long long)(c->steps / 4 > 0 ? c->steps / 4 : 1));
    snprintf(own[k++], sizeof own[0], "checkpoint.every_steps=%lld", (long long)(c->steps / 8 > 0 ? c->steps / 8 : 1));
    snprintf(own[k++], sizeof own[0], "checkpoint.every_seconds=0");
    snprintf(own[k++], sizeof own[0], "eval.every_steps=%lld", (long long)(c->steps / 4 > 0 ? c->steps / 4 : 1));
    snprintf(own[k++], sizeof own[0], "eval.test_at_end=false");
    char log[700];
    snprintf(log, sizeof log, "%s/%s.log", c->scratch, name);
    const pid_t pid = fork();
    if (pid != 0) return pid;
    /* the run sends itself SIGKILL at the end of step kill_at (TRAINRUN_KILL_AT_STEP, run.c's kill_due): an exact
     * step, where polling its trace from here could land anywhere after it */
    char kill_at[32];
    snprintf(kill_at, sizeof kill_at, "%lld", (long long)c->kill_at);
    if (c->kill_at > 0) setenv("TRAINRUN_KILL_AT_STEP", kill_at, 1);
    else unsetenv("TRAINRUN_KILL_AT_STEP");
    const int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    char *args[128];
    int n = 0;
    args[n++] = (char *)c->self;
    args[n++] = (char *)c->config;
    /* check's first six keys are its own (steps, where runs go, traces); the user's settings win for the rest */
    for (int i = 0; i < c->n_user && n < 100; i++) {
        const size_t klen = strcspn(c->user[i], "=");
        int forced = 0;
        for (int j = 0; j < 6 && !forced; j++) forced = strncmp(own[j], c->user[i], klen) == 0 && own[j][klen] == '=';
        if (!forced) args[n++] = c->user[i];
    }
    for (int i = 0; i < k; i++)
        if (i < 6 || !user_sets(c, own[i])) args[n++] = own[i];
    args[n] = NULL;
    execv(c->self, args);
    _exit(127);
}

/* Exit code of child `pid` (128 + signal if one ended it); -1 when there is no such child (fork failed). */
static int wait_run(pid_t pid)
{
    if (pid <= 0) return -1;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int read_trace(const check_ctx *c, const char *name, tr_trace *t, char *why, size_t n)
{
    char path[700];
    tr_error err = {0};
    snprintf(path, sizeof path, "%s/%s.trace", c->scratch, name);
    if (tr_trace_read(path, t, &err) != TR_OK) {
        snprintf(why, n, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* The growth lines of run `name`'s memory_report.json (written at the end of its loop: what grew since the
 * watchdog's baseline, by the phase that allocated it and its size), largest first; nothing when there is none. */
static void print_memory_report(const check_ctx *c, const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s/memory_report.json", c->scratch, name);
    unsigned char *text = NULL;
    size_t len = 0;
    tr_error ignore = {0}; /* none (the run ended before its report) or unreadable: nothing to print */
    if (tr_io_read_file(path, 0, &text, &len, &ignore) != TR_OK) return;
    cJSON *o = cJSON_Parse((const char *)text);
    free(text);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "growth");
    const int n = cJSON_IsArray(g) ? cJSON_GetArraySize(g) : 0;
    if (n > 0) printf("\nwhat grew in run %s since the baseline (%s):\n", name, path);
    for (int i = 0; i < n && i < 10; i++) {
        const cJSON *line = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(g, i), "line");
        if (cJSON_IsString(line)) printf("  %s\n", line->valuestring);
    }
    if (n > 10) printf("  ... %d more\n", n - 10);
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(o, "backtrace");
    if (cJSON_IsArray(bt) && cJSON_GetArraySize(bt) > 0) {
        printf("  the first was allocated at:\n");
        const cJSON *fr;
        cJSON_ArrayForEach(fr, bt) if (cJSON_IsString(fr)) printf("    %s\n", fr->valuestring);
    }
    cJSON_Delete(o);
}

/* Allocated bytes at every sample after the baseline equal the baseline? From run `name`'s metrics.jsonl. */
static int memory_flat(const check_ctx *c, const char *name, char *detail, size_t n)
{
    char path[700], line[4096];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", c->scratch, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(detail, n, "no metrics in %.400s", path);
        return 0;
    }
    long long baseline = -1, base_step = -1, worst = 0, worst_step = -1, samples = 0;
    while (fgets(line, sizeof line, f)) {
        const char *a = strstr(line, "\"allocated\":"), *s = strstr(line, "\"step\":");
        if (!a || !s) continue;
        const long long bytes = strtoll(a + 12, NULL, 10), step = strtoll(s + 7, NULL, 10);
        if (baseline < 0 && strstr(line, "\"event\":\"baseline\"")) {
            baseline = bytes;
            base_step = step;
            continue;
        }
        if (baseline < 0 || !strstr(line, "\"type\":\"train\"")) continue;
        samples++;
        if (bytes - baseline > worst || worst_step < 0) {
            worst = bytes - baseline;
            worst_step = step;
        }
    }
    fclose(f);
    char b[32], w[32];
    tr_format_bytes((double)baseline, b, sizeof b);
    tr_format_bytes((double)worst, w, sizeof w);
    if (baseline < 0) {
        snprintf(detail, n, "no baseline was taken (the run is shorter than watchdog.warmup_steps?)");
        return 0;
    }
    if (worst != 0) {
        snprintf(detail, n, "baseline %s at step %lld; %+lld bytes (%s) at step %lld", b, base_step, worst, w,
                 worst_step);
        return 0;
    }
    snprintf(detail, n, "%s at every one of %lld samples from step %lld on", b, samples, base_step);
    return 1;
}

typedef struct row {
    const char *what;
    int ok;
    char detail[2200];
} row;

int tr_cli_check(const char *self, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: trainrun check CONFIG [--steps N] [--seed S] [key=value ...]\n");
        return TR_E_CONFIG;
    }
    check_ctx c = {.self = self, .config = argv[1], .steps = 400};
    c.user = calloc((size_t)argc, sizeof *c.user);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            char *end;
            c.steps = strtoll(argv[++i], &end, 10);
            if (*end || c.steps < 8) {
                fprintf(stderr, "trainrun check: --steps '%s': need an integer >= 8\n", argv[i]);
                free(c.user);
                return TR_E_CONFIG;
            }
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            char *end;
            const unsigned long long v = strtoull(argv[++i], &end, 10);
            if (*end || !argv[i][0] || argv[i][0] == '-' || v > UINT_MAX) {
                fprintf(stderr, "trainrun check: --seed '%s': need an integer in [0, %u]\n", argv[i], UINT_MAX);
                free(c.user);
                return TR_E_CONFIG;
            }
            c.seed = (unsigned)v;
            c.seed_given = 1;
        } else {
            c.user[c.n_user++] = argv[i];
        }
    }
    if (!c.seed_given) c.seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    /* The config must load before anything is spawned: its errors are the user's to see now. */
    tr_config *cfg = malloc(sizeof *cfg);
    tr_error err = {0};
    int rc = tr_config_load_cli(cfg, c.config, c.user, c.n_user, &err);
    free(cfg);
    if (rc != TR_OK) {
        fprintf(stderr, "trainrun check: %s\n", err.msg);
        free(c.user);
        return rc;
    }
    signal(SIGCHLD, SIG_DFL); /* an inherited SIG_IGN would reap the runs before we can read their status */
    if (make_scratch(c.scratch, sizeof c.scratch, "check")) {
        free(c.user);
        return TR_E_RUNTIME;
    }
    printf("trainrun check %s: %lld steps, kill step drawn with --seed %u, runs in %s\n", c.config,
           (long long)c.steps, c.seed, c.scratch);
    fflush(stdout);

    row rows[3] = {{"same trace in two fresh processes", 0, ""},
                   {"resumed after SIGKILL = uninterrupted", 0, ""},
                   {"allocated bytes flat after the baseline", 0, ""}};
    tr_trace a = {0}, b = {0}, k = {0};
    char why[2048], warn[512];

    /* 1. twice, fresh processes */
    int code_a = wait_run(spawn_run(&c, "a"));
    int code_b = wait_run(spawn_run(&c, "b"));
    if (code_a != 0 || code_b != 0) {
        snprintf(rows[0].detail, sizeof rows[0].detail, "runs exited %d and %d (see %s/a.log, b.log)", code_a, code_b,
                 c.scratch);
    } else if (read_trace(&c, "a", &a, why, sizeof why) || read_trace(&c, "b", &b, why, sizeof why)) {
        snprintf(rows[0].detail, sizeof rows[0].detail, "%s", why);
    } else if (tr_trace_compare(&b, &a, 0, 1, why, sizeof why, warn, sizeof warn)) {
        snprintf(rows[0].detail, sizeof rows[0].detail, "%s", why);
    } else {
        rows[0].ok = 1;
        snprintf(rows[0].detail, sizeof rows[0].detail, "%lld losses, lrs, eval counts and final parameters, bit for bit",
                 (long long)a.n_steps);
    }

    /* 2. killed at a random step in [steps/4, 3 steps/4] (seeded: --seed repeats it), resumed, compared with run a */
    srand(c.seed);
    const long long target = c.steps / 4 + rand() % (c.steps / 2 + 1);
    c.kill_at = target;
    const int code_killed = wait_run(spawn_run(&c, "k"));
    c.kill_at = 0;
    char ktrace[700];
    snprintf(ktrace, sizeof ktrace, "%s/k.trace", c.scratch);
    tr_trace killed = {0};
    tr_error kerr = {0};
    const long long killed_at = tr_trace_read(ktrace, &killed, &kerr) == TR_OK ? (long long)killed.n_steps : -1;
    tr_trace_free(&killed);
    const int code_k = wait_run(spawn_run(&c, "k"));
    if (code_killed != 128 + SIGKILL) {
        snprintf(rows[1].detail, sizeof rows[1].detail, "the run to be killed at step %lld exited %d instead "
                 "(see %s/k.log)", target, code_killed, c.scratch);
    } else if (code_k != 0) {
        snprintf(rows[1].detail, sizeof rows[1].detail, "the resumed run exited %d (see %s/k.log)", code_k, c.scratch);
    } else if (!a.n_steps || read_trace(&c, "k", &k, why, sizeof why)) {
        snprintf(rows[1].detail, sizeof rows[1].detail, "%s", a.n_steps ? why : "no reference trace from run a");
    } else if (k.resumes < 1) {
        snprintf(rows[1].detail, sizeof rows[1].detail, "the second start did not resume (killed at step %lld)",
                 killed_at);
    } else if (tr_trace_compare(&k, &a, 0, 1, why, sizeof why, warn, sizeof warn)) {
        snprintf(rows[1].detail, sizeof rows[1].detail, "killed at step %lld (--seed %u): %s", killed_at, c.seed, why);
    } else {
        rows[1].ok = 1;
        snprintf(rows[1].detail, sizeof rows[1].detail,
                 "killed at step %lld (--seed %u), resumed from its last checkpoint; every later step bit for bit",
                 killed_at, c.seed);
    }

    /* 3. memory, from run a's samples */
    rows[2].ok = code_a == 0 && memory_flat(&c, "a", rows[2].detail, sizeof rows[2].detail);
    if (code_a != 0) snprintf(rows[2].detail, sizeof rows[2].detail, "run a failed");

    int failed = 0;
    printf("\n%-42s %-6s %s\n", "check", "result", "detail");
    for (int i = 0; i < 3; i++) {
        printf("%-42s %-6s %s\n", rows[i].what, rows[i].ok ? "PASS" : "FAIL", rows[i].detail);
        failed += !rows[i].ok;
    }
    if (!rows[2].ok && code_a == 0) print_memory_report(&c, "a");
    printf("\n%s\n", failed ? "check FAILED" : "check passed");
    tr_trace_free(&a);
    tr_trace_free(&b);
    tr_trace_free(&k);
    if (!failed) remove_tree(c.scratch);
    else printf("runs kept in %s\n", c.scratch);
    free(c.user);
    return failed ? TR_E_DIFFERENCE : TR_OK;
}
