#!/usr/bin/env bash
# trainrun against PyTorch eager (and the raw libtorch loop), each at its best setting, on one bench workload
# (issue 20's "trainrun >= 1.10x eager at each one's best setting").
#
#   bench/best_vs_eager.sh [WORKLOAD]        (default mlp_256; the workloads of bench/run.sh, bench/configs/)
#
# Forms, interleaved in every repetition so that a noisy neighbour slows all of them alike:
#   raw T            bench/raw_libtorch, T intra-op threads, glibc malloc pinned (its best, bench/RESULTS.md)
#   eager T          bench/eager.py, T threads, malloc pinned
#   eager_foreach T  the same with AdamW(foreach=True)
#   trainrun T       build/trainrun bench/configs/WORKLOAD.yaml threads=T (it pins malloc itself)
# for T = 1 and 2. A form's figure is its median steps/s over BENCH_REPS (5) repetitions; its best setting is the
# T (and for eager the optimizer form) with the highest median; the ratio printed is trainrun's best over eager's
# best. Also printed: each form's median and range. Environment: BENCH_REPS, BENCH_TMP, TRAINRUN (build/trainrun).
# Needs bench/.build/raw_libtorch (built by bench/run.sh or bench/memory.sh) and /usr/bin/python3 with python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-mlp_256}
REPS=${BENCH_REPS:-5}
TRAINRUN=${TRAINRUN:-build/trainrun}
PY=/usr/bin/python3
RAW=bench/.build/raw_libtorch
PINNED=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456
. bench/workloads.sh
[ -n "${WARM[$W]:-}" ] || { echo "best_vs_eager.sh: unknown workload $W" >&2; exit 2; }
if [ ! -x "$RAW" ]; then
  cmake -S bench -B bench/.build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build bench/.build >/dev/null
fi
tmp=$(mktemp -d -p "${BENCH_TMP:-${TMPDIR:-/tmp}}" trainrun-best.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset GLIBC_TUNABLES MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_ MALLOC_MMAP_MAX_ MALLOC_ARENA_MAX

result() { sed -n 's/^RESULT .*steps_per_s=\([0-9.]*\) .*/\1/p' "$1"; }
run() { # run FORM T -> steps/s
  local form=$1 t=$2
  case $form in
    raw) GLIBC_TUNABLES=$PINNED "$RAW" "$W" --warmup "${WARM[$W]}" --steps "${STEPS[$W]}" --threads "$t" >"$tmp/o"
         result "$tmp/o" ;;
    eager|eager_foreach)
      local extra=()
      [ "$form" = eager ] || extra=(--foreach)
      GLIBC_TUNABLES=$PINNED $PY bench/eager.py "$W" --warmup "${WARM[$W]}" --steps "${STEPS[$W]}" --threads "$t" \
        "${extra[@]}" >"$tmp/o"
      result "$tmp/o" ;;
    trainrun) trainrun_rate "$TRAINRUN" "$W" "$tmp/runs" r "threads=$t" ;;
  esac
}

for ((i = 1; i <= REPS; i++)); do
  for t in 1 2; do
    for form in raw eager eager_foreach trainrun; do
      r=$(run "$form" "$t")
      printf '%s\t%s\t%s\t%s\n' "$form" "$t" "$i" "$r" >>"$tmp/rec.tsv"
      printf 'rep %d %-14s threads=%d %9s steps/s\n' "$i" "$form" "$t" "$r" >&2
    done
  done
done

$PY - "$tmp/rec.tsv" "$W" "$REPS" "$(git rev-parse --short HEAD)" <<'EOF'
import statistics, sys
tsv, w, reps, head = sys.argv[1:]
rates = {}
for line in open(tsv):
    form, t, i, r = line.split()
    rates.setdefault((form, int(t)), []).append(float(r))
print(f"{w}: steps/s, median (min..max) of {reps} interleaved repetitions; git {head}; load average now "
      f"{open('/proc/loadavg').read().split()[0]}\n")
print("| form | threads=1 | threads=2 |")
print("|---|---|---|")
med = {k: statistics.median(v) for k, v in rates.items()}
for form in ("raw", "eager", "eager_foreach", "trainrun"):
    cells = [f"{med[(form, t)]:.1f} ({min(rates[(form, t)]):.1f}..{max(rates[(form, t)]):.1f})" for t in (1, 2)]
    print(f"| {form} | {cells[0]} | {cells[1]} |")
best = lambda forms: max((med[(f, t)], f, t) for f in forms for t in (1, 2))
tb, eb, rb = best(["trainrun"]), best(["eager", "eager_foreach"]), best(["raw"])
print(f"\nbest: trainrun {tb[0]:.1f} (threads={tb[2]}), eager {eb[0]:.1f} ({eb[1]}, threads={eb[2]}), "
      f"raw {rb[0]:.1f} (threads={rb[2]})")
print(f"trainrun / eager, each at its best: **{tb[0] / eb[0]:.3f}**; trainrun / raw: {tb[0] / rb[0]:.3f}; "
      f"raw / eager: {rb[0] / eb[0]:.3f}")
EOF
