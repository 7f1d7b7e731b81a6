#!/usr/bin/env bash
# bench/image_folder.sh -- the step rate of data.format image_folder (PNG files decoded on the loader's prefetch
# thread, every epoch) against the same images as .npy arrays (decoded once, in memory), side by side, as a ratio.
#
#   bench/image_folder.sh [REPS]          (from the repository root, after scripts/setup.sh; default REPS 3)
#
# Exports Fashion-MNIST's 60000 training images once into bench/.image_folder/ (PNG folders, 28x28 gray, and the
# same images normalised as .npy, as scripts/export_npy.py writes them), then runs the bench/configs workloads
# mlp_256 (batch 64: the cheapest step, where decoding is likeliest to show) and convnet on each, REPS times in
# alternation, with threads=1 (one core for the step, the other free for the loader). The image_folder variants:
# data.cache none (decode every epoch), auto (decode the first epoch, keep the pixels in memory) and disk, warm (the
# pixels read at start-up from the file an earlier run wrote: one epoch of mlp_256 fills it first, into a temporary
# data.cache_dir). Prints each run's steps/s and the median ratio image_folder / npy; a ratio >= 0.90 is within 10%.
# Results and their history: bench/image_folder.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/workloads.sh
reps=${1:-3}
bin=build/trainrun
data=bench/.image_folder
if [ ! -f "$data/done" ]; then
  mkdir -p "$data"
  /usr/bin/python3 - "$data" <<'PY'
import gzip, os, struct, sys, zlib
import numpy as np
out = sys.argv[1]
raw = gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").read()
x = np.frombuffer(raw[16:], np.uint8).reshape(-1, 28, 28)
y = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz").read()[8:], np.uint8)
order = np.argsort(y, kind="stable")          # ImageFolder's order: class by class
x, y = x[order], y[order]

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

def png_gray(im):  # 8-bit grayscale, filter 0 on every row, zlib level 6 (the standard library only)
    h, w = im.shape
    rows = b"".join(b"\0" + im[r].tobytes() for r in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))

for i, (im, c) in enumerate(zip(x, y)):
    d = os.path.join(out, "png", str(c))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{i:05d}.png"), "wb") as f:
        f.write(png_gray(im))
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
# windows WORKLOAD NAME OVERRIDES... -> "first steady": the steps/s of a window inside the first epoch and of one
# after it, read off metrics.jsonl (log.every_steps = 50: a train record every 50 steps, time_s = training seconds).
# mlp_256 (batch 64, 937.5 steps an epoch): steps 50-900 and 1000-2050. convnet (batch 128, 468.75 steps an
# epoch): steps 10-130, the first epoch only (a steady-state window would need 500+ steps of 0.1-0.5 s each).
windows() {
  local w=$1 name=$2 max every
  shift 2
  if [ "$w" = mlp_256 ]; then max=2050 every=50; else max=130 every=10; fi
  "$bin" "bench/configs/$w.yaml" "train.max_steps=$max" "log.every_steps=$every" "run.dir=$runs" "run.name=$name" \
    "$@" >/dev/null 2>"$runs/$name.err" || { cat "$runs/$name.err" >&2; echo "bench: $w $name failed" >&2; exit 1; }
  /usr/bin/python3 - "$runs/$name/metrics.jsonl" "$w" <<'PY'
import json, sys
t = {r["step"]: r["time_s"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "train"}
win = [(50, 900), (1000, 2050)] if sys.argv[2] == "mlp_256" else [(10, 130)]
print(" ".join(f"{(b - a) / (t[b] - t[a]):.2f}" for a, b in win))
PY
  rm -rf "${runs:?}/$name"
}
# data.cache: disk, warm: one epoch of mlp_256 (937.5 steps) writes the training images' cache file once; both
# workloads read the same images with the same settings (one key), so every disk run below reads that file.
disk=("${png[@]}" data.cache=disk "data.cache_dir=$runs/decoded")
"$bin" bench/configs/mlp_256.yaml train.max_steps=938 "run.dir=$runs" run.name=fill "${disk[@]}" >/dev/null \
  2>"$runs/fill.err" || { cat "$runs/fill.err" >&2; echo "bench: the disk cache's fill run failed" >&2; exit 1; }
grep -q "decoded images written to" "$runs/fill.err" ||
  { cat "$runs/fill.err" >&2; echo "bench: the fill run wrote no disk cache" >&2; exit 1; }
rm -rf "${runs:?}/fill"
# Variants, run in turn (npy, image_folder with data.cache: none, with the default data.cache: auto, with
# data.cache: disk warm) REPS times, so that each ratio is taken between runs seconds apart on the same machine.
for w in mlp_256 convnet; do
  out="$runs/$w.tsv"
  : >"$out"
  for r in $(seq "$reps"); do
    echo "$r npy $(windows "$w" npy "${npy[@]}")" >>"$out"
    echo "$r none $(windows "$w" none "${png[@]}" data.cache=none)" >>"$out"
    echo "$r auto $(windows "$w" auto "${png[@]}")" >>"$out"
    echo "$r disk $(windows "$w" disk "${disk[@]}")" >>"$out"
    grep -q "decoded images read from the disk cache" "$runs/disk.err" ||
      { cat "$runs/disk.err" >&2; echo "bench: a disk run did not read the cache" >&2; exit 1; }
  done
  /usr/bin/python3 - "$w" "$out" <<'PY'
import statistics, sys
w, rows = sys.argv[1], [l.split() for l in open(sys.argv[2])]
rate = {}
for r, v, *x in rows:
    rate.setdefault(v, []).append([float(y) for y in x])
names = ["first epoch", "after the first epoch"]
for k in range(len(rate["npy"][0])):
    npy = [x[k] for x in rate["npy"]]
    line = f"{w} {names[k]}: npy {' '.join(f'{v:.1f}' for v in npy)} steps/s"
    for v in ("none", "auto", "disk"):
        b = [x[k] for x in rate[v]]
        ratios = [y / x for x, y in zip(npy, b)]
        line += (f"; cache={v} {' '.join(f'{y:.1f}' for y in b)} steps/s, ratio median {statistics.median(ratios):.3f}"
                 f" ({' '.join(f'{q:.3f}' for q in ratios)})")
    print(line)
PY
done
