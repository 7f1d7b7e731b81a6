#!/usr/bin/python3
"""PyTorch eager form of the bench/ workloads, for Debian's /usr/bin/python3 and python3-torch (libtorch 1.13).

    /usr/bin/python3 bench/eager.py WORKLOAD [--steps N] [--warmup W] [--threads T] [--data DIR] [--device D]

WORKLOAD: mlp_256 (784-256-10 MLP, batch 64), convnet (models/convnet.yaml, batch 128), data_bound (784-10
linear, batch 1024). The loop is bench/raw_libtorch.cpp's, written as a PyTorch user would: OpenBLAS pinned to 1
thread (set before `import torch`), torch.set_num_threads(T) (default 1, trainrun's default), 1 inter-op thread;
the 60000 training images read with gzip + numpy, scaled to [0, 1] and normalised (mean 0.2860, std 0.3530) once
into one tensor; every epoch torch.randperm, each batch an index_select (drop_last); AdamW(lr 1e-3,
weight_decay 1e-4); each step: zero_grad(set_to_none=True), forward, cross_entropy, loss.item(), backward,
step (--foreach: AdamW(foreach=True), the multi-tensor step). --device cuda (scripts/gpu_check.sh) puts the model and optimizer state on the GPU and moves each batch as
trainrun does: pin_memory(), then .to(device, non_blocking=True). W warm-up steps, then N timed steps; prints the
line raw_libtorch prints:

    RESULT form=eager workload=mlp_256 threads=1 batch=64 warmup=50 steps=2000 seconds=S steps_per_s=X
           samples_per_s=Y data_share=D
"""
import argparse
import gzip
import os
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # read when OpenBLAS loads, i.e. at `import torch`

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DEFAULT_STEPS = {"mlp_256": 2000, "convnet": 120, "data_bound": 2000}
DEFAULT_WARMUP = {"mlp_256": 50, "convnet": 10, "data_bound": 50}


def make_model(workload):
    if workload == "mlp_256":
        return 64, nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if workload == "convnet":
        return 128, nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 10))
    if workload == "data_bound":
        return 1024, nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    raise SystemExit(f"eager.py: unknown workload '{workload}' (mlp_256, convnet, data_bound)")


def load(root, split="train"):
    """Images [N, 1, 28, 28] float32, normalised, and labels [N] int64 of split "train" or "t10k" (the test set)."""
    with gzip.open(os.path.join(root, f"{split}-images-idx3-ubyte.gz"), "rb") as f:
        img = f.read()
    with gzip.open(os.path.join(root, f"{split}-labels-idx1-ubyte.gz"), "rb") as f:
        lbl = f.read()
    if int.from_bytes(img[:4], "big") != 0x803 or int.from_bytes(lbl[:4], "big") != 0x801:
        raise SystemExit("eager.py: bad IDX magic")
    n, h, w = (int.from_bytes(img[i:i + 4], "big") for i in (4, 8, 12))
    x = np.frombuffer(img, dtype=np.uint8, offset=16).reshape(n, 1, h, w).astype(np.float32)
    x /= np.float32(255.0)  # in place: no temporary copies of the 188 MB array inflate the peak RSS
    x -= np.float32(0.2860)
    x /= np.float32(0.3530)
    y = np.frombuffer(lbl, dtype=np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--foreach", action="store_true",
                    help="AdamW(foreach=True): the multi-tensor step (one call per op for all parameters)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    batch, model = make_model(a.workload)
    steps = a.steps if a.steps is not None else DEFAULT_STEPS[a.workload]
    warmup = a.warmup if a.warmup is not None else DEFAULT_WARMUP[a.workload]

    x, y = load(a.data)
    n = x.shape[0]
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, foreach=True if a.foreach else None)
    model.train()
    perm, pos = None, n
    data_s, loss_sum = 0.0, 0.0
    t0 = time.perf_counter()
    for s in range(warmup + steps):
        if s == warmup:
            t0, data_s = time.perf_counter(), 0.0
        d0 = time.perf_counter()
        if pos + batch > n:  # drop_last
            perm, pos = torch.randperm(n), 0
        idx = perm[pos:pos + batch]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        if dev.type == "cuda":
            xb = xb.pin_memory().to(dev, non_blocking=True)
            yb = yb.pin_memory().to(dev, non_blocking=True)
        pos += batch
        data_s += time.perf_counter() - d0

        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss_sum += loss.item()
        loss.backward()
        opt.step()
    secs = time.perf_counter() - t0
    if loss_sum != loss_sum:
        raise SystemExit("eager.py: non-finite loss")
    if dev.type == "cuda":
        torch.cuda.synchronize()
    on = f" device={a.device}" if dev.type != "cpu" else ""  # the CPU's line stays bench/run.sh's
    print(f"RESULT form=eager workload={a.workload}{on} threads={a.threads} batch={batch} warmup={warmup} steps={steps} "
          f"seconds={secs:.4f} steps_per_s={steps / secs:.2f} samples_per_s={steps * batch / secs:.1f} "
          f"data_share={data_s / secs:.4f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
