#!/usr/bin/env bash
# Harness overhead of trainrun over a raw libtorch loop, in instructions (callgrind counts are repeatable where wall
# time on a shared machine is not). Workload: bench's mlp_256 (MLP 784-256-10, batch 64, AdamW), 1 thread, N steps.
#
# Instructions per optimizer step, from callgrind's inclusive cost of the loop function over N steps:
#   raw        train_loop of bench/raw_libtorch.cpp (batch gather + step; the loop a libtorch user writes)
#   raw_acc    the same, also counting correct predictions as trainrun's step does (--count-correct)
#   trainrun   tr_run_step of build/trainrun bench/configs/mlp_256.yaml, everything one step of the CLI loop does:
#              batch gather, lr schedule, the shim's train step, log window, watchdog sample, eval/checkpoint checks.
#              data.prefetch=false, so the gather runs inside tr_run_step as it does in the raw loop (with prefetch
#              the same instructions run on the loader thread).
#   in-step    trs_train_step, the shim's step alone (zero_grad, forward, loss, backward, AdamW, correct count)
# Set-up (libtorch start-up, reading the data set) is outside these functions and is not counted.
# Usage: bench/callgrind_overhead.sh [N=100]; writes bench/callgrind_overhead.md (BENCH_CG_OUT), which
# bench/RESULTS.md quotes (bench/report.py). Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}; out=${BENCH_CG_OUT:-bench/callgrind_overhead.md}
command -v valgrind >/dev/null || { echo "callgrind_overhead.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
[ -x build/trainrun ] || { echo "callgrind_overhead.sh: build trainrun first (scripts/setup.sh)" >&2; exit 1; }
cmake -S bench -B bench/.build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build bench/.build >/dev/null
tmp=${BENCH_CG_TMP:-$(mktemp -d)}; [ -n "${BENCH_CG_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT; mkdir -p "$tmp"
cp build/trainrun bench/.build/raw_libtorch "$tmp/"   # private copies: others may rebuild while this runs
# inclusive instructions of function $2 in callgrind output $1
incl() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
         awk -v f="$2" '$0 ~ "[ :]" f " " || $0 ~ "[ :]" f "\\(" || $0 ~ "[ :]" f "$" {gsub(",", "", $1); print $1; exit}'; }
cg() { local o=$1; shift; valgrind --tool=callgrind --callgrind-out-file="$o" "$@" >/dev/null 2>&1; }
cg "$tmp/raw.out" "$tmp/raw_libtorch" mlp_256 --warmup 0 --steps "$n" --threads 1
cg "$tmp/acc.out" "$tmp/raw_libtorch" mlp_256 --warmup 0 --steps "$n" --threads 1 --count-correct
cg "$tmp/tr.out" "$tmp/trainrun" bench/configs/mlp_256.yaml "train.max_steps=$n" log.every_steps=50 \
   data.prefetch=false "run.dir=$tmp" run.name=cg
raw=$(incl "$tmp/raw.out" train_loop); acc=$(incl "$tmp/acc.out" train_loop)
tr=$(incl "$tmp/tr.out" tr_run_step); st=$(incl "$tmp/tr.out" trs_train_step)
for v in raw acc tr st; do [ -n "${!v}" ] || { echo "callgrind_overhead.sh: no cost found for $v" >&2; exit 1; }; done
{
  echo "callgrind, $n steps of MLP 784-256-10 batch 64 AdamW, $(date -u '+%Y-%m-%d %H:%M UTC'), git HEAD $(git rev-parse --short HEAD)"
  echo
  echo "| form (function counted) | instructions / step | vs raw |"
  echo "|---|---|---|"
  awk -v r="$raw" -v a="$acc" -v t="$tr" -v s="$st" -v n="$n" 'BEGIN {
    printf "| raw (train_loop) | %\047d | 1.0000 |\n", r / n
    printf "| raw_acc (train_loop, with the correct count) | %\047d | %.4f |\n", a / n, a / r
    printf "| trainrun (tr_run_step) | %\047d | %.4f |\n", t / n, t / r
    printf "| trainrun, inside trs_train_step | %\047d | %.4f |\n", s / n, s / r
    printf "\ntrainrun loop outside the shim step: %\047d instructions / step (%.2f%% of tr_run_step); tr_run_step / raw_acc = %.4f\n", (t - s) / n, 100 * (t - s) / t, t / a }'
} >"$out"
cat "$out"
