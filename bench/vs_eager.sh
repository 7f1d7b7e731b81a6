#!/usr/bin/env bash
# bench/vs_eager.sh -- a config's recipe trained by trainrun and by PyTorch eager at the same time, one thread each,
# side by side: wall and CPU time, peak RSS and the validation figures they reach.
#
#   bench/vs_eager.sh [CONFIG] [STEPS] [OUT_DIR]   (defaults: configs/text_gpt.yaml, 2000, /tmp/vs_eager-<config>;
#                                                   from the source dir; extra key=value overrides in $OVERRIDES)
#   SAME_WORK=1 bench/vs_eager.sh ...               trainrun without its EMA and checkpoints: the same work as eager
#   VS_EAGER_ONEDNN_ISA=AVX512_CORE_BF16 OVERRIDES=precision=bf16-mixed bench/vs_eager.sh ...   both under bf16 autocast
#
# PyTorch eager is bench/reference/train_reference.py under Debian's python3-torch (the same libtorch): the eager
# Python module (models/X.py's twin of a TorchScript archive, or the YAML model's layers) from the same initial
# weights, the same data order and augmentation, optimizer param groups, schedule and clipping, evaluating the same
# validation samples at the same steps -- the parity tests' reference (tests/test_parity.c). It does less than
# trainrun does: no EMA (trainrun updates and evaluates one), no checkpoints, no logs or memory watchdog. Both run
# under the AVX2 kernel pins of tests/test_parity.c, so they compute the same numbers and the validation figures
# printed at the end can be compared directly.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/text_gpt.yaml}
steps=${2:-2000}
name=$(basename "$config" .yaml)
out=${3:-/tmp/vs_eager-$name}
mkdir -p "$out"
# oneDNN's pin: AVX2 as the parity tests pin it; precision=bf16-mixed needs VS_EAGER_ONEDNN_ISA=AVX512_CORE_BF16
# (oneDNN's bfloat16 matmuls and convolutions exist only with AVX-512).
export OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=${VS_EAGER_ONEDNN_ISA:-AVX2} ATEN_CPU_CAPABILITY=avx2
[ -x build/trainrun ] || { echo "build/trainrun missing: build first (scripts/setup.sh)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch, yaml' 2>/dev/null || { echo "needs Debian's python3-torch and python3-yaml" >&2; exit 2; }

# shellcheck disable=SC2206 # OVERRIDES is a space-separated list of key=value
overrides=(${OVERRIDES:-})
extra=()
[ "${SAME_WORK:-0}" = 1 ] && extra=(ema.enabled=false eval.weights=live checkpoint.every_steps=0 checkpoint.at_end=false)
start=$(date +%s.%N)
( /usr/bin/time -f '%e s wall, %U s user, %S s system, %M KiB max RSS' \
    ./build/trainrun "$config" train.max_steps="$steps" threads=1 run.dir="$out" run.name=trainrun \
      log.progress=never "${overrides[@]}" "${extra[@]}" > "$out/trainrun.log" 2>&1; echo "exit $?" >> "$out/trainrun.log" ) &
( /usr/bin/time -f '%e s wall, %U s user, %S s system, %M KiB max RSS' \
    /usr/bin/python3 bench/reference/train_reference.py "$config" train.max_steps="$steps" threads=1 \
      "${overrides[@]}" --onednn-isa "$ONEDNN_MAX_CPU_ISA" --trace "$out/eager.trace" > "$out/eager.log" 2>&1; echo "exit $?" >> "$out/eager.log" ) &
wait
end=$(date +%s.%N)

echo "$config, $steps steps${extra:+ (trainrun: ${extra[*]})}${OVERRIDES:+ (both: $OVERRIDES)}, both at once on one thread each ($(nproc) cores; load average now $(cut -d' ' -f1-3 /proc/loadavg))"
echo "trainrun: $(grep -E 's wall' "$out/trainrun.log" | tail -1)"
grep -E '"split":"(val|test)"' "$out/trainrun/metrics.jsonl" 2>/dev/null | grep '"weights":"live"' | tail -1 \
  | sed 's/^/  last live evaluation record: /' || true
echo "eager:    $(grep -E 's wall' "$out/eager.log" | tail -1)"
grep -E '^eval (val|test)' "$out/eager.log" | tail -1 | sed 's/^/  /' || true
echo "(both finished $(printf '%.0f' "$(echo "$end - $start" | bc)") s after the start; logs in $out)"
