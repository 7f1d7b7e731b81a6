#!/usr/bin/env bash
# Record the 2.11 lane's reference traces (tests/reference/libtorch-2.11/) with PyTorch 2.11.0's own Python, from the
# venv scripts/setup.sh --torch 2.11 makes. The 1.13 lane's are recorded the same way with /usr/bin/python3 into
# tests/reference/ (tests/test_parity.c lists the commands).
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${TRAINRUN_TORCH_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/trainrun/torch-2.11.0/venv/bin/python}"
out=tests/reference/libtorch-2.11
mkdir -p "$out"
for c in mlp_adamw_constant cnn_sgd_nesterov_cosine mlp_adam_clip_wd resnet_small_adamw_cosine; do
  "$py" bench/reference/train_reference.py configs/reference/$c.yaml --steps 300 --trace "$out/$c.trace"
done
"$py" bench/reference/train_reference.py configs/reference/gpt_fortunes_adamw_cosine.yaml --trace "$out/gpt_fortunes_adamw_cosine.trace"
"$py" bench/reference/train_reference.py configs/reference/mlp_adamw_bf16.yaml --steps 300 --onednn-isa AVX512_CORE_BF16 \
  --trace "$out/mlp_adamw_bf16.trace"
