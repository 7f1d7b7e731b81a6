/*
 * test_parity.c -- trainrun against PyTorch: six configs (configs/reference/) trained for 300 steps (the GPT: 200)
 * agree with the traces PyTorch writes for them (bench/reference/train_reference.py), step for step, to a relative
 * 1e-6 in the loss -- in fact bit for bit, evaluation counts and the final parameter checksum included.
 *
 * Which PyTorch, and where its trace comes from, depends on the lane:
 *   - the 1.13 lane (Debian's libtorch 1.13.1, OpenBLAS): the traces committed in tests/reference/, recorded with
 *     Debian's python3-torch, which wraps the same libtorch. They reproduce on Intel and AMD CPUs alike, so this lane
 *     needs no Python at test time.
 *   - a lane built against a PyTorch wheel's libtorch (the 2.11 lane: MKL): PyTorch's trace is recorded here, at
 *     test time, by the Python of that wheel's environment (TR_TORCH_PYTHON, found by CMakeLists.txt beside the
 *     libtorch it builds with), under the same kernel pins. MKL's and oneDNN's AVX2 kernels still round differently
 *     on different CPU models (traces recorded on an AMD EPYC differ from those PyTorch 2.11 itself writes on an
 *     Intel Xeon from step 2 on), so a trace from another machine cannot decide parity; the one committed in
 *     tests/reference/libtorch-2.11/ is compared too and its agreement only reported. Without that Python, the
 *     committed trace is used.
 *
 * Kernels: losses agree only when both sides run the very same CPU kernels (one last-bit difference in one op
 * grows, over 300 steps, to relative differences of 1e-3 to 1). libtorch's three dispatchers -- the BLAS (sgemm:
 * OpenBLAS in 1.13, MKL in 2.11), oneDNN (conv2d) and ATen's own -- choose per machine, so the traces are recorded
 * with each pinned to its AVX2 kernels and trainrun runs under the same pins (the `# kernels` line of each trace).
 * Without AVX2/FMA, with another libtorch or without the trace's BLAS, the comparison is skipped with the reason.
 *
 * Re-record the committed traces (e.g. after an intended change of semantics), from the source dir:
 *   for c in mlp_adamw_constant cnn_sgd_nesterov_cosine mlp_adam_clip_wd resnet_small_adamw_cosine; do
 *     /usr/bin/python3 bench/reference/train_reference.py configs/reference/$c.yaml --steps 300 \
 *         --trace tests/reference/$c.trace; done
 *   /usr/bin/python3 bench/reference/train_reference.py configs/reference/gpt_fortunes_adamw_cosine.yaml \
 *       --trace tests/reference/gpt_fortunes_adamw_cosine.trace
 *   /usr/bin/python3 bench/reference/train_reference.py configs/reference/mlp_adamw_bf16.yaml --steps 300 \
 *       --onednn-isa AVX512_CORE_BF16 --trace tests/reference/mlp_adamw_bf16.trace
 * and the 2.11 lane's the same way with the venv's Python (~/.cache/trainrun/torch-2.11.0/venv/bin/python) and
 * --trace tests/reference/libtorch-2.11/$c.trace (bench/reference/record_2.11.sh does all six).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "trace.h"
#include "trainrun_shim.h"

TestSuite(parity, .init = support_tmp_init, .fini = support_tmp_fini, .timeout = 900);

#define RTOL 1e-6

/* The kernel pins are those of the trace's `# kernels` line (bench/reference/train_reference.py, KERNEL_PINS):
 * the BLAS's (OPENBLAS_CORETYPE=Haswell in the 1.13 lane, MKL_CBWR=AVX2 in the 2.x lane), oneDNN's and ATen's.
 * oneDNN's is per case: AVX2, except for precision bf16-mixed, whose bfloat16 matmuls oneDNN runs only with
 * AVX-512 (recorded with --onednn-isa AVX512_CORE_BF16: the avx512_bf16 instructions). */
