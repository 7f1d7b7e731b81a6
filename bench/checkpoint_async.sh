#!/usr/bin/env bash
# Checkpoint cost against `dd conv=fsync` of the same bytes (issue 20), written to bench/checkpoint_async.md:
#   - the loop's stall per save (`stall_s` of the checkpoint records: the snapshot of the state) with
#     checkpoint.async true (the default) and false (the loop writes: stall = the whole save);
#   - the complete save (`seconds`: snapshot to renamed directory) in both modes;
#   - `dd if=/dev/zero of=FILE bs=1M count=<same MiB> conv=fsync` in the same scratch directory;
#   - SHA-256 (format 1) vs XXH3-128 (format 2) of the same number of bytes in memory (bench/hash_speed.c).
# Workload: bench/configs/convnet.yaml (models/convnet.yaml with AdamW state: ~4.8 MiB a checkpoint), a save every
# 8 steps, 6 saves a run; the runs of both modes alternate (async, sync, dd, async, sync, dd, ...) so that the noise
# of a shared machine hits them alike. Medians over every save of every run.
#
#   bench/checkpoint_async.sh            (CKPT_REPS=3, TRAINRUN=build/trainrun, BENCH_TMP=scratch parent)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${CKPT_REPS:-3}
TRAINRUN=${TRAINRUN:-build/trainrun}
OUT=${CKPT_OUT:-bench/checkpoint_async.md}
PY=/usr/bin/python3
tmp=$(mktemp -d -p "${BENCH_TMP:-$PWD}" .ckpt-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cc -O2 bench/hash_speed.c -lxxhash -lcrypto -o "$tmp/hash_speed"
: >"$tmp/records.tsv"
for i in $(seq 1 "$REPS"); do
  for mode in true false; do
    name=$mode-$i
    nice "$TRAINRUN" bench/configs/convnet.yaml train.max_steps=48 log.every_steps=8 checkpoint.every_steps=8 \
      checkpoint.keep_last=2 checkpoint.async=$mode "run.dir=$tmp/runs" "run.name=$name" >"$tmp/out" 2>"$tmp/err" ||
      { cat "$tmp/err" >&2; exit 1; }
    $PY - "$tmp/runs/$name/metrics.jsonl" "$mode" >>"$tmp/records.tsv" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "checkpoint":
        print("async" if sys.argv[2] == "true" else "sync", r["bytes"], r["stall_s"], r["seconds"], sep="\t")
PYEOF
  done
  bytes=$(tail -1 "$tmp/records.tsv" | cut -f2)
  mib=$(( (bytes + 1048575) / 1048576 ))
  for k in 1 2 3 4 5 6; do
    secs=$(dd if=/dev/zero of="$tmp/dd.bin" bs=1M count="$mib" conv=fsync 2>&1 | awk '/copied/ {print $(NF-3)}')
    printf 'dd\t%s\t%s\t%s\n' "$((mib * 1048576))" "$secs" "$secs" >>"$tmp/records.tsv"
  done
  rm -f "$tmp/dd.bin"
done
read -r _ sha _ xxh < <("$tmp/hash_speed" "$bytes" 9)
# the hand-written analysis below the table ("## Where the time goes": profiles, not re-measured here) is kept
if [ -f "$OUT" ]; then sed -n '/^## Where the time goes/,$p' "$OUT" >"$tmp/keep.md"; fi
$PY - "$tmp/records.tsv" "$sha" "$xxh" "$bytes" "$(git rev-parse --short HEAD)" "$(cat /proc/loadavg)" >"$OUT" <<'PYEOF'
import statistics as st, sys, datetime
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
sha, xxh, nbytes, head, load = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
def col(kind, i):
    return [float(r[i]) for r in rows if r[0] == kind]
def med(v):
    return st.median(v), min(v), max(v), len(v)
dd = med(col("dd", 3))
print("# Checkpoint save vs `dd conv=fsync` (bench/checkpoint_async.sh)\n")
print(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, git {head}, load {load.split()[0:3]} -- **shared**: 2 cores "
      "with other jobs running; read the ratios (every form alternated in one run), not the absolute times.\n")
print(f"Convnet (models/convnet.yaml) with AdamW state, {nbytes:,} bytes a checkpoint, a save every 8 steps; medians "
      "(min..max, n) over every save.\n")
print("| what | seconds | / dd |")
print("|---|---|---|")
def row(label, m):
    print(f"| {label} | {m[0]:.4f} ({m[1]:.4f}..{m[2]:.4f}, n={m[3]}) | **{m[0] / dd[0]:.2f}** |")
row("dd of the same MiB, conv=fsync", dd)
row("async (default): the loop's stall per save (snapshot)", med(col("async", 2)))
row("async: the complete save (snapshot to renamed directory, on the writer thread)", med(col("async", 3)))
row("sync (`checkpoint.async: false`): the loop's stall = the complete save", med(col("sync", 3)))
print(f"\nHashing {nbytes:,} bytes in memory, best of 9: SHA-256 {sha * 1e3:.2f} ms ({sha / dd[0]:.2f}x dd), "
      f"XXH3-128 {xxh * 1e3:.2f} ms ({xxh / dd[0]:.3f}x dd): XXH3-128 is {sha / xxh:.0f}x faster.")
PYEOF
if [ -s "$tmp/keep.md" ]; then { echo; cat "$tmp/keep.md"; } >>"$OUT"; fi
cat "$OUT"
