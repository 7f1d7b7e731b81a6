#!/usr/bin/python3
"""trainrun against the PyTorch people run today: PyTorch 2.11 eager and torch.compile, side by side.

    /usr/bin/python3 bench/vs_torch2.py [--workloads mlp,convnet,resnet,gpt] [--reps 3] [--no-sweep]
                                        [--tsv bench/vs_torch2.tsv] [--results bench/RESULTS.md]
    /usr/bin/python3 bench/vs_torch2.py --report-only     (rewrite the RESULTS.md section from the .tsv)

Forms (each a fresh process, run one after another and interleaved per repetition, so that machine noise hits all
alike):
  trainrun-2.11   build-torch2.11/trainrun (libtorch 2.11.0 from the pinned PyPI wheel, scripts/setup.sh --torch 2.11)
  trainrun-1.13   build/trainrun (Debian's libtorch 1.13.1): the baseline of the last round
  eager-2.11      bench/reference/train_reference.py under the 2.11 venv's Python: the same recipe as trainrun
                  (the same model and initial weights, data order, augmentation, param groups, schedule, clipping),
                  AdamW as foreach=True or fused=True (the sweep picks the faster)
  compile-2.11    the same with torch.compile(model) (inductor, CPU), and either the optimizer step compiled too,
                  the lr a tensor (PyTorch's recipe for a compiled optimizer with a schedule: "model+optimizer"), or
                  the fused AdamW step eager ("model fused"); the sweep picks the faster
Settings: threads 1 or 2 (intra-op; BLAS follows), precision 32 or bf16-mixed (torch.autocast bfloat16; this CPU has
AVX-512 bf16 and AMX). The sweep (one short run of every form x setting) picks each form's best; compile-2.11 is
swept over its two variants only, at eager-2.11's best threads and precision (its matrix products and convolutions
are the same ATen/oneDNN/MKL calls as eager's, and a compile per setting takes minutes on 2 cores). The measured
phase then runs each form at its best, --reps times, interleaved. Python forms run with glibc malloc pinned
(mmap/trim thresholds, their best: bench/RESULTS.md section 2); trainrun pins it itself. No kernel pins (each
library picks this CPU's kernels). Every form does the same work: no evaluation, no EMA, no checkpoints.

Figures: steps/s over the timed window (WARM warm-up steps, then STEPS timed: trainrun's metrics.jsonl time_s, the
Python forms' step end times from --timing); compile seconds (the first WARM steps' time above WARM times the
median timed step); peak RSS (the process's ru_maxrss from wait4); time to the first step = the wall time of a
whole process that trains one step (start, import/load, data, model, one step, exit), the cost a regression-test
suite of many short runs pays per run -- torch.compile's with the inductor cache warm (a second run) and cold.
FLOP/s: FLOPs per step from bench/torch2_flops.py (PyTorch's FlopCounterMode: matrix products and convolutions)
against the 2048^3 torch.mm peak of the 2.11 build's BLAS (bench/flops.py peak, same threads and precision).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                       "trainrun/torch-2.11.0/venv/bin/python")
PINNED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"
KERNEL_PIN_VARS = ("OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_CBWR", "GLIBC_TUNABLES",
                   "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

# warm-up and timed steps (STEPS a multiple of WARM: trainrun logs every WARM steps); sweep = timed steps in the sweep
WORKLOADS = {
    "mlp": dict(config="bench/configs/mlp_256.yaml", warm=50, steps=1000, sweep=300,
                what="MLP 784-256-10 (YAML layers), batch 64, AdamW, constant lr"),
    "convnet": dict(config="bench/configs/convnet.yaml", warm=10, steps=60, sweep=20,
                    what="convnet (models/convnet.yaml: 2 conv + BatchNorm + 2 linear), batch 128, AdamW"),
    "resnet": dict(config="configs/fashion_mnist_resnet.yaml", warm=4, steps=12, sweep=4,
                   what="TorchScript ResNet (models/resnet_small_w64.pt), batch 128, AdamW + cosine, crop + flip, "
                        "label smoothing"),
    "gpt": dict(config="configs/text_gpt.yaml", warm=20, steps=200, sweep=60,
                what="TorchScript GPT (models/gpt.pt.gz: 0.8 M parameters, block 64), batch 12, AdamW + cosine, "
                     "clip 1.0"),
}
SAME_WORK = ["ema.enabled=false", "eval.weights=live", "eval.every_steps=0", "eval.every_epoch=false",
             "eval.test_at_end=false", "checkpoint.every_steps=0", "checkpoint.every_seconds=0",
             "checkpoint.at_end=false", "log.progress=never"]
FORMS = ("trainrun-2.11", "trainrun-1.13", "eager-2.11", "compile-2.11")
BINS = {"trainrun-2.11": "build-torch2.11/trainrun", "trainrun-1.13": "build/trainrun"}


def settings(form):
    """Every setting the sweep tries for a form: (threads, precision, variant)."""
    variants = {"eager-2.11": ("foreach", "fused")}.get(form, ("",))
    return [(t, p, v) for t in (1, 2) for p in ("32", "bf16-mixed") for v in variants]


def setting_name(s):
    t, p, v = s
    return f"threads={t} precision={p}" + (f" {v}" if v else "")


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_PIN_VARS}
    env.update(extra or {})
    return env


def spawn(cmd, env, log):
    """Run cmd to the end: (exit status, wall seconds, peak RSS in KiB) of that process alone (wait4)."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, time.monotonic() - t0, ru.ru_maxrss


