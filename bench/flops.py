#!/usr/bin/python3
"""FLOPs of a trainrun model spec (models/*.yaml), and the machine's sgemm peak through libtorch (issue 20).

  flops.py count MODEL.yaml      -> "forward FWD train TRAIN" (FLOPs per sample)
  flops.py peak THREADS [N] [bf16] -> "peak FLOP/s" of an N x N float32 torch.mm (default 2048), best of 7;
                                    with bf16: the same torch.mm under torch.autocast("cpu", dtype=torch.bfloat16)

Counting (only the multiply-adds of linear and conv2d layers, 2 FLOPs each; batchnorm, activations, pooling and
the loss are left out, so these are lower bounds of the work done):
  linear  in -> out:                       forward 2*in*out
  conv2d  Cin -> Cout, k x k, Hout x Wout: forward 2*Cin*k*k*Cout*Hout*Wout (groups 1)
  training = forward + backward; backward = the weight gradient (the forward's FLOPs again) plus the input
  gradient (again), except for the first layer with weights, whose input needs no gradient.
Shapes are followed through flatten, maxpool2d/avgpool2d (kernel, stride = kernel unless given, padding) and
conv2d (stride, padding); layers that keep the shape pass it on.
"""
import sys
import time

import yaml


def count(spec_path):
    spec = yaml.safe_load(open(spec_path))
    shape = list(spec["input"])  # per sample: [C, H, W] or [D]
    fwd = 0
    grad_in = 0
    first = True
    for layer in spec["layers"]:
        name, args = (layer, {}) if isinstance(layer, str) else next(iter(layer.items()))
        args = args or {}
        if name == "linear":
            f = 2 * args["in"] * args["out"]
            fwd += f
            grad_in += 0 if first else f
            first = False
            shape = [args["out"]]
        elif name == "conv2d":
            k = args["kernel"]
            s = args.get("stride", 1)
            p = args.get("padding", 0)
            c, h, w = shape
            ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            f = 2 * args["in"] * k * k * args["out"] * ho * wo
            fwd += f
            grad_in += 0 if first else f
            first = False
            shape = [args["out"], ho, wo]
        elif name in ("maxpool2d", "avgpool2d"):
            k = args["kernel"]
            s = args.get("stride", k)
            p = args.get("padding", 0)
            c, h, w = shape
            shape = [c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1]
        elif name == "flatten":
            n = 1
            for d in shape:
                n *= d
            shape = [n]
    return fwd, fwd + fwd + grad_in


def peak(threads, n, bf16=False):
    import contextlib
    import torch
    torch.set_num_threads(threads)
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with ctx:
        torch.mm(a, b)
        best = 1e30
        for _ in range(7):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


if __name__ == "__main__":
    if sys.argv[1] == "count":
        f, t = count(sys.argv[2])
        print(f"forward {f} train {t}")
    elif sys.argv[1] == "peak":
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
        print(f"{peak(int(sys.argv[2]), n, len(sys.argv) > 4 and sys.argv[4] == 'bf16'):.6g}")
    else:
        sys.exit(__doc__)
