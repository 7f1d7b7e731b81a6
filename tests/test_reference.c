/*
 * test_reference.c -- trainrun as a reference: traces record exactly, `verify` finds the first difference,
 * `check` passes on the MLP and fails, naming the failure, on a leak and on a perturbed resume.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "support.h"
#include "trace.h"

TestSuite(reference, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

static char out[1 << 16];

/* `trainrun check` makes its scratch dir under $TMPDIR, which support_tmp_init points at the test's own dir: the
 * entries there named trainrun-check-*, the first's path into first[n]. */
static int check_scratch_dirs(char *first, size_t n)
{
    DIR *d = opendir(support_tmpdir);
    cr_assert_not_null(d, "%s", support_tmpdir);
    int count = 0;
    first[0] = '\0';
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "trainrun-check-", 15) != 0) continue;
        if (!count++) snprintf(first, n, "%s/%s", support_tmpdir, e->d_name);
    }
    closedir(d);
    return count;
}

#define SUBSET "data.train_subset=3000 data.val_size=500 eval.test_at_end=false eval.every_epoch=false log.progress=never"

Test(reference, trace_records_every_step_and_verify_finds_the_first_difference)
{
    support_require_fmnist();
    char args[1200];
    snprintf(args, sizeof args,
             "configs/fashion_mnist_mlp.yaml train.max_steps=120 eval.every_steps=60 " SUBSET
             " run.dir='%s' run.name=rec --trace '%s'",
             support_tmpdir, support_path("rec.trace"));
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);

    tr_trace t = {0};
    tr_error err = {0};
    cr_assert_eq(tr_trace_read(support_path("rec.trace"), &t, &err), TR_OK, "%s", err.msg);
    cr_expect_eq(t.n_steps, 120);
    cr_expect_str_eq(t.producer, "trainrun");
    cr_expect_eq(t.threads, 1);
    cr_expect(t.has_final);
    cr_expect_gt(t.steps[0].loss, 1.5);
    cr_expect_eq(t.steps[0].lr, 1e-3 * 1 / 200, "warm-up step 1 of 200: lr %a", t.steps[0].lr);
    int vals = 0;
    for (int64_t i = 0; i < t.n_evals; i++) vals += strcmp(t.evals[i].split, "val") == 0 && t.evals[i].samples == 500;
    cr_expect_eq(vals, 2);
    tr_trace_free(&t);

    /* the same config verifies bit for bit */
    snprintf(args, sizeof args,
             "verify configs/fashion_mnist_mlp.yaml '%s' train.max_steps=120 eval.every_steps=60 " SUBSET,
             support_path("rec.trace"));
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "verify: OK: 120 steps") != NULL, "%s", out);

    /* a shorter warm-up: a config that differs from the recording's is refused at once, naming the key (issue 18:
     * it used to train the whole run first) */
    snprintf(args, sizeof args,
             "verify configs/fashion_mnist_mlp.yaml '%s' train.max_steps=120 eval.every_steps=60 "
             "schedule.warmup_steps=100 " SUBSET, support_path("rec.trace"));
    cr_expect_eq(support_cli(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "schedule.warmup_steps 200 -> 100") != NULL, "%s", out);

    /* a recording whose step 37 loss differs in the last bits: bit for bit names step 37; --rtol 1e-3 passes */
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "awk '$1 == \"step\" && $2 == 37 {sub(/p/, \"1p\", $4)} {print}' '%s' > '%s'", support_path("rec.trace"), support_path("nudged.trace"));
    cr_assert_eq(system(cmd), 0);
    snprintf(args, sizeof args, "verify configs/fashion_mnist_mlp.yaml '%s'", support_path("nudged.trace"));
    cr_expect_eq(support_cli(args, out, sizeof out), 5, "%s", out);
    cr_expect(strstr(out, "verify: FAILED") && strstr(out, "step 37: loss "), "%s", out);
    snprintf(args, sizeof args, "verify configs/fashion_mnist_mlp.yaml '%s' --rtol 1e-3", support_path("nudged.trace"));
    cr_expect_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "verify: OK: 120 steps (within --rtol)") != NULL, "%s", out);
}

Test(reference, check_passes_on_the_mlp)
{
    support_require_fmnist();
    const unsigned seed = support_seed("check");
    char args[128], want[160];
    snprintf(args, sizeof args, "check configs/fashion_mnist_mlp.yaml --steps 400 --seed %u", seed);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "same trace in two fresh processes          PASS") != NULL, "%s", out);
    /* the kill lands at exactly the step --seed draws: 100 + rand() % 201 after srand(seed), in [N/4, 3N/4] */
    srand(seed);
    snprintf(want, sizeof want, "resumed after SIGKILL = uninterrupted      PASS   killed at step %d (--seed %u), ",
             100 + rand() % 201, seed);
    cr_expect(strstr(out, want) != NULL, "expected '%s' in %s", want, out);
    cr_expect(strstr(out, "allocated bytes flat after the baseline    PASS") != NULL, "%s", out);
    cr_expect(strstr(out, "check passed") != NULL, "%s", out);
    /* a passing check leaves nothing behind: its scratch runs (tens of MB) are removed */
    char left[600];
    cr_expect_eq(check_scratch_dirs(left, sizeof left), 0, "a passing check left %s behind", left);
}

Test(reference, check_fails_on_a_leak)
{
    support_require_fmnist();
    cr_assert_eq(support_cli("check configs/fashion_mnist_mlp.yaml --steps 400 debug.leak_bytes_per_step=1024 " SUBSET,
                             out, sizeof out), 5, "%s", out);
    cr_expect(strstr(out, "allocated bytes flat after the baseline    FAIL") != NULL, "%s", out);
    /* the failing row names what grew: run a's memory_report.json */
    cr_expect(strstr(out, "what grew in run a since the baseline") != NULL, "%s", out);
    cr_expect(strstr(out, "  +1024 B/step: 1 block of 1024 B per step, allocated in train forward, still alive (+") !=
                  NULL, "%s", out);
    cr_expect(strstr(out, "check FAILED") != NULL, "%s", out);
    /* a failing check keeps its runs for a look and prints where they are */
    char kept[600], line[700];
    cr_assert_eq(check_scratch_dirs(kept, sizeof kept), 1, "%s", out);
    snprintf(line, sizeof line, "runs kept in %s\n", kept);
    cr_expect(strstr(out, line) != NULL, "expected '%s' in %s", line, out);
    struct stat st;
    cr_expect(stat(kept, &st) == 0 && S_ISDIR(st.st_mode), "%s", kept);
}

Test(reference, check_fails_on_a_perturbed_resume)
{
    support_require_fmnist();
    cr_assert_eq(support_cli("check configs/fashion_mnist_mlp.yaml --steps 400 debug.perturb_resume_rng=true " SUBSET,
                             out, sizeof out), 5, "%s", out);
    cr_expect(strstr(out, "resumed after SIGKILL = uninterrupted      FAIL") != NULL, "%s", out);
    cr_expect(strstr(out, "same trace in two fresh processes          PASS") != NULL, "%s", out);
}
