#!/usr/bin/env bash
# Harness overhead of trainrun over a raw libtorch loop, in instructions (callgrind counts are repeatable where wall
# time on a shared machine is not). Workload: bench's mlp_256 (MLP 784-256-10, batch 64, AdamW), 1 thread.
#
# Each form runs twice, for N1 and N2 optimizer steps; (I(N2) - I(N1)) / (N2 - N1) is the marginal cost of one
# step with set-up (library loading, reading and normalising the data set), the final summary and exit cancelled.
#   raw        bench/.build/raw_libtorch mlp_256 (the loop a libtorch user writes; no correct-count)
#   raw_acc    the same, also counting correct predictions as trainrun's step does
#   trainrun   build/trainrun bench/configs/mlp_256.yaml (counting allocator, watchdog, logging every 50 steps)
#   in-step    trainrun's instructions inside trs_train_step only (--toggle-collect), to split loop vs step
# Usage: bench/callgrind_overhead.sh [N1=50] [N2=250]; prints a Markdown table (bench/RESULTS.md quotes it).
set -euo pipefail
cd "$(dirname "$0")/.."
n1=${1:-50}; n2=${2:-250}
command -v valgrind >/dev/null || { echo "callgrind_overhead.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
[ -x build/trainrun ] || { echo "callgrind_overhead.sh: build trainrun first (scripts/setup.sh)" >&2; exit 1; }
cmake -S bench -B bench/.build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build bench/.build >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
collected() { sed -n 's/.*Collected : \([0-9]*\).*/\1/p' | tail -1; }
cg() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null | collected; }
raw() { cg bench/.build/raw_libtorch mlp_256 --warmup 0 --steps "$1" --threads 1 "${@:2}"; }
tr() { cg "${@:2}" build/trainrun bench/configs/mlp_256.yaml "train.max_steps=$1" log.every_steps=50 \
          "run.dir=$tmp" "run.name=r$RANDOM$RANDOM"; }
declare -A I
for n in "$n1" "$n2"; do
  I[raw-$n]=$(raw "$n")
  I[raw_acc-$n]=$(raw "$n" --count-correct)
  I[trainrun-$n]=$(tr "$n")
  I[instep-$n]=$(cg --collect-atstart=no --toggle-collect=trs_train_step build/trainrun bench/configs/mlp_256.yaml \
                 "train.max_steps=$n" log.every_steps=50 "run.dir=$tmp" "run.name=s$n")
done
per() { awk -v a="${I[$1-$n1]}" -v b="${I[$1-$n2]}" -v d="$((n2 - n1))" 'BEGIN {printf "%.0f", (b - a) / d}'; }
raw_s=$(per raw); acc_s=$(per raw_acc); tr_s=$(per trainrun); in_s=$(per instep)
echo "| form | instructions / step (marginal, steps $n1 -> $n2) | vs raw |"
echo "|---|---|---|"
for f in raw:$raw_s raw_acc:$acc_s trainrun:$tr_s "trainrun, inside trs_train_step:$in_s"; do
  awk -v n="${f%%:*}" -v v="${f##*:}" -v r="$raw_s" 'BEGIN {printf "| %s | %\047d | %.4f |\n", n, v, v / r}'
done
awk -v t="$tr_s" -v s="$in_s" -v r="$raw_s" 'BEGIN {printf "\ntrainrun loop outside the step: %d instructions / step (%.3f%% of the step); trainrun / raw = %.4f\n", t - s, 100 * (t - s) / t, t / r}'