class Bench:
    def __init__(self, tmp, tsv):
        self.tmp, self.tsv = tmp, tsv
        self.inductor = os.path.join(tmp, "inductor")  # shared by the compile runs: warm after each one's first

    def command(self, form, w, s, total, tag):
        t, p, v = s
        cfg = WORKLOADS[w]
        common = [f"train.max_steps={total}", f"threads={t}", f"precision={p}"] + SAME_WORK
        if form.startswith("trainrun"):
            cmd = [os.path.join(ROOT, BINS[form]), cfg["config"], f"log.every_steps={cfg['warm']}",
                   f"run.dir={self.tmp}", f"run.name={tag}"] + common
            return cmd, clean_env()
        # compile-2.11's variants: "model+optimizer" (both compiled; the optimizer's default implementation, as
        # PyTorch's recipe), or "model fused" (the model compiled, the fused AdamW step eager)
        impl, comp = (v, "none") if form == "eager-2.11" else ("fused", "model") if v == "model fused" else (
            "default", v)
        cmd = [VENV_PY, "bench/reference/train_reference.py", cfg["config"]] + common + [
            "--native-kernels", "--optim-impl", impl, "--compile", comp,
            "--timing", os.path.join(self.tmp, tag + ".timing.json")]
        return cmd, clean_env({"GLIBC_TUNABLES": PINNED, "TORCHINDUCTOR_CACHE_DIR": self.inductor})

    def rate(self, form, w, tag, steps):
        """(steps/s of the timed window, compile seconds or None) of a finished run."""
        warm = WORKLOADS[w]["warm"]
        if form.startswith("trainrun"):
            t = {}
            with open(os.path.join(self.tmp, tag, "metrics.jsonl")) as f:
                for line in f:
                    r = json.loads(line)
                    if r.get("type") == "train":
                        t[r["step"]] = r["time_s"]
            shutil.rmtree(os.path.join(self.tmp, tag), ignore_errors=True)
            return steps / (t[warm + steps] - t[warm]), None
        with open(os.path.join(self.tmp, tag + ".timing.json")) as f:
            tm = json.load(f)
        ends = [tm["loop_start_s"]] + tm["step_end_s"]
        durs = [b - a for a, b in zip(ends, ends[1:])]
        med = statistics.median(durs[warm:])
        excess = sum(durs[:warm]) - warm * med
        return steps / (ends[warm + steps] - ends[warm]), excess

    def run(self, phase, form, w, s, rep, steps, cold=False):
        tag = f"{phase}-{w}-{form}-{rep}".replace("+", "_")
        total = WORKLOADS[w]["warm"] + steps if steps else 1
        cmd, env = self.command(form, w, s, total, tag)
        if cold:
            env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=self.tmp, prefix="inductor-cold-")
        log = os.path.join(self.tmp, tag + ".log")
        rc, wall, rss = spawn(cmd, env, log)
        if rc != 0:
            sys.stderr.write(open(log).read()[-3000:])
            raise SystemExit(f"vs_torch2: {' '.join(cmd)}: exit {rc} (log above)")
        rate, comp = self.rate(form, w, tag, steps) if steps else (None, None)
        rec = dict(phase=phase, workload=w, form=form, setting=setting_name(s), rep=rep, steps=steps,
                   steps_per_s=rate, compile_s=comp, wall_s=wall, peak_rss_kib=rss)
        with open(self.tsv, "a") as f:
            f.write(json.dumps(rec) + "\n")
        shown = f"{rate:9.2f} steps/s" if rate else f"{wall:7.2f} s to first step"
        print(f"  {phase:8s} {w:8s} {form:14s} {setting_name(s):44s} rep {rep}: {shown}, "
              f"{rss / 1024:.0f} MiB" + (f", compile {comp:.1f} s" if comp else ""), flush=True)
        return rec


