#!/usr/bin/python3
"""Export Fashion-MNIST (Debian's dataset-fashion-mnist, IDX + gzip) to NumPy .npy files for data.format: npy.

The inputs are what trainrun's idx reader hands the model: pixels / 255 in float32, then (x - mean) / std with
configs/fashion_mnist_mlp.yaml's data.mean / data.std, each step in float32 as C does it -- so
configs/fashion_mnist_mlp_npy.yaml trains on the same bits and gives the idx config's trace bit for bit.
Labels are saved as numpy reads them, uint8 [N].

    /usr/bin/python3 scripts/export_npy.py [OUT_DIR]     # default OUT_DIR: data/fashion-mnist-npy

Writes train_x.npy [60000, 1, 28, 28] float32, train_y.npy [60000] uint8, test_x.npy [10000, 1, 28, 28],
test_y.npy [10000] (about 220 MB in all).
"""
import gzip
import os
import sys

import numpy as np

ROOT = "/usr/share/datasets/fashion-mnist"
MEAN, STD = np.float32(0.2860), np.float32(0.3530)  # data.mean / data.std of configs/fashion_mnist_mlp.yaml


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[0:4], "big")
    if got != magic:
        sys.exit(f"{path}: byte 0: magic {got:#010x}, expected {magic:#010x}")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "data/fashion-mnist-npy"
    os.makedirs(out, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(f"{ROOT}/{prefix}-images-idx3-ubyte.gz", 0x00000803)
        labels = read_idx(f"{ROOT}/{prefix}-labels-idx1-ubyte.gz", 0x00000801)
        x = images.astype(np.float32) / np.float32(255.0)  # trainrun: (float)byte / 255.0f
        x = (x - MEAN) / STD                                  # trainrun: (x - mean) / std in float32
        np.save(f"{out}/{split}_x.npy", x.reshape(-1, 1, 28, 28).astype(np.float32))
        np.save(f"{out}/{split}_y.npy", labels.astype(np.uint8))
        print(f"{out}/{split}_x.npy {x.shape[0]} x 1 x 28 x 28 float32, {split}_y.npy uint8")


if __name__ == "__main__":
    main()
