#!/usr/bin/python3
"""Helpers of bench/memory.sh and bench/memory_long.sh (standard library only).

    memory.py summary MEMORY.tsv   -> medians per (section, workload, form), peak RSS, and the ratios issue 15 asks
                                      for: evalpass base/cache, convnet cache/raw, mlp cache/base, backtrace cost
                                      (steps per CPU second: see bench/memory.sh)
    memory.py flat RUN_DIR CYCLE   -> a long run's memory: allocated at every train record from the baseline on
                                      against the baseline (to the byte), reserved's peak up to step CYCLE (the first
                                      eval + checkpoint cycle) and after it, RSS, warnings, memory_report.json growth
"""
import json
import os
import statistics
import sys


def summary(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("section"):
                continue
            s, form, w, rep, value, unit, rss = line.rstrip("\n").split("\t")
            rows.append((s, form, w, float(value), unit, int(rss)))
    med = {}
    for key in sorted({(r[0], r[2], r[1]) for r in rows}):
        vals = [r[3] for r in rows if (r[0], r[2], r[1]) == key]
        rss = [r[5] for r in rows if (r[0], r[2], r[1]) == key]
        unit = next(r[4] for r in rows if (r[0], r[2], r[1]) == key)
        med[key] = statistics.median(vals)
        print(f"{key[0]:10s} {key[1]:8s} {key[2]:7s} median {med[key]:10.3f} {unit:8s} (n={len(vals)}: "
              f"{', '.join(f'{v:.3f}' for v in vals)})  peak RSS median {statistics.median(rss) / 1024:.1f} MiB")

    def ratio(what, a, b):
        if a in med and b in med and med[b] > 0:
            print(f"{what}: {med[a] / med[b]:.3f}")

    print()
    ratio("evalpass speed-up in CPU seconds (base / cache)", ("evalpass", "convnet", "base"),
          ("evalpass", "convnet", "cache"))
    ratio("evalpass speed-up in wall seconds (base / cache; shared machine)", ("evalpass_wall", "convnet", "base"),
          ("evalpass_wall", "convnet", "cache"))
    ratio("evalpass minor page faults (base / cache)", ("evalpass_faults", "convnet", "base"),
          ("evalpass_faults", "convnet", "cache"))
    ratio("convnet training steps/s, cache / raw libtorch", ("step", "convnet", "cache"), ("step", "convnet", "raw"))
    ratio("convnet training steps/s, cache / base", ("step", "convnet", "cache"), ("step", "convnet", "base"))
    ratio("mlp_256 training steps/s, cache / base", ("step", "mlp_256", "cache"), ("step", "mlp_256", "base"))
    ratio("mlp_256 training steps/s, cache / raw libtorch", ("step", "mlp_256", "cache"), ("step", "mlp_256", "raw"))
    ratio("mlp_256 steps/s with watchdog.backtrace, bt / cache", ("backtrace", "mlp_256", "bt"),
          ("backtrace", "mlp_256", "cache"))
    for w in ("convnet", "mlp_256"):
        for form in ("cache", "base"):
            a = [r[5] for r in rows if r[0] == "step" and r[2] == w and r[1] == form]
            e = [r[5] for r in rows if r[0] == "step" and r[2] == w and r[1] == "eager"]
            if a and e:
                print(f"{w} peak RSS, trainrun {form} / eager: {statistics.median(a) / statistics.median(e):.3f} "
                      f"({statistics.median(a) / 1024:.1f} MiB vs {statistics.median(e) / 1024:.1f} MiB)")


def flat(run_dir, cycle):
    cycle = int(cycle)
    base = None
    train = []
    warns = 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "watchdog":
                if r.get("event") == "baseline":
                    base = (r["step"], r["allocated"])
                elif r.get("event") in ("warn", "limit"):
                    warns += 1
            if r.get("type") == "train":
                train.append((r["step"], r["allocated"], r.get("reserved", 0), r.get("rss", 0)))
    if base is None:
        raise SystemExit(f"memory.py: {run_dir}: no baseline")
    after = [t for t in train if t[0] >= base[0]]
    dev = [t[1] - base[1] for t in after]
    res_early = max((t[2] for t in train if t[0] <= cycle), default=0)
    res_late = max((t[2] for t in train if t[0] > cycle), default=0)
    rss_early = max((t[3] for t in train if t[0] <= cycle), default=0)
    rss_late = max((t[3] for t in train if t[0] > cycle), default=0)
    growth = []
    rp = os.path.join(run_dir, "memory_report.json")
    if os.path.exists(rp):
        with open(rp) as f:
            growth = json.load(f).get("growth", [])
    print(f"baseline {base[1]} B at step {base[0]}; {len(after)} train records after it, up to step {train[-1][0]}")
    print(f"allocated - baseline: min {min(dev)} B, max {max(dev)} B (flat to the byte: {min(dev) == max(dev) == 0})")
    print(f"reserved peak up to step {cycle}: {res_early} B; after it: {res_late} B "
          f"(stopped growing: {res_late <= res_early})")
    print(f"RSS peak up to step {cycle}: {rss_early / 2**20:.1f} MiB; after it: {rss_late / 2**20:.1f} MiB")
    print(f"warnings/limits: {warns}; memory_report.json growth entries: {len(growth)}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "flat":
        flat(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
