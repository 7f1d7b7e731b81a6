#!/usr/bin/python3
"""Predictions of a trained model in Python's PyTorch (Debian's python3-torch) against trainrun predict's CSV.

    python_check.py jit ARCHIVE X.npy PREDS.csv            # torch.jit.load of a `trainrun export` archive
    python_check.py loader DOC.md RUN_DIR CKPT X.npy PREDS.csv   # the last ```python block of DOC.md, load_trainrun

X.npy holds the inputs as trainrun fed them; PREDS.csv is `trainrun predict`'s (index,target,predicted,p_0..).
Prints the largest absolute difference of the softmax probabilities; exit 0 when it is below 1e-6 (the CSV's 9
significant digits), 1 otherwise, 77 when this Python has no torch.
"""
import re
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"python_check: skipped: {e}")
    sys.exit(77)

mode = sys.argv[1]
if mode == "jit":
    model = torch.jit.load(sys.argv[2])
    model.eval()
    x_path, csv_path = sys.argv[3], sys.argv[4]
else:
    doc, run_dir, ckpt, x_path, csv_path = sys.argv[2:7]
    blocks = re.findall(r"```python\n(.*?)```", open(doc).read(), re.S)
    namespace = {}
    exec(blocks[-1], namespace)
    model = namespace["load_trainrun"](run_dir, ckpt)
x = torch.from_numpy(np.load(x_path))
with torch.no_grad():
    p = torch.softmax(model(x).double(), dim=1)
rows = [line.strip().split(",") for line in open(csv_path)][1:]
want = torch.tensor([[float(v) for v in r[3:]] for r in rows], dtype=torch.float64)
diff = (p - want).abs().max().item()
print(f"python_check {mode}: {len(rows)} rows, max abs difference of the probabilities {diff:.3g}")
sys.exit(0 if p.shape == want.shape and diff < 1e-6 else 1)
