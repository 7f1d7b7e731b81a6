#!/usr/bin/python3
"""A tiny TorchScript token tagger and PyTorch's own numbers for it, for tests/test_tokens.c.

    /usr/bin/python3 tests/data/tokens/make_token_tagger.py     # Debian's python3-torch; writes next to this file

token_tagger.pt: forward(ids: int64 [N, T]) -> logits float32 [N, T, C] (an Embedding, a GELU, a Linear), made
after torch.manual_seed(0). token_tagger.expected: the batch (ids [N, T], per-position targets [N, T] with -100
positions) and, as float.hex, F.cross_entropy(logits.reshape(-1, C), y.reshape(-1), ignore_index=-100) at the
initial weights and after each of two torch.optim.SGD(lr=0.5) steps on that batch (train mode, zero_grad,
backward, step), plus the correct counts (argmax == target over the positions that are not -100).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
V, D, C = 11, 6, 5


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.out = nn.Linear(D, C)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.embed(ids)))


def main():
    torch.manual_seed(0)
    m = torch.jit.script(Tagger())
    path = os.path.join(HERE, "token_tagger.pt")
    torch.jit.save(m, path)
    m = torch.jit.load(path)  # train the archive itself, as trainrun does
    ids = torch.tensor([[1, 4, 2, 9], [3, 3, 10, 0], [7, 5, 6, 8]], dtype=torch.int64)
    y = torch.tensor([[2, -100, 0, 4], [1, 3, -100, -100], [4, 0, 2, 1]], dtype=torch.int64)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    lines = ["ids " + " ".join(str(int(v)) for v in ids.reshape(-1)),
             "targets " + " ".join(str(int(v)) for v in y.reshape(-1))]
    m.train()
    for step in range(3):
        opt.zero_grad()
        logits = m(ids)
        loss = F.cross_entropy(logits.reshape(-1, C), y.reshape(-1), ignore_index=-100)
        keep = y.reshape(-1) != -100
        correct = int((logits.reshape(-1, C).argmax(1)[keep] == y.reshape(-1)[keep]).sum())
        lines.append(f"loss {step} {float(loss).hex()} correct {correct}")
        if step < 2:
            loss.backward()
            opt.step()
    with open(os.path.join(HERE, "token_tagger.expected"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