def parse_setting(name):
    parts = dict(kv.split("=", 1) for kv in name.split() if "=" in kv)
    v = " ".join(x for x in name.split() if "=" not in x)  # "model fused" stays one variant
    return int(parts["threads"]), parts["precision"], v


def best_settings(records, w):
    """Each form's best setting from the sweep records (highest steps/s)."""
    best = {}
    for r in records:
        if r["phase"] == "sweep" and r["workload"] == w:
            if r["form"] not in best or r["steps_per_s"] > best[r["form"]][1]:
                best[r["form"]] = (r["setting"], r["steps_per_s"])
    return {f: parse_setting(b[0]) for f, b in best.items()}


def machine_line():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
    isa = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags)
    mem = int(open("/proc/meminfo").readline().split()[1]) / 2**20
    return f"{os.cpu_count()} cores, {cpu} ({isa}), {mem:.1f} GiB"


def measure_flops(workloads, out):
    """FLOPs per step (torch2_flops.py) and the torch.mm peaks (flops.py) under the 2.11 venv."""
    fl = {}
    for w in workloads:
        o = subprocess.run([VENV_PY, "bench/torch2_flops.py", WORKLOADS[w]["config"]], cwd=ROOT, env=clean_env(),
                           capture_output=True, text=True, check=True).stdout.split()
        fl[w] = int(o[1])
    peaks = {}
    for t in (1, 2):
        for bf16 in (False, True):
            cmd = [VENV_PY, "bench/flops.py", "peak", str(t), "2048"] + (["bf16"] if bf16 else [])
            o = subprocess.run(cmd, cwd=ROOT, env=clean_env(), capture_output=True, text=True, check=True).stdout
            peaks[f"{t} {'bf16-mixed' if bf16 else '32'}"] = float(o.split()[0])
    with open(out, "a") as f:
        f.write(json.dumps(dict(phase="flops", train_flops_per_step=fl, peak_flops=peaks)) + "\n")


def fmt(v, nd=1):
    return f"{v:,.{nd}f}" if v is not None else "-"


