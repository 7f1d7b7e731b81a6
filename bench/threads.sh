#!/usr/bin/env bash
# bench/threads.sh -- intra-op threads 1 vs 2 on the training step, alternated in one run (issue 20, item 5).
#
#   bench/threads.sh [STEPS] [REPS] [CONFIG...]   (defaults: 200, 3, the convnet and the TorchScript ResNet)
#   BUSY=N bench/threads.sh ...                   the same with N CPU-bound processes running beside it (a busy box)
#   OMP_WAIT_POLICY=PASSIVE bench/threads.sh ...  libgomp's idle threads sleep at once instead of spinning
#
# Each run: the config's model and data, train.max_steps=STEPS, no evaluation, EMA or checkpoints, `threads` 1 or 2
# (OpenBLAS pinned to 1 thread as trainrun does); the rate is summary.json's samples_per_s (train steps only, the
# warm-up included). Forms alternate within each repetition so load drifts hit both alike; read the ratios.
# Writes a markdown table to stdout; logs under /tmp/threads-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
reps=${2:-3}
shift $(( $# >= 2 ? 2 : $# )) || true
configs=("$@")
((${#configs[@]})) || configs=(configs/fashion_mnist_cnn.yaml configs/fashion_mnist_resnet.yaml)
busy=${BUSY:-0}
out=/tmp/threads-bench
rm -rf "$out"; mkdir -p "$out"
[ -x build/trainrun ] || { echo "build/trainrun missing: build first (scripts/setup.sh)" >&2; exit 2; }

pids=()
cleanup() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; true; }
trap cleanup EXIT
for ((i = 0; i < busy; i++)); do (while :; do :; done) & pids+=($!); done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A rates
for cfg in "${configs[@]}"; do
  name=$(basename "$cfg" .yaml)
  for ((r = 1; r <= reps; r++)); do
    for th in 1 2; do
      ./build/trainrun "$cfg" train.max_steps="$steps" threads="$th" run.dir="$out" run.name="$name-t$th-r$r" \
        log.progress=never ema.enabled=false eval.weights=live eval.every_epoch=false eval.test_at_end=false \
        checkpoint.every_steps=0 checkpoint.at_end=false > "$out/$name-t$th-r$r.log" 2>&1
      rate=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples_per_s"])' \
               "$out/$name-t$th-r$r/summary.json")
      rates[$name,$th]+="$(printf '%.0f' "$rate") "
    done
  done
done
cleanup; pids=()

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "Threads 1 vs 2, $steps training steps per run, $reps repetitions alternated, BUSY=$busy extra CPU-bound processes${OMP_WAIT_POLICY:+, OMP_WAIT_POLICY=$OMP_WAIT_POLICY};"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), git $(git rev-parse --short HEAD), $(nproc) cores, load before ($load_before)."
echo
echo "| workload | threads=1 samples/s (runs) | threads=2 samples/s (runs) | 2 / 1 (medians) |"
echo "|---|---|---|---|"
for cfg in "${configs[@]}"; do
  name=$(basename "$cfg" .yaml)
  m1=$(echo "${rates[$name,1]}" | median); m2=$(echo "${rates[$name,2]}" | median)
  printf '| %s | %.1f (%s) | %.1f (%s) | **%.2f** |\n' "$name" "$m1" "$(echo ${rates[$name,1]} | sed 's/ /, /g')" \
    "$m2" "$(echo ${rates[$name,2]} | sed 's/ /, /g')" "$(echo "$m2 / $m1" | bc -l)"
done
