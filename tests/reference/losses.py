#!/usr/bin/python3
"""Reference loss values for tests/test_losses.c, computed by PyTorch (Debian's python3-torch 1.13).

The test builds a model whose output equals its input (Linear(3, 3) with an identity weight and a zero bias), so
the logits below reach the loss unchanged. Run: /usr/bin/python3 tests/reference/losses.py > /dev/stdout and paste
the printed constants into tests/test_losses.c.
"""
import torch
import torch.nn.functional as F

LOGITS = torch.tensor([[1.5, -0.25, 0.75],
                       [-1.0, 2.0, 0.5],
                       [0.125, 0.0, -2.5],
                       [3.0, 1.0, -1.0]], dtype=torch.float32)
LABELS = torch.tensor([0, 2, 1, 0], dtype=torch.int64)
MULTI_HOT = torch.tensor([[1, 0, 1], [0, 1, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.float32)
VALUES = torch.tensor([[1.0, 0.5, -0.5], [0.0, 0.75, 3.0], [0.5, -1.0, -2.0], [2.0, 1.5, 0.25]],
                      dtype=torch.float32)

cases = {
    "CE": F.cross_entropy(LOGITS, LABELS),
    "CE_LS01": F.cross_entropy(LOGITS, LABELS, label_smoothing=0.1),
    "BCE": F.binary_cross_entropy_with_logits(LOGITS, MULTI_HOT),
    "MSE": F.mse_loss(LOGITS, VALUES),
    "SMOOTH_L1": F.smooth_l1_loss(LOGITS, VALUES, beta=1.0),
}
print(f"/* torch {torch.__version__}: tests/reference/losses.py */")
for name, v in cases.items():
    print(f"#define REF_{name} {float(v.item()).hex()} /* {v.item():.9g} */")