def report(tsv, results, argv):
    recs = [json.loads(l) for l in open(tsv) if l.strip()]
    meta = next((r for r in reversed(recs) if r["phase"] == "meta"), {})
    flops = next((r for r in reversed(recs) if r["phase"] == "flops"), None)
    lines = ["<!-- vs_torch2:begin (written by bench/vs_torch2.py) -->",
             "## trainrun against PyTorch 2.11 eager and torch.compile (CPU)", "",
             f"Written by `{meta.get('command', 'bench/vs_torch2.py')}` on {meta.get('date', '?')}: "
             f"{meta.get('machine', '?')}; {meta.get('versions', '')}. Load average at the start "
             f"{meta.get('load_start', '?')}, at the end {meta.get('load_end', '?')}. Forms and settings: the "
             "docstring of bench/vs_torch2.py (same work in every form: no evaluation, EMA or checkpoints). "
             "Cells: median (min..max) over the repetitions of the measured phase; each form at the best setting "
             "of its sweep (one short run of each of threads 1/2 x precision 32/bf16-mixed x optimizer form). "
             "Ratios are of medians. Raw records: bench/vs_torch2.tsv.", ""]
    for w in WORKLOADS:
        rs = [r for r in recs if r.get("workload") == w and r["phase"] == "measure"]
        if not rs:
            continue
        lines += [f"### {w}: {WORKLOADS[w]['what']}", "",
                  f"{WORKLOADS[w]['warm']} warm-up + {WORKLOADS[w]['steps']} timed steps a run.", "",
                  "| form | best setting (sweep) | steps/s | / trainrun-2.11 | compile s | peak RSS MiB | "
                  "time to first step s | train GFLOP/s | of peak |",
                  "|---|---|---|---|---|---|---|---|---|"]
        med = {}
        for form in FORMS:
            fr = [r for r in rs if r["form"] == form]
            if fr:
                med[form] = statistics.median(r["steps_per_s"] for r in fr)
        base = med.get("trainrun-2.11")
        for form in FORMS:
            fr = [r for r in rs if r["form"] == form]
            if not fr:
                continue
            v = [r["steps_per_s"] for r in fr]
            rss = statistics.median(r["peak_rss_kib"] for r in fr) / 1024
            comp = [r["compile_s"] for r in fr if r["compile_s"] is not None and form == "compile-2.11"]
            ttfs = [r["wall_s"] for r in recs if r["phase"] == "ttfs" and r["workload"] == w and r["form"] == form]
            cold = [r["wall_s"] for r in recs if r["phase"] == "ttfs-cold" and r["workload"] == w
                    and r["form"] == form]
            ttfs_cell = f"{statistics.median(ttfs):.2f} ({min(ttfs):.2f}..{max(ttfs):.2f})" if ttfs else "-"
            if cold:
                ttfs_cell += f"; cold cache {statistics.median(cold):.1f}"
            setting = fr[0]["setting"]
            gf, frac = "-", "-"
            if flops:
                t, p, _ = parse_setting(setting)
                g = flops["train_flops_per_step"][w] * med[form] / 1e9
                peak = flops["peak_flops"][f"{t} {p}"] / 1e9
                gf, frac = f"{g:.1f}", f"{g / peak:.3f}"
            lines.append(f"| {form} | {setting} | {fmt(med[form])} ({fmt(min(v))}..{fmt(max(v))}) | "
                         f"{med[form] / base if base else float('nan'):.3f} | "
                         f"{fmt(statistics.median(comp)) if comp else '-'} | {rss:.0f} | {ttfs_cell} | {gf} | "
                         f"{frac} |")
        ttfs_med = {f: statistics.median(r["wall_s"] for r in recs if r["phase"] == "ttfs" and r["workload"] == w
                                         and r["form"] == f)
                    for f in FORMS if any(r["phase"] == "ttfs" and r["workload"] == w and r["form"] == f
                                          for r in recs)}
        rss_med = {f: statistics.median(r["peak_rss_kib"] for r in rs if r["form"] == f) for f in med}
        t = "trainrun-2.11"
        if t in med and "eager-2.11" in med and "compile-2.11" in med:
            lines += ["", f"Targets: {t} / eager-2.11 steps/s **{med[t] / med['eager-2.11']:.3f}** (>= 1.2); "
                      f"/ compile-2.11 **{med[t] / med['compile-2.11']:.3f}** (>= 1.0); time to first step "
                      f"{t} / eager-2.11 **{ttfs_med[t] / ttfs_med['eager-2.11']:.3f}** (<= 0.5), / compile-2.11 "
                      f"{ttfs_med[t] / ttfs_med['compile-2.11']:.3f}; peak RSS {t} / eager-2.11 "
                      f"**{rss_med[t] / rss_med['eager-2.11']:.3f}** (<= 1.0)."]
        sw = [r for r in recs if r["phase"] == "sweep" and r["workload"] == w]
        if sw:
            lines += ["", f"Sweep ({WORKLOADS[w]['sweep']} timed steps a run, one run each; steps/s): " + "; ".join(
                f"{f}: " + ", ".join(f"{r['setting']} {r['steps_per_s']:.1f}" for r in sw if r["form"] == f)
                for f in FORMS if any(r["form"] == f for r in sw)) + "."]
        lines.append("")
    if flops:
        pk = ", ".join(f"{k.replace(' ', ' threads, ')}: {v / 1e9:.1f} GFLOP/s"
                       for k, v in flops["peak_flops"].items())
        fl = ", ".join(f"{w} {v / 1e9:.3f} GFLOP" for w, v in flops["train_flops_per_step"].items())
        lines += [f"FLOPs per training step (FlopCounterMode: matrix products and convolutions only): {fl}. "
                  f"Peaks of a 2048^3 torch.mm under the 2.11 wheel: {pk}.", ""]
    lines.append("<!-- vs_torch2:end -->")
    text = open(results).read() if os.path.exists(results) else ""
    b, e = text.find("<!-- vs_torch2:begin"), text.find("<!-- vs_torch2:end -->")
    section = "\n".join(lines) + "\n"
    if b >= 0 and e >= 0:
        text = text[:b] + section + text[e + len("<!-- vs_torch2:end -->\n"):]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(results, "w") as f:
        f.write(text)
    print(f"vs_torch2: wrote {results}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-sweep", action="store_true", help="reuse the best settings of the .tsv's last sweep")
    ap.add_argument("--sweep-rounds", type=int, default=1,
                    help="runs of every setting in the sweep (its best is the highest of them)")
    ap.add_argument("--no-flops", action="store_true")
    ap.add_argument("--tsv", default=os.path.join(ROOT, "bench/vs_torch2.tsv"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench/RESULTS.md"))
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    if a.report_only:
        return report(a.tsv, a.results, sys.argv)
    workloads = a.workloads.split(",")
    forms = a.forms.split(",")
    for f in forms:
        if f.startswith("trainrun") and not os.access(os.path.join(ROOT, BINS[f]), os.X_OK):
            raise SystemExit(f"vs_torch2: {BINS[f]} missing: build it (scripts/setup.sh, scripts/setup.sh --torch 2.11)")
    if not os.access(VENV_PY, os.X_OK):
        raise SystemExit(f"vs_torch2: {VENV_PY} missing: scripts/setup.sh --torch 2.11 makes it")
    old = [json.loads(l) for l in open(a.tsv)] if (a.no_sweep and os.path.exists(a.tsv)) else []
    ver = "; ".join(subprocess.run([os.path.join(ROOT, BINS[f]), "--version"], capture_output=True,
                                   text=True).stdout.strip() for f in forms if f in BINS)
    torch_ver = subprocess.run([VENV_PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                               text=True).stdout.strip()
    meta = dict(phase="meta", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine=machine_line(),
                versions=f"{ver}; PyTorch {torch_ver} (venv)",
                command="/usr/bin/python3 bench/vs_torch2.py " + " ".join(sys.argv[1:]),
                load_start=" ".join(open("/proc/loadavg").read().split()[:3]))
    if not a.no_sweep and os.path.exists(a.tsv):
        os.rename(a.tsv, a.tsv + ".old")
    with tempfile.TemporaryDirectory(prefix="vs_torch2-") as tmp:
        b = Bench(tmp, a.tsv)
        for r in old:
            if r["phase"] == "sweep":
                with open(a.tsv, "a") as f:
                    f.write(json.dumps(r) + "\n")
        for w in workloads:
            print(f"{w}: {WORKLOADS[w]['what']}", flush=True)
            if not a.no_sweep:
                for rnd in range(a.sweep_rounds):
                    for form in forms:
                        if form != "compile-2.11":
                            for s in settings(form):
                                b.run("sweep", form, w, s, rnd, WORKLOADS[w]["sweep"])
                if "compile-2.11" in forms:  # at eager's best threads and precision: see the docstring
                    t, p, _ = best_settings([json.loads(l) for l in open(a.tsv)], w).get("eager-2.11", (1, "32", ""))
                    for v in ("model fused", "model+optimizer"):
                        b.run("sweep", "compile-2.11", w, (t, p, v), 0, WORKLOADS[w]["sweep"])
            best = best_settings([json.loads(l) for l in open(a.tsv)], w)
            for rep in range(1, a.reps + 1):
                for form in forms:
                    b.run("measure", form, w, best[form], rep, WORKLOADS[w]["steps"])
            for rep in range(1, a.reps + 1):
                for form in forms:
                    b.run("ttfs", form, w, best[form], rep, 0)
            if "compile-2.11" in forms:
                b.run("ttfs-cold", "compile-2.11", w, best["compile-2.11"], 1, 0, cold=True)
        if not a.no_flops:
            measure_flops(workloads, a.tsv)
    meta["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    with open(a.tsv, "a") as f:
        f.write(json.dumps(meta) + "\n")
    report(a.tsv, a.results, sys.argv)


if __name__ == "__main__":
    main()
