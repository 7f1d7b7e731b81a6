#!/usr/bin/env bash
# Cost of allocated-memory accounting + the watchdog, on the MLP (784-512-256-10, batch 64, AdamW).
#   A: TRAINRUN_COUNTING=0, watchdog.enabled=false   (libtorch's allocator untouched, no sampling)
#   B: default                                       (counting allocator, watchdog sampling every 50 steps)
#   C: B with watchdog.every_steps=1                 (worst case: a sample after every step)
# Runs interleaved (A B C A B C ...) so machine noise hits all alike; reports median samples/s in train steps and
# the ratios, then callgrind instruction counts inside 40 train steps + watchdog calls for A and C (repeatable).
# Usage: bench/watchdog_overhead.sh [repeats=5] [steps=3000]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}; steps=${2:-3000}
bin=build/trainrun
out=$(mktemp -d)
common=(configs/fashion_mnist_mlp.yaml "train.max_steps=$steps" data.train_subset=20000 data.val_size=1000
        eval.every_steps=1000 eval.every_epoch=false eval.test_at_end=false log.progress=never "run.dir=$out")
rate() { sed -n 's/.*(\([0-9.]*\) samples\/s in train steps).*/\1/p'; }
declare -a A B C
for ((i = 0; i < reps; i++)); do
  A+=("$(TRAINRUN_COUNTING=0 $bin "${common[@]}" watchdog.enabled=false run.name=a$i 2>/dev/null | rate)")
  B+=("$($bin "${common[@]}" run.name=b$i 2>/dev/null | rate)")
  C+=("$($bin "${common[@]}" watchdog.every_steps=1 run.name=c$i 2>/dev/null | rate)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ma=$(median "${A[@]}"); mb=$(median "${B[@]}"); mc=$(median "${C[@]}")
echo "samples/s in train steps, median of $reps x $steps steps (all runs: A ${A[*]} | B ${B[*]} | C ${C[*]})"
echo "A no accounting, no watchdog       $ma"
echo "B accounting + watchdog (default)  $mb  B/A = $(awk -v a="$ma" -v b="$mb" 'BEGIN{printf "%.4f", b/a}')"
echo "C accounting + watchdog every step $mc  C/A = $(awk -v a="$ma" -v c="$mc" 'BEGIN{printf "%.4f", c/a}')"
if command -v valgrind >/dev/null; then
  # Instructions inside the steps and the watchdog only (--toggle-collect), so libtorch's start-up under valgrind
  # (minutes, and the same for both) does not dilute the ratio. The counting allocator runs inside trs_train_step.
  cg() { valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=trs_train_step \
           --toggle-collect=tr_watchdog_sample --toggle-collect=trs_memory_stats_get "$@" 2>&1 |
         sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
  short=(configs/fashion_mnist_mlp.yaml train.max_steps=40 data.train_subset=2000 data.val_size=200
         eval.every_steps=20 eval.every_epoch=false eval.test_at_end=false log.progress=never checkpoint.at_end=false
         checkpoint.every_seconds=0 "run.dir=$out")
  ia=$(TRAINRUN_COUNTING=0 cg $bin "${short[@]}" watchdog.enabled=false run.name=cga)
  ib=$(cg $bin "${short[@]}" watchdog.every_steps=1 watchdog.warmup_steps=1 run.name=cgb)
  echo "callgrind, instructions in 40 train steps + watchdog: A $ia, C (sample every step) $ib, C/A = $(awk -v a="$ia" -v b="$ib" 'BEGIN{printf "%.5f", b/a}')"
fi
rm -rf "$out"
