#!/usr/bin/python3
"""The MLP of models/mlp.yaml (configs/fashion_mnist_mlp.yaml) as a TorchScript module: models/mlp.pt.gz.

    /usr/bin/python3 models/mlp.py [OUT.pt]      # Debian's python3-torch; writes models/mlp.pt.gz by default

Its 535,818 float32 weights make a 2.15 MB archive, over what this repository commits (2 MiB), so the default
output is that archive gzip'd (1.97 MB); trainrun loads a gzip'd archive as it loads a plain one. Given OUT.pt, the
plain archive is written there.

The same nn.Sequential as the YAML -- flatten, 784 -> 512 -> 256 -> 10 with ReLU and dropout 0.2 -- built right
after torch.manual_seed(0), so its initial weights, their state_dict names ("1.weight", "1.bias", "4.weight", ...)
and its dropout draws equal the YAML model's at seed 0: configs/fashion_mnist_mlp_torchscript.yaml trains to the
same trace, bit for bit (tests/test_torchscript.c). The export is the three lines of README "Bring your own model":
build the module, torch.jit.script it, torch.jit.save it.
"""
import gzip
import io
import os
import sys

import torch
from torch import nn


def build():
    """The module, initialised from the default generator (seed first)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(512, 256), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(256, 10),
    )


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp.pt.gz")
    torch.manual_seed(0)
    model = build()
    if out.endswith(".gz"):
        archive = io.BytesIO()
        torch.jit.save(torch.jit.script(model), archive)
        with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:  # mtime 0: the same bytes every export
            f.write(archive.getvalue())
    else:
        torch.jit.save(torch.jit.script(model), out)
    print(f"{out}: {sum(p.numel() for p in model.parameters())} parameters")