#define MAX_PINS 8
typedef struct {
    char key[64], value[64];
} kernel_pin;

/* oneDNN's pin for case `name`. */
static const char *onednn_isa(const char *name) { return strstr(name, "bf16") ? "AVX512_CORE_BF16" : "AVX2"; }

/* The KEY=VALUE pins of the `# kernels` line of the trace at `path` into pins[]; their number (0: no such line). */
static int read_kernel_pins(const char *path, kernel_pin *pins)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "# kernels ", 10) != 0) continue;
        for (char *tok = strtok(line + 10, " \n"); tok && n < MAX_PINS; tok = strtok(NULL, " \n")) {
            const char *eq = strchr(tok, '=');
            cr_assert(eq != NULL, "%s: kernel pin '%s' is not KEY=VALUE", path, tok);
            snprintf(pins[n].key, sizeof pins[n].key, "%.*s", (int)(eq - tok), tok);
            snprintf(pins[n].value, sizeof pins[n].value, "%s", eq + 1);
            n++;
        }
        break;
    }
    fclose(f);
    return n;
}

static const char *pin_value(const kernel_pin *pins, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(pins[i].key, key) == 0) return pins[i].value;
    return NULL;
}

/* The traces of this build's lane: tests/reference/libtorch-MAJOR.MINOR/ where that folder exists (the 2.11
 * lane's, recorded with PyTorch 2.11's Python), else tests/reference/ (Debian's 1.13). */
static void reference_dir(char *buf, size_t n)
{
    int major = 0, minor = 0;
    sscanf(trs_torch_version(), "%d.%d", &major, &minor);
    snprintf(buf, n, "%s/tests/reference/libtorch-%d.%d", TR_SOURCE_DIR, major, minor);
    FILE *probe = NULL;
    char marker[1100];
    snprintf(marker, sizeof marker, "%s/mlp_adamw_constant.trace", buf);
    if ((probe = fopen(marker, "r")) != NULL) {
        fclose(probe);
        return;
    }
    snprintf(buf, n, "%s/tests/reference", TR_SOURCE_DIR);
}

/* What each committed trace must hold: its steps, a validation pass every eval_every steps over eval_samples
 * samples (windows, for text), and a loss that fell from above first_loss to a mean below late_loss over the last
 * 50 steps (ln 10 = 2.30 for the 10 classes; ln 99 = 4.60 for the GPT's 99 characters). */
typedef struct {
    const char *name;
    int steps, eval_every, eval_samples;
    double first_loss, late_loss;
    void (*require_data)(void);
} parity_case;

