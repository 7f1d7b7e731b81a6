#!/usr/bin/env bash
# TorchScript graph-executor setting (README "Bring your own model", determinism): what the optimising executor
# would buy in speed, and what it costs in reproducibility, on the ResNet parity case.
#   off: trainrun's setting (torch::jit::GraphOptimizerEnabledGuard(false) around every forward, shim/src/torchscript.cpp)
#   on:  libtorch's default (profiling executor, TRAINRUN_JIT_OPTIMIZE=1: a bench-only switch)
# Runs interleaved (off on off on ...) so machine noise hits both alike; reports the median samples/s in train steps,
# whether each setting's trace equals PyTorch eager's (tests/reference/resnet_small_adamw_cosine.trace) bit for bit,
# and `trainrun check` (two fresh processes + SIGKILL/resume, bit for bit) under each setting.
# Usage: bench/jit_executor.sh [repeats=3] [steps=300] [check_steps=120]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}; steps=${2:-300}; check_steps=${3:-120}
bin=build/trainrun
out=$(mktemp -d)
export OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2   # the parity traces' kernels
cfg=configs/reference/resnet_small_adamw_cosine.yaml
ref=tests/reference/resnet_small_adamw_cosine.trace
common=("$cfg" "train.max_steps=$steps" log.progress=never "run.dir=$out")
rate() { sed -n 's/.*(\([0-9.]*\) samples\/s in train steps).*/\1/p'; }
declare -a OFF ON
for ((i = 0; i < reps; i++)); do
  OFF+=("$(TRAINRUN_JIT_OPTIMIZE=0 $bin "${common[@]}" run.name=off$i --trace "$out/off$i.trace" 2>/dev/null | rate)")
  ON+=("$(TRAINRUN_JIT_OPTIMIZE=1 $bin "${common[@]}" run.name=on$i --trace "$out/on$i.trace" 2>/dev/null | rate)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
moff=$(median "${OFF[@]}"); mon=$(median "${ON[@]}")
echo "samples/s in train steps, median of $reps x $steps steps (all runs: off ${OFF[*]} | on ${ON[*]})"
echo "off (trainrun)        $moff"
echo "on (libtorch default) $mon  on/off = $(awk -v a="$moff" -v b="$mon" 'BEGIN{printf "%.3f", b/a}')"
for s in off on; do
  printf '%s vs PyTorch eager, bit for bit: ' "$s"
  if [[ $steps != 300 ]]; then echo "n/a (the reference ran 300 steps; the cosine schedule depends on the length)"; continue; fi
  awk 'NR==FNR { if ($1 == "step") a[$2] = $4; next } $1 == "step" && ($2 in a) { n++; if (a[$2] != $4 && !d) d = $2 }
       END { if (d) print "first differs at step " d " of " n; else print "identical over " n " steps" }' \
      "$ref" "$out/${s}0.trace"
done
for s in off on; do
  v=0; [[ $s == on ]] && v=1
  echo "--- trainrun check under $s:"
  TRAINRUN_JIT_OPTIMIZE=$v $bin check "$cfg" --steps "$check_steps" "run.dir=$out" 2>/dev/null | sed -n '/^check /,$p' || true
done
rm -rf "$out"
