#!/usr/bin/python3
"""PyTorch eager form of bench/configs/convnet_tta.yaml, for bench/time_to_accuracy.sh (Debian's python3-torch).

    /usr/bin/python3 bench/time_to_accuracy.py [--epochs 3] [--eval-every 100] [--threads 1] [--data DIR]

The convnet of models/convnet.yaml (bench/eager.py's make_model), AdamW(lr 2e-3, weight_decay 1e-4), trainrun's
cosine schedule with 200 linear warm-up steps (runtime/src/core/schedule.h: lr = base * (step + 1) / 200 for
step < 200, then base * (1 + cos(pi * (step - 200) / (total - 200))) / 2), batch 128 with drop_last over all 60000
training images reshuffled every epoch (torch.randperm), the 10000 test images evaluated every --eval-every steps
under no_grad in eval mode (batch 1000). Training time excludes evaluation. Prints one line per evaluation and
RESULT lines:

    EVAL step=S accuracy=A train_s=T
    RESULT form=eager target=0.9 step=S train_s=T (first evaluation at or above the target; step=none if never)
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager  # noqa: E402  (sets OPENBLAS_NUM_THREADS=1 before torch loads)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    batch, model = eager.make_model("convnet")
    x, y = eager.load(a.data)
    xt, yt = eager.load(a.data, "t10k")
    n = x.shape[0]
    per_epoch = n // batch
    total, warm, base = a.epochs * per_epoch, 200, 2e-3
    opt = torch.optim.AdamW(model.parameters(), lr=base, weight_decay=1e-4)
    hit, train_s, step = None, 0.0, 0
    for epoch in range(a.epochs):
        perm = torch.randperm(n)
        for b in range(per_epoch):
            t0 = time.perf_counter()
            lr = base * (step + 1) / warm if step < warm else \
                base * 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))
            for g in opt.param_groups:
                g["lr"] = lr
            idx = perm[b * batch:(b + 1) * batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            model.train()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.item()
            loss.backward()
            opt.step()
            step += 1
            train_s += time.perf_counter() - t0
            if step % a.eval_every == 0:
                model.eval()
                correct = 0
                with torch.no_grad():
                    for i in range(0, xt.shape[0], 1000):
                        correct += int((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
                acc = correct / xt.shape[0]
                print(f"EVAL step={step} accuracy={acc:.4f} train_s={train_s:.3f}", flush=True)
                if hit is None and acc >= a.target:
                    hit = (step, train_s)
    print(f"RESULT form=eager target={a.target} step={hit[0] if hit else 'none'} "
          f"train_s={hit[1] if hit else float('nan'):.3f} total_train_s={train_s:.3f}", flush=True)


if __name__ == "__main__":
    main()