static const parity_case k_cases[] = {
    {"mlp_adamw_constant", 300, 100, 1000, 2.0, 1.2, support_require_fmnist},
    {"cnn_sgd_nesterov_cosine", 300, 100, 1000, 2.0, 1.2, support_require_fmnist},
    {"mlp_adam_clip_wd", 300, 100, 1000, 2.0, 1.2, support_require_fmnist},
    {"resnet_small_adamw_cosine", 300, 100, 1000, 2.0, 1.2, support_require_fmnist},
    {"gpt_fortunes_adamw_cosine", 200, 100, 64, 4.0, 2.8, support_require_fortunes},
    {"mlp_adamw_bf16", 300, 100, 1000, 2.0, 1.2, support_require_fmnist},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

static const parity_case *find_case(const char *name)
{
    for (size_t c = 0; c < N_CASES; c++)
        if (strcmp(k_cases[c].name, name) == 0) return &k_cases[c];
    cr_assert_fail("no parity case %s", name);
    return NULL;
}

static void reference_path(const char *name, char *buf, size_t n)
{
    char dir[900];
    reference_dir(dir, sizeof dir);
    snprintf(buf, n, "%s/%s.trace", dir, name);
}

/** Read the PyTorch trace at `path` (committed or recorded here) and check it is what the parity tests rely on. */
static void read_reference(const parity_case *pc, const char *path, tr_trace *want)
{
    tr_error err = {0};
    const int steps = pc->steps;
    cr_assert_eq(tr_trace_read(path, want, &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(want->producer, "pytorch", "%s: producer", path);
    cr_assert_eq(want->n_steps, steps, "%s: %lld steps", path, (long long)want->n_steps);
    for (int64_t k = 1; k <= steps; k++) cr_assert(want->have[k - 1], "%s: step %lld missing", path, (long long)k);
    cr_assert_eq(want->resumes, 0, "%s", path);
    cr_assert(want->has_final, "%s: no final record", path);
    cr_assert_eq(want->threads, 1, "%s", path);
    cr_assert_eq(want->interop_threads, 1, "%s", path);
    cr_assert_eq(want->deterministic, 0, "%s", path);
    int vals = 0;
    for (int64_t i = 0; i < want->n_evals; i++) {
        const tr_trace_eval *e = &want->evals[i];
        cr_assert_str_eq(e->split, "val", "%s", path);
        cr_assert_eq(e->step, pc->eval_every * (vals + 1), "%s: eval after step %lld", path, (long long)e->step);
        cr_assert_eq(e->samples, pc->eval_samples, "%s", path);
        vals++;
    }
    cr_assert_eq(vals, steps / pc->eval_every, "%s: %d validation passes", path, vals);
    for (int64_t k = 1; k <= steps; k++) {
        cr_assert(isfinite(want->steps[k - 1].loss) && want->steps[k - 1].loss > 0, "%s: step %lld", path, (long long)k);
        cr_assert(want->steps[k - 1].lr > 0, "%s: step %lld", path, (long long)k);
    }
    kernel_pin pins[MAX_PINS];
    const int np = read_kernel_pins(path, pins);
    const char *aten = pin_value(pins, np, "ATEN_CPU_CAPABILITY"), *dnnl = pin_value(pins, np, "ONEDNN_MAX_CPU_ISA");
    cr_assert(aten && strcmp(aten, "avx2") == 0, "%s: recorded without ATen's AVX2 pin", path);
    cr_assert(dnnl && strcmp(dnnl, onednn_isa(pc->name)) == 0, "%s: recorded without oneDNN's %s pin", path,
              onednn_isa(pc->name));
    cr_assert(pin_value(pins, np, "OPENBLAS_CORETYPE") || pin_value(pins, np, "MKL_CBWR"),
              "%s: recorded without a BLAS pin", path);
}

Test(parity, committed_traces_are_complete_pytorch_runs)
{
    for (size_t c = 0; c < N_CASES; c++) {
        const parity_case *pc = &k_cases[c];
        tr_trace want = {0};
        char path[1024];
        reference_path(pc->name, path, sizeof path);
        read_reference(pc, path, &want);
        /* training happened: the loss of the last 50 steps is well below the first step's */
        double late = 0;
        for (int64_t k = pc->steps - 49; k <= pc->steps; k++) late += want.steps[k - 1].loss / 50;
        cr_expect_gt(want.steps[0].loss, pc->first_loss, "%s", pc->name);
        cr_expect_lt(late, pc->late_loss, "%s: mean loss of the last 50 steps %g", pc->name, late);
        tr_trace_free(&want);
    }
}

/** Whether /proc/cpuinfo lists CPU flag `flag` (e.g. "avx512_bf16"). */
static int cpu_has_flag(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    static char line[8192];
    int found = 0;
    const size_t n = strlen(flag);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        for (const char *p = strstr(line, flag); p && !found; p = strstr(p + 1, flag))
            found = (p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0');
        break;
    }
    fclose(f);
    return found;
}

/** Skip (with the reason) where this CPU cannot run the kernels case `name` is recorded with. */
static void require_pinnable_cpu(const char *name)
{
    if (strcmp(onednn_isa(name), "AVX2") != 0 && !cpu_has_flag("avx512_bf16"))
        support_skip("%s is recorded with oneDNN's avx512_bf16 kernels; this CPU has no avx512_bf16", name);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        support_skip("the reference traces are recorded with AVX2 kernels; this CPU has no AVX2/FMA");
#else
    support_skip("the reference traces are recorded with x86-64 AVX2 kernels");
#endif
}

/** Skip (with the reason) where the trace at `path` cannot be reproduced bit for bit by this build. */
static void require_same_libraries(const tr_trace *want, const char *path, const char *name)
{
    if (strcmp(trs_torch_version(), want->libtorch) != 0)
        support_skip("the reference traces were recorded with libtorch %s; this build uses %s", want->libtorch,
                     trs_torch_version());
    kernel_pin pins[MAX_PINS];
    const int np = read_kernel_pins(path, pins);
    const int want_openblas = pin_value(pins, np, "OPENBLAS_CORETYPE") != NULL;
    void *self = dlopen(NULL, RTLD_LAZY);
    const int have_openblas = self && dlsym(self, "openblas_get_corename") != NULL;
    const int have_mkl = self && dlsym(self, "mkl_get_max_threads") != NULL;
    if (self) dlclose(self);
    if (want_openblas && !have_openblas)
        support_skip("%s was recorded with OpenBLAS; libtorch uses another BLAS here", name);
    if (!want_openblas && !have_mkl) support_skip("%s was recorded with MKL; libtorch uses another BLAS here", name);
}

#ifndef TR_TORCH_PYTHON
#define TR_TORCH_PYTHON ""
#endif

/*
 * PyTorch's trace of case `pc`, into path[n]: recorded now by the Python of the wheel this build's libtorch comes
 * from (TR_TORCH_PYTHON), or, in a lane without one, the committed trace. Returns 1 when it was recorded here.
 */
static int pytorch_trace(const parity_case *pc, char *path, size_t n)
{
    if (!TR_TORCH_PYTHON[0]) {
        reference_path(pc->name, path, n);
        return 0;
    }
    char name[256], log[1100], cmd[4096];
    snprintf(name, sizeof name, "%s.pytorch.trace", pc->name);
    snprintf(path, n, "%s", support_path(name));
    snprintf(log, sizeof log, "%s.log", path);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' bench/reference/train_reference.py configs/reference/%s.yaml --steps %d "
             "--onednn-isa %s --trace '%s' >'%s' 2>&1",
             TR_SOURCE_DIR, TR_TORCH_PYTHON, pc->name, pc->steps, onednn_isa(pc->name), path, log);
    const int rc = system(cmd);
    static char out[1 << 14];
    if (rc != 0) support_read_file(log, out, sizeof out);
    cr_assert_eq(rc, 0, "%s: PyTorch's reference run failed (%s): %s", pc->name, cmd, out);
    return 1;
}

/** Train configs/reference/<name>.yaml with the trainrun CLI under the kernel pins and compare with PyTorch's. */
static void check_parity(const char *name)
{
    const parity_case *pc = find_case(name);
    const int steps = pc->steps;
    pc->require_data();
    require_pinnable_cpu(name);
    tr_trace want = {0}, got = {0};
    char path[1024];
    const int recorded_here = pytorch_trace(pc, path, sizeof path);
    read_reference(pc, path, &want);
    require_same_libraries(&want, path, name);

    /* The pins are read when each library initialises: set them for the CLI process spawned below. */
    kernel_pin pins[MAX_PINS];
    const int np = read_kernel_pins(path, pins);
    for (int i = 0; i < np; i++) setenv(pins[i].key, pins[i].value, 1);
    char args[2048], trace[512];
    static char out[1 << 16];
    snprintf(trace, sizeof trace, "%s", support_path("got.trace"));
    snprintf(args, sizeof args, "configs/reference/%s.yaml train.max_steps=%d run.dir='%s' run.name=%s --trace '%s'",
             name, steps, support_tmpdir, name, trace);
    cr_assert_eq(support_cli(args, out, sizeof out), 0, "%s", out);

    tr_error err = {0};
    cr_assert_eq(tr_trace_read(trace, &got, &err), TR_OK, "%s", err.msg);
    cr_assert_str_eq(got.producer, "trainrun");
    cr_assert_eq(got.n_steps, steps);

    double max_rel = 0;
    for (int64_t k = 1; k <= steps; k++) {
        const double a = got.steps[k - 1].loss, b = want.steps[k - 1].loss;
        const double rel = fabs(a - b) / fabs(b);
        if (rel > max_rel) max_rel = rel;
    }
    cr_log_info("%s: max relative loss difference over %d steps: %.3g", name, steps, max_rel);

    char msg[512], warn[512];
    const int differs = tr_trace_compare(&got, &want, RTOL, 1, msg, sizeof msg, warn, sizeof warn);
    if (warn[0]) cr_log_warn("%s: %s", name, warn);
    cr_assert_eq(differs, 0, "%s: trainrun vs PyTorch, rtol %g: %s (max relative loss difference %.3g)", name, RTOL,
                 msg, max_rel);
    /* and bit for bit: every loss and lr, every eval count and loss, the final parameters' crc32 and sum |x| */
    cr_expect_eq(tr_trace_compare(&got, &want, 0, 1, msg, sizeof msg, warn, sizeof warn), 0,
                 "%s: trainrun vs PyTorch, bit for bit: %s", name, msg);
    if (recorded_here) {
        /* how the committed recording (another machine's, perhaps another CPU model) compares: reported only */
        char committed[1024];
        tr_trace theirs = {0};
        reference_path(name, committed, sizeof committed);
        if (tr_trace_read(committed, &theirs, &err) == TR_OK) {
            const int same = tr_trace_compare(&want, &theirs, 0, 1, msg, sizeof msg, warn, sizeof warn) == 0;
            cr_log_info("%s: PyTorch's trace recorded here %s the committed %s%s%s", name,
                        same ? "equals" : "differs from", committed, same ? "" : ": ", same ? "" : msg);
        }
        tr_trace_free(&theirs);
    }
    tr_trace_free(&got);
    tr_trace_free(&want);
}

Test(parity, mlp_adamw_constant_lr) { check_parity("mlp_adamw_constant"); }

Test(parity, convnet_batchnorm_sgd_nesterov_cosine_warmup) { check_parity("cnn_sgd_nesterov_cosine"); }

Test(parity, mlp_adam_grad_clipping_weight_decay) { check_parity("mlp_adam_clip_wd"); }

/* A TorchScript module (model.torchscript: models/resnet_small.pt) against the eager Python module it was scripted
 * from (models/resnet_small.py), trained by PyTorch from the archive's weights: BatchNorm, residual connections. */
Test(parity, torchscript_resnet_adamw_cosine_warmup) { check_parity("resnet_small_adamw_cosine"); }

/* The GPT of configs/text_gpt.yaml (models/gpt.pt.gz: causal self-attention, LayerNorm, GELU, weight tying; its
 * weights drawn by model.init_method) on character windows of `fortunes`, AdamW with no_decay auto, cosine with
 * warm-up, clipping at 1.0, against the eager Python GPT (models/gpt.py's twin()) on the same windows. */
Test(parity, gpt_text_windows_adamw_no_decay_clip_cosine) { check_parity("gpt_fortunes_adamw_cosine"); }

/* precision: bf16-mixed against PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) around the forward pass
 * (the logits cast to float32 for the loss): the same libtorch runs the same bfloat16 kernels on both sides. */
Test(parity, mlp_adamw_bf16_mixed_under_cpu_autocast) { check_parity("mlp_adamw_bf16"); }
