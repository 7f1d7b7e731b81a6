#!/usr/bin/python3
"""Helpers of bench/run.sh (standard library only).

    report.py trainrun RUN_DIR WARMUP STEPS BATCH   -> "steps_per_s samples_per_s outside_share step_only_samples_per_s"
    report.py checkpoints RUN_DIR                   -> one "bytes seconds" line per checkpoint record
    report.py ckpt-floor CKPT_DIR SCRATCH_DIR       -> "write_fsync_seconds sha256_seconds": the same files written
                                                       afresh, each fsynced, then the directory; and hashed
    report.py write RECORDS.tsv MACHINE.txt OUT.md  -> writes RESULTS.md from the collected records

trainrun's timed window is read off RUN_DIR/metrics.jsonl: run.sh sets log.every_steps = WARMUP, so there is a
train record at step WARMUP and one at the last step (WARMUP + STEPS); their `time_s` (training seconds since the
loop started, every cost of the loop included) differ by the wall time of exactly the STEPS timed steps, the same
window bench/raw_libtorch.cpp and bench/eager.py time. outside_share is from summary.json, over the whole run:
1 - (wall-clock rate) / (rate inside trs_train_step), i.e. the share of the loop's wall time spent outside the
step: the batch gather, lr schedule, logging, watchdog sampling.
"""
import json
import os
import statistics
import sys


def trainrun(run_dir, warmup, steps, batch):
    warmup, steps, batch = int(warmup), int(steps), int(batch)
    t = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "train":
                t[r["step"]] = r["time_s"]
    if warmup not in t or warmup + steps not in t:
        raise SystemExit(f"report.py: {run_dir}: no train record at step {warmup} or {warmup + steps}")
    secs = t[warmup + steps] - t[warmup]
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    wall_rate = s["steps"] * batch / s["train_seconds"]
    outside = 1.0 - wall_rate / s["samples_per_s"]
    print(f"{steps / secs:.2f} {steps * batch / secs:.1f} {outside:.4f} {s['samples_per_s']:.1f}")


