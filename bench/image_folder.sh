#!/usr/bin/env bash
# bench/image_folder.sh -- the step rate of data.format image_folder (PNG files decoded on the loader's prefetch
# thread, every epoch) against the same images as .npy arrays (decoded once, in memory), side by side, as a ratio.
#
#   bench/image_folder.sh [REPS]          (from the repository root, after scripts/setup.sh; default REPS 3)
#
# Exports Fashion-MNIST's 60000 training images once into bench/.image_folder/ (PNG folders, 28x28 gray, and the
# same images normalised as .npy, as scripts/export_npy.py writes them), then runs the bench/configs workloads
# mlp_256 (batch 64: the cheapest step, where decoding is likeliest to show) and convnet on each, REPS times in
# alternation, with threads=1 (one core for the step, the other free for the loader). Prints each run's steps/s and
# the median ratio image_folder / npy; a ratio >= 0.90 is within 10%. Results and their history: bench/image_folder.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh
reps=${1:-3}
bin=build/trainrun
data=bench/.image_folder
if [ ! -f "$data/done" ]; then
  mkdir -p "$data"
  /usr/bin/python3 - "$data" <<'PY'
import gzip, os, sys
import numpy as np
from PIL import Image
out = sys.argv[1]
raw = gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").read()
x = np.frombuffer(raw[16:], np.uint8).reshape(-1, 28, 28)
y = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz").read()[8:], np.uint8)
order = np.argsort(y, kind="stable")          # ImageFolder's order: class by class
x, y = x[order], y[order]
for i, (im, c) in enumerate(zip(x, y)):
    d = os.path.join(out, "png", str(c))
    os.makedirs(d, exist_ok=True)
    Image.fromarray(im).save(os.path.join(d, f"{i:05d}.png"))
xf = ((x.astype(np.float32) / np.float32(255)) - np.float32(0.2860)) / np.float32(0.3530)
np.save(os.path.join(out, "x.npy"), xf.reshape(-1, 1, 28, 28))
np.save(os.path.join(out, "y.npy"), y)
PY
  touch "$data/done"
fi
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
npy=(data.format=npy "data.root=$PWD/$data" data.train_inputs=x.npy data.train_targets=y.npy threads=1)
png=(data.format=image_folder "data.root=$PWD/$data" data.train_root=png data.image_mode=L threads=1)
for w in mlp_256 convnet; do
  a=() b=()
  for r in $(seq "$reps"); do
    a+=("$(trainrun_rate "$bin" "$w" "$runs" npy "${npy[@]}")")
    b+=("$(trainrun_rate "$bin" "$w" "$runs" png "${png[@]}")")
  done
  /usr/bin/python3 - "$w" "${a[*]}" "${b[*]}" <<'PY'
import statistics, sys
w, a, b = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
ratios = [y / x for x, y in zip(a, b)]
print(f"{w}: npy {' '.join(f'{v:.1f}' for v in a)} steps/s; image_folder {' '.join(f'{v:.1f}' for v in b)} steps/s; "
      f"ratio median {statistics.median(ratios):.3f} (each: {' '.join(f'{r:.3f}' for r in ratios)})")
PY
done
