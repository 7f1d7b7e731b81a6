#!/usr/bin/python3
"""metrics.csv against metrics.jsonl with Python's own csv and json modules (no pandas):
usage: tests/check_metrics_csv.py RUN_DIR. Applies the documented JSONL rule (a resume record at step R supersedes
every earlier record with step > R and every earlier partial train record), then requires one CSV row per train
or eval record, in order, holding the same numbers. Exit 0 and "metrics.csv OK: N rows" when they agree."""
import csv
import json
import math
import sys

run = sys.argv[1]
kept = []
with open(run + "/metrics.jsonl") as f:
    for line in f:
        r = json.loads(line)
        if r["type"] == "resume":
            kept = [k for k in kept if k["step"] <= r["step"] and not k.get("partial")]
        kept.append(r)
want = []
for r in kept:
    if r["type"] == "train":
        row = {"train_loss": r["loss"], "train_accuracy": r["accuracy"], "lr": r["lr"],
               "samples_per_s": r["samples_per_s"], "time_s": r["time_s"]}
    elif r["type"] == "eval" and r["split"] in ("val", "test"):
        prefix = r["split"] + ("_ema" if r.get("weights") == "ema" else "") + "_"
        row = {prefix + k: r[k] for k in ("loss", "accuracy", "top_k_accuracy", "micro_f1", "macro_f1", "mse", "mae")
               if k in r}
    else:
        continue
    for k in ("allocated", "peak", "reserved", "rss"):
        if k in r:
            row[k] = r[k]
    row["step"] = r["step"]
    row["epoch"] = r["epoch"]
    want.append(row)
with open(run + "/metrics.csv", newline="") as f:
    rows = list(csv.DictReader(f))
assert len(rows) == len(want), f"{len(rows)} CSV rows, {len(want)} records"
for i, (got, exp) in enumerate(zip(rows, want)):
    for k, v in exp.items():
        cell = got.get(k)
        assert cell is not None, f"row {i}: no column {k}"
        if v is None:
            assert cell == "", f"row {i} {k}: {cell!r} for null"
        else:
            assert float(cell) == float(v), f"row {i} {k}: {cell} != {v!r}"
    for k, cell in got.items():
        assert k in exp or cell == "", f"row {i}: {k}={cell!r} not in its record"
print(f"metrics.csv OK: {len(rows)} rows")