def checkpoints(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "checkpoint":
                print(r["bytes"], r["seconds"])


def ckpt_floor(ckpt_dir, scratch):
    """What any crash-safe writer of the same files pays: write each, fsync each, fsync the directory; and what
    hashing them (SHA-256, OpenSSL through hashlib) costs on its own."""
    import hashlib
    import time
    data = {}
    for name in sorted(os.listdir(ckpt_dir)):
        with open(os.path.join(ckpt_dir, name), "rb") as f:
            data[name] = f.read()
    os.makedirs(scratch, exist_ok=True)
    t0 = time.perf_counter()
    for name, b in data.items():
        fd = os.open(os.path.join(scratch, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(b)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(scratch, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    t1 = time.perf_counter()
    for b in data.values():
        hashlib.sha256(b).digest()
    t2 = time.perf_counter()
    print(f"{t1 - t0:.6f} {t2 - t1:.6f}")


def med(v):
    return statistics.median(v) if v else float("nan")


def fmt(x, digits=3):
    if x != x:
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


WORKLOADS = [("mlp_256", "MLP 784-256-10, batch 64"), ("convnet", "convnet (models/convnet.yaml), batch 128"),
             ("data_bound", "data-bound: linear 784-10, batch 1024")]


def write(records_path, machine_path, out_path):
    # records: section form workload threads rep steps_per_s samples_per_s share rss_kb extra
    rows = []
    with open(records_path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 10:
                continue
            rows.append(dict(section=p[0], form=p[1], workload=p[2], threads=p[3], rep=int(p[4]),
                             sps=float(p[5]), samples=float(p[6]), share=float(p[7]), rss=float(p[8]), extra=p[9],
                             minflt=float(p[10]) if len(p) > 10 else float("nan"),
                             sys=float(p[11]) if len(p) > 11 else float("nan")))

    def sel(section, form, workload, threads=None):
        return [r for r in rows if r["section"] == section and r["form"] == form and r["workload"] == workload
                and (threads is None or r["threads"] == threads)]

    def m(section, form, w, key="sps", threads=None):
        # a timed-out run's rate is its upper bound; it has no share or RSS
        return med([r[key] for r in sel(section, form, w, threads) if r[key] == r[key]])

    def cell(section, form, w, threads=None):
        rs = sel(section, form, w, threads)
        if not rs:
            return "n/a"
        v = [r["sps"] for r in rs]
        c = f"{fmt(med(v))} ({fmt(min(v))}..{fmt(max(v))})"
        to = sum(r["extra"] == "timeout" for r in rs)
        if to:
            c = ("< " if to == len(rs) else "") + c + f" [{to} of {len(rs)} timed out]"
        return c

    def paired(section, w, a, b, threads=None):
        x = {r["rep"]: r["sps"] for r in sel(section, a, w, threads)}
        y = {r["rep"]: r["sps"] for r in sel(section, b, w, threads)}
        q = [x[k] / y[k] for k in x if k in y and y[k] > 0]
        return f"{med(q):.3f} ({min(q):.3f}..{max(q):.3f})" if q else "n/a"

    def ratio(x, y):
        return f"{x / y:.3f}" if x == x and y == y and y > 0 else "n/a"

    def nreps(section):
        reps = {r["rep"] for r in rows if r["section"] == section}
        return len(reps)

    with open(machine_path) as f:
        machine = f.read().rstrip("\n")
    L = []
    add = L.append
    add("# bench/run.sh results: trainrun vs a raw libtorch loop vs PyTorch eager")
    add("")
    add("Written by `bench/run.sh` (issue 8). **The machine is a shared, noisy 2-core VM: read the ratios, not the "
        "absolute rates**, which move by 10-30% from one run of the script to the next. Every comparison was run "
        "interleaved (raw, eager, trainrun, raw, eager, trainrun, ...) so that noise hits all forms alike; cells give "
        "the median and (min..max) over the repetitions, ratios are of medians unless marked paired (the median of "
        "each repetition's ratio between runs that ran back to back).")
    add("")
    add("```")
    add(machine)
    add("```")
    add("")
    add("Forms: **raw** = `bench/raw_libtorch.cpp` (plain libtorch C++ loop, no harness, the limit for any harness); "
        "**eager** = `bench/eager.py` (PyTorch eager, Debian's python3-torch over the same libtorch); **trainrun** = "
        "`build/trainrun bench/configs/WORKLOAD.yaml` (the CLI with its defaults: `threads: 0` = 1 intra-op "
        "thread, counting allocator and watchdog on; no eval, no checkpoints, no progress line). All three: 1 "
        "intra-op + 1 inter-op thread, OpenBLAS pinned to 1 thread, AdamW (lr 1e-3, weight decay 1e-4), the 60000 "
        "training images normalised once in memory, a new random order every epoch, `loss.item()` every step. "
        "Rates are wall clock over the timed steps after a warm-up, batch preparation included (trainrun: the "
        "`time_s` difference of its `metrics.jsonl` records at the end of the warm-up and at the last step).")
    add("")

    add(f"## 1. Throughput, default environment (steps/s; n = {nreps('main')} per form)")
    add("")
    add("embed = the same loop in a C program through trainrun's embedding API (`bench/embed_trainer.c`: its own data "
        "and batches, `trainrun_trainer_train_step` each step), built against an installed trainrun with pkg-config.")
    add("")
    add("| workload | raw | eager | trainrun | embed | trainrun/raw | trainrun/eager | embed/raw | eager/raw |")
    add("|---|---|---|---|---|---|---|---|---|")
    for w, label in WORKLOADS:
        if not sel("main", "raw", w):
            continue
        r_, e_, t_ = (m("main", f, w) for f in ("raw", "eager", "trainrun"))
        em = m("main", "embed", w) if sel("main", "embed", w) else float("nan")
        add(f"| {label} | {cell('main', 'raw', w)} | {cell('main', 'eager', w)} | {cell('main', 'trainrun', w)} | "
            f"{cell('main', 'embed', w) if sel('main', 'embed', w) else '-'} | "
            f"**{ratio(t_, r_)}** | **{ratio(t_, e_)}** | {ratio(em, r_)} | {ratio(e_, r_)} |")
    add("")
    add("Paired: " + "; ".join(f"{w}: trainrun/raw {paired('main', w, 'trainrun', 'raw')}, trainrun/eager "
                               f"{paired('main', w, 'trainrun', 'eager')}" for w, _ in WORKLOADS
                               if sel("main", "raw", w)) + ".")
    add("")

    if any(r["section"] == "malloc" for r in rows):
        add(f"## 2. Throughput with glibc malloc pinned (steps/s; n = {nreps('malloc')} per form)")
        add("")
        add("`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456` for every "
            "form (see the analysis at the end: with glibc's defaults, whether a step's large tensors are mmap'd and page-faulted "
            "afresh every step depends on the process's history).")
        add("")
        add("| workload | raw | eager | trainrun | trainrun/raw | trainrun/eager | pinned/default: raw, eager, trainrun |")
        add("|---|---|---|---|---|---|---|")
        for w, label in WORKLOADS:
            if not sel("malloc", "raw", w):
                continue
            r_, e_, t_ = (m("malloc", f, w) for f in ("raw", "eager", "trainrun"))
            gains = ", ".join(ratio(m("malloc", f, w), m("main", f, w)) for f in ("raw", "eager", "trainrun"))
            add(f"| {label} | {cell('malloc', 'raw', w)} | {cell('malloc', 'eager', w)} | "
                f"{cell('malloc', 'trainrun', w)} | **{ratio(t_, r_)}** | **{ratio(t_, e_)}** | {gains} |")
        add("")

        add("Why (same runs): minor page faults of the whole process (thousands) / system CPU seconds, median. "
            "The data set alone is ~46 k faults (188 MB); what is above that in a convnet run is step tensors "
            "mmap'd and faulted in afresh every step.")
        add("")
        add("| workload | malloc | raw | eager | trainrun |")
        add("|---|---|---|---|---|")
        for w, label in WORKLOADS:
            for section, alloc in (("main", "default"), ("malloc", "pinned")):
                if sel(section, "raw", w):
                    add(f"| {label} | {alloc} | " + " | ".join(
                        f"{m(section, f, w, 'minflt') / 1000:.0f} k / {m(section, f, w, 'sys'):.2f} s"
                        for f in ("raw", "eager", "trainrun")) + " |")
        add("")

    add("## 3. Where trainrun's overhead over the raw loop goes (default environment, paired ratios of steps/s)")
    add("")
    add("raw_acc = the raw loop also counting correct predictions (argmax, eq, sum, item), as trainrun's step does; "
        "trainrun_nocount = trainrun with `TRAINRUN_COUNTING=0 watchdog.enabled=false` (libtorch's own allocator, "
        "no memory sampling).")
    add("")
    add("| workload | raw_acc/raw (accuracy count) | trainrun_nocount/raw_acc (loop, gather, per-step checks, "
        "logging) | trainrun/trainrun_nocount (counting allocator + watchdog) | trainrun/raw (all) |")
    add("|---|---|---|---|---|")
    for w, label in WORKLOADS:
        if sel("main", "raw_acc", w):
            add(f"| {label} | {paired('main', w, 'raw_acc', 'raw')} | "
                f"{paired('main', w, 'trainrun_nocount', 'raw_acc')} | "
                f"{paired('main', w, 'trainrun', 'trainrun_nocount')} | {paired('main', w, 'trainrun', 'raw')} |")
    add("")
    add("Medians (steps/s): " + "; ".join(
        f"{w}: " + ", ".join(f"{f} {fmt(m('main', f, w))}" for f in ("raw", "raw_acc", "trainrun_nocount", "trainrun"))
        for w, _ in WORKLOADS if sel("main", "raw_acc", w)) + ".")
    add("")

    add("## 4. Batch preparation share of the timed wall time (median)")
    add("")
    add("raw and eager time their randperm + index_select; for trainrun it is the share of the loop's wall time "
        "spent outside `trs_train_step` (the batch gather, lr schedule, logging, watchdog), from `summary.json` "
        "(`train_seconds` vs `samples_per_s` in train steps).")
    add("")
    add("| workload | malloc | raw | eager | trainrun |")
    add("|---|---|---|---|---|")
    for w, label in WORKLOADS:
        for section, alloc in (("main", "default"), ("malloc", "pinned")):
            if not sel(section, "raw", w):
                continue
            c = [f"{100 * m(section, f, w, 'share'):.1f}%" for f in ("raw", "eager", "trainrun")]
            add(f"| {label} | {alloc} | {c[0]} | {c[1]} | {c[2]} |")
    add("")

    add(f"## 5. Thread sweep, MLP 784-256-10 batch 64 (steps/s; n = {nreps('sweep-default')}; BLAS pinned to 1 "
        "thread in every form)")
    add("")
    add("Each run has a time limit; a run that hit it counts with the upper bound (warm-up + steps) / limit as "
        "its rate, and its setting is not run again in later repetitions.")
    add("")
    add("| form | threads=1 | threads=2 | threads=1, pinned malloc | threads=2, pinned malloc | best |")
    add("|---|---|---|---|---|---|")
    best = {}
    for form in ("raw", "eager", "trainrun"):
        cand = {}
        cells = []
        for alloc in ("default", "pinned"):
            for th in ("1", "2"):
                cand[(th, alloc)] = m("sweep-" + alloc, form, "mlp_256", threads=th)
                cells.append(cell("sweep-" + alloc, form, "mlp_256", th))
        k = max((k for k in cand if cand[k] == cand[k]), key=lambda k: cand[k], default=None)
        best[form] = (cand[k], k) if k else (float("nan"), None)
        add(f"| {form} | " + " | ".join(cells) + f" | {k[0] if k else '?'} thread(s), {k[1] if k else '?'} malloc |")
    add("")
    if all(best[f][1] for f in best):
        d1 = m("sweep-default", "trainrun", "mlp_256", threads="1")
        e_def = max(m("sweep-default", "eager", "mlp_256", threads=t) for t in ("1", "2"))
        add(f"Each at its best setting: trainrun/eager = **{ratio(best['trainrun'][0], best['eager'][0])}**, "
            f"trainrun/raw = {ratio(best['trainrun'][0], best['raw'][0])}; with glibc's default malloc for all, "
            f"trainrun/eager = {ratio(max(m('sweep-default', 'trainrun', 'mlp_256', threads=t) for t in ('1', '2')), e_def)}. "
            f"trainrun's defaults (`threads: 0` = 1 thread, default malloc) vs its best: **{ratio(d1, best['trainrun'][0])}**.")
    add("")

    add("## 6. Checkpoint save: the convnet with AdamW state vs `dd ... conv=fsync` of the same MiB")
    add("")
    ck = [r for r in rows if r["section"] == "ckpt" and r["form"] == "trainrun"]
    dd = [r for r in rows if r["section"] == "ckpt" and r["form"] == "dd"]
    if ck and dd:
        cs, ds = [r["sps"] for r in ck], [r["sps"] for r in dd]
        nbytes = int(ck[0]["samples"])
        add("| what | seconds, median (min..max) | n |")
        add("|---|---|---|")
        add(f"| trainrun checkpoint, {nbytes:,} bytes (`checkpoint` records of `metrics.jsonl`: model + optimizer + "
            f"rng safetensors, trainer.json, MANIFEST with SHA-256, each file and both directories fsynced, "
            f"rename, prune) | {med(cs):.4f} ({min(cs):.4f}..{max(cs):.4f}) | {len(cs)} |")
        add(f"| `dd if=/dev/zero of=FILE bs=1M count={ck[0]['extra']} conv=fsync` (dd's own timing, which includes "
            f"the fsync) | {med(ds):.4f} ({min(ds):.4f}..{max(ds):.4f}) | {len(ds)} |")
        fl = [r["sps"] for r in rows if r["section"] == "ckpt" and r["form"] == "files_fsync"]
        hs = [r["sps"] for r in rows if r["section"] == "ckpt" and r["form"] == "sha256"]
        if fl and hs:
            add(f"| the same files written afresh by Python, each "
                f"fsynced, then the directory (the floor for this multi-file, crash-safe layout) | "
                f"{med(fl):.4f} ({min(fl):.4f}..{max(fl):.4f}) | {len(fl)} |")
            add(f"| SHA-256 of the same bytes (hashlib / OpenSSL), no I/O | {med(hs):.4f} ({min(hs):.4f}..{max(hs):.4f}) "
                f"| {len(hs)} |")
        add("")
        add(f"Checkpoint / dd (medians): **{med(cs) / med(ds):.2f}x**." + (
            f" Floor of the layout / dd: {med(fl) / med(ds):.2f}x; (floor + SHA-256) / dd: "
            f"{(med(fl) + med(hs)) / med(ds):.2f}x." if fl and hs else ""))
    add("")

    add("## 7. Peak RSS (`/usr/bin/time -f %M`, median over the throughput runs)")
    add("")
    add("| workload | malloc | raw | eager | trainrun | trainrun/eager |")
    add("|---|---|---|---|---|---|")
    for w, label in WORKLOADS:
        for section, alloc in (("main", "default"), ("malloc", "pinned")):
            if not sel(section, "raw", w):
                continue
            v = {f: m(section, f, w, "rss") / 1024 for f in ("raw", "eager", "trainrun")}
            add(f"| {label} | {alloc} | {v['raw']:.0f} MiB | {v['eager']:.0f} MiB | {v['trainrun']:.0f} MiB | "
                f"**{v['trainrun'] / v['eager']:.2f}** |")
    add("")

    # Section 8 and 9 come from the slower side benchmarks, run on their own (they write these files).
    here = os.path.dirname(os.path.abspath(out_path))
    for title, name in (("## 8. Harness overhead in instructions (callgrind; `bench/callgrind_overhead.sh`)",
                         "callgrind_overhead.md"),
                        ("## 9. Time to 0.90 test accuracy, convnet (`bench/time_to_accuracy.sh`)",
                         "time_to_accuracy.md")):
        path = os.path.join(here, name)
        add(title)
        add("")
        if os.path.exists(path):
            with open(path) as f:
                add(f.read().rstrip("\n"))
        else:
            add(f"(not run: bench/{name} is missing)")
        add("")

    # Keep the hand-written analysis (between the markers) across re-runs of the script.
    analysis = ""
    if os.path.exists(out_path):
        with open(out_path) as f:
            old = f.read()
        a, b = old.find("<!-- analysis:begin -->"), old.find("<!-- analysis:end -->")
        if a >= 0 and b > a:
            analysis = old[a:b + len("<!-- analysis:end -->")]
    if not analysis:
        analysis = ("<!-- analysis:begin -->\n## What the numbers say\n\n(written by hand after a run; "
                    "bench/run.sh keeps this section when it rewrites the tables above)\n<!-- analysis:end -->")
    with open(out_path, "w") as f:
        f.write("\n".join(L) + "\n" + analysis + "\n")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "trainrun" and len(sys.argv) == 6:
        trainrun(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "checkpoints":
        checkpoints(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "ckpt-floor":
        ckpt_floor(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "write":
        write(*sys.argv[2:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
