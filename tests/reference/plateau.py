# ReduceLROnPlateau lr sequences for tests/test_selection.c (plateau_lr_equals_torch_reduce_lr_on_plateau):
# run with Debian's python3-torch, /usr/bin/python3 tests/reference/plateau.py; the printed values are committed
# in the test (repr: exact), so the suite needs no Python.
import torch
def run(metrics, **kw):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    sch = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
    out = []
    for m in metrics:
        sch.step(m)
        out.append(opt.param_groups[0]['lr'])
    return out
seq = [1.0, 0.9, 0.95, 0.91, 0.92, 0.9, 0.89, 0.95, 0.96, 0.97, 0.98, 0.99, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
print(torch.__version__)
for kw in [dict(mode='min', factor=0.5, patience=2, threshold=1e-4, threshold_mode='rel', cooldown=0, min_lr=0.0),
           dict(mode='min', factor=0.1, patience=1, threshold=0.05, threshold_mode='rel', cooldown=2, min_lr=0.002),
           dict(mode='max', factor=0.5, patience=0, threshold=0.01, threshold_mode='abs', cooldown=1, min_lr=0.0)]:
    r = run(seq, **kw)
    print(kw)
    print(', '.join(repr(x) for x in r))
