#!/usr/bin/env bash
# Two trainrun builds side by side: the paired step-rate ratio of B over A (issue 16's "no step-rate regression").
#
#   bench/ab.sh A_TRAINRUN B_TRAINRUN [OUT.md]
#
# Each repetition runs A then B (then B then A in the next one, so neither always goes first) on every workload of
# bench/run.sh (bench/configs/*.yaml: mlp_256, convnet, data_bound), one thread, the same timed window as run.sh
# (report.py trainrun: the wall time of STEPS steps after WARM warm-up steps, read off metrics.jsonl). The ratio of a
# repetition is B's steps/s over A's from the same repetition, so a neighbour that slows the machine for a minute
# slows both sides of one pair; the median of the paired ratios is the figure. Also printed: each side's median
# steps/s and the spread of the ratios (min, max).
# Environment: BENCH_REPS (5), BENCH_WORKLOADS (mlp_256 convnet data_bound), BENCH_SCALE (1: multiplies the timed
# steps), BENCH_TMP (scratch parent). Needs /usr/bin/python3 (standard library only) for bench/report.py.
set -euo pipefail
cd "$(dirname "$0")/.."

A=${1:?usage: bench/ab.sh A_TRAINRUN B_TRAINRUN [OUT.md]}
B=${2:?usage: bench/ab.sh A_TRAINRUN B_TRAINRUN [OUT.md]}
OUT=${3:-}
REPS=${BENCH_REPS:-5}
WORKLOADS=${BENCH_WORKLOADS:-mlp_256 convnet data_bound}
PY=/usr/bin/python3
. bench/workloads.sh

for bin in "$A" "$B"; do [ -x "$bin" ] || { echo "bench/ab.sh: $bin is not an executable" >&2; exit 1; }; done
tmp=$(mktemp -d -p "${BENCH_TMP:-${TMPDIR:-/tmp}}" trainrun-ab.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset GLIBC_TUNABLES MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_ MALLOC_MMAP_MAX_ MALLOC_ARENA_MAX

rate() { trainrun_rate "$1" "$2" "$tmp/runs" "$3"; }

tsv=$tmp/ab.tsv
for ((i = 1; i <= REPS; i++)); do
  for w in $WORKLOADS; do
    if ((i % 2)); then a=$(rate "$A" "$w" "a$i-$w"); b=$(rate "$B" "$w" "b$i-$w")
    else b=$(rate "$B" "$w" "b$i-$w"); a=$(rate "$A" "$w" "a$i-$w"); fi
    printf '%s\t%d\t%s\t%s\n' "$w" "$i" "$a" "$b" >>"$tsv"
    printf 'rep %d %-10s A %8s  B %8s steps/s  B/A %s\n' "$i" "$w" "$a" "$b" \
      "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.4f", b / a}')" >&2
  done
done

report=$($PY - "$tsv" "$A" "$B" "$REPS" <<'EOF'
import statistics, sys
tsv, a_bin, b_bin, reps = sys.argv[1:]
rows = {}
for line in open(tsv):
    w, i, a, b = line.split()
    rows.setdefault(w, []).append((float(a), float(b)))
print(f"A = {a_bin}\nB = {b_bin}\n{reps} paired repetitions a workload, one thread, load average at the end: "
      f"{open('/proc/loadavg').read().split()[0]}\n")
print("| workload | A steps/s (median) | B steps/s (median) | paired B/A (median) | B/A min | B/A max |")
print("|---|---|---|---|---|---|")
for w, pairs in rows.items():
    r = [b / a for a, b in pairs]
    print(f"| {w} | {statistics.median(a for a, _ in pairs):.1f} | {statistics.median(b for _, b in pairs):.1f} | "
          f"{statistics.median(r):.4f} | {min(r):.4f} | {max(r):.4f} |")
EOF
)
echo "$report"
[ -z "$OUT" ] || printf '%s\n' "$report" >"$OUT"
