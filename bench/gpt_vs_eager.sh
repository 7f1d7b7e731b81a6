#!/usr/bin/env bash
# bench/gpt_vs_eager.sh -- the GPT recipe of configs/text_gpt.yaml trained by trainrun and by PyTorch eager at the
# same time, one thread each, side by side: wall time, steps/s and the validation loss they reach.
#
#   bench/gpt_vs_eager.sh [STEPS] [OUT_DIR]        (defaults: 2000, /tmp/gpt_vs_eager; from the source dir)
#   SAME_WORK=1 bench/gpt_vs_eager.sh ...            trainrun without its EMA and checkpoints: the same work as eager
#
# PyTorch eager is bench/reference/train_reference.py under Debian's python3-torch (the same libtorch): the eager
# Python GPT (models/gpt.py's twin()) from the same initial weights (its init_weights after
# torch.manual_seed(seed)), the same windows, AdamW param groups, schedule and clipping, evaluating the same 640
# validation windows every 250 steps. It does less than trainrun does: no EMA (trainrun updates and evaluates one),
# no checkpoints (trainrun saves every 500 steps), no logs. Both run under the AVX2 kernel pins of
# tests/test_parity.c, so they compute the same numbers (bit for bit over 200 steps: the parity test) and the
# validation losses printed at the end can be compared directly.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-2000}
out=${2:-/tmp/gpt_vs_eager}
mkdir -p "$out"
export OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
[ -x build/trainrun ] || { echo "build/trainrun missing: build first (scripts/setup.sh)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch, yaml' 2>/dev/null || { echo "needs Debian's python3-torch and python3-yaml" >&2; exit 2; }

extra=()
[ "${SAME_WORK:-0}" = 1 ] && extra=(ema.enabled=false eval.weights=live checkpoint.every_steps=0 checkpoint.at_end=false)
start=$(date +%s.%N)
( /usr/bin/time -f '%e s wall, %U s user, %M KiB max RSS' \
    ./build/trainrun configs/text_gpt.yaml train.max_steps="$steps" threads=1 run.dir="$out" run.name=trainrun \
      log.progress=never "${extra[@]}" > "$out/trainrun.log" 2>&1; echo "exit $?" >> "$out/trainrun.log" ) &
( /usr/bin/time -f '%e s wall, %U s user, %M KiB max RSS' \
    /usr/bin/python3 bench/reference/train_reference.py configs/text_gpt.yaml train.max_steps="$steps" threads=1 \
      --trace "$out/eager.trace" > "$out/eager.log" 2>&1; echo "exit $?" >> "$out/eager.log" ) &
wait
end=$(date +%s.%N)

echo "GPT recipe, $steps steps${extra:+ (trainrun: ${extra[*]})}, both at once on one thread each ($(nproc) cores; load average now $(cut -d' ' -f1-3 /proc/loadavg))"
echo "trainrun: $(grep -E 's wall' "$out/trainrun.log" | tail -1)"
grep -E '"split":"val"' "$out/trainrun/metrics.jsonl" 2>/dev/null | grep '"weights":"live"' | tail -1 \
  | sed 's/^/  last live validation record: /' || true
echo "eager:    $(grep -E 's wall' "$out/eager.log" | tail -1)"
grep -E '^eval val' "$out/eager.log" | tail -1 | sed 's/^/  /'
echo "(both finished $(printf '%.0f' "$(echo "$end - $start" | bc)") s after the start; logs in $out)"
