#!/usr/bin/env bash
# 10,000 clean training steps with evaluation every 500 steps and a checkpoint every 1,000 (issue 15): allocated
# must stay at the watchdog's baseline to the byte, reserved must stop growing after the first eval + checkpoint
# cycle (step 1,000), no warning, and memory_report.json must list no growth.
#
#   bench/memory_long.sh WORKLOAD...     (mlp: configs/fashion_mnist_mlp.yaml, convnet: configs/fashion_mnist_cnn.yaml)
#
# Long on a shared 2-core machine (the convnet takes hours): run it nice'd, in the background. Runs go to
# BENCH_TMP (mktemp -d) and are removed afterwards; the analysis is printed (bench/memory.py flat).
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINRUN=${TRAINRUN:-build/trainrun}
STEPS=${BENCH_LONG_STEPS:-10000}   # a shorter run still shows the baseline (after step 1,000) and what follows
tmp=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/trainrun-memlong.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$TRAINRUN" "$tmp/trainrun"
for w in "$@"; do
  case $w in
    mlp) cfg=configs/fashion_mnist_mlp.yaml ;;
    convnet) cfg=configs/fashion_mnist_cnn.yaml ;;
    *) echo "memory_long.sh: unknown workload $w" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  /usr/bin/time -f '%M' -o "$tmp/rss" "$tmp/trainrun" "$cfg" "train.max_steps=$STEPS" eval.every_steps=500 \
    eval.every_epoch=false checkpoint.every_steps=1000 checkpoint.every_seconds=0 log.every_steps=50 \
    watchdog.every_steps=50 log.progress=never eval.test_at_end=false "run.dir=$tmp" "run.name=$w" >"$tmp/$w.out" 2>&1
  echo "== $w: $STEPS steps, eval every 500, checkpoint every 1,000; $(($(date +%s) - start)) s wall, peak RSS $(cat "$tmp/rss") KB"
  grep -E '^memory|^ +reserved' "$tmp/$w.out" || true
  /usr/bin/python3 bench/memory.py flat "$tmp/$w" 1000
done
