#!/usr/bin/python3
"""Small TorchScript archives for tests/test_torchscript.c: each of trainrun's refusals, and the leak pair.

    /usr/bin/python3 tests/torchscript/make_fixtures.py      # Debian's python3-torch; writes next to this file

Every module takes Fashion-MNIST images [N, 1, 28, 28] and is initialised after torch.manual_seed(0), so the
archives are the same on every run. CI needs no Python: the .pt files are committed.

  not_torchscript.pt  torch.save(m.state_dict()): a zip of pickled tensors, not a TorchScript archive
  frozen.pt           torch.jit.freeze(torch.jit.script(m).eval()): weights folded into constants, no parameters
  two_inputs.pt       forward(self, x, y): more than one tensor in
  tuple_output.pt     forward returns (logits, features): not one tensor out
  seven_outputs.pt    [N, 7] logits: cannot meet Fashion-MNIST's 10 classes
  traced.pt           torch.jit.trace of a module with BatchNorm and dropout: their mode fixed at trace time
  leak.pt             appends a 65,536-byte tensor to a List[Tensor] attribute on every training forward
  no_leak.pt          the same module with the append switched off
"""
import os
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class Small(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(x, 1)) + y


class TupleOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = torch.flatten(x, 1)
        return self.fc(h), h


class Leaky(nn.Module):
    """Linear(784 -> 10); with `leak`, every training forward keeps a 16,384-float (65,536-byte) tensor alive in
    self.kept, the TorchScript version of `self.history.append(...)` left in a forward."""
    kept: List[torch.Tensor]

    def __init__(self, leak: bool):
        super().__init__()
        self.fc = nn.Linear(784, 10)
        self.leak = leak
        self.kept = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.leak:
            self.kept.append(torch.zeros(16384))
        return self.fc(torch.flatten(x, 1))


def save(name, module):
    path = os.path.join(HERE, name)
    torch.jit.save(module, path)
    print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    torch.manual_seed(0)
    torch.save(Small().state_dict(), os.path.join(HERE, "not_torchscript.pt"))
    torch.manual_seed(0)
    save("frozen.pt", torch.jit.freeze(torch.jit.script(Small()).eval()))
    torch.manual_seed(0)
    save("two_inputs.pt", torch.jit.script(TwoInputs()))
    torch.manual_seed(0)
    save("tuple_output.pt", torch.jit.script(TupleOutput()))
    torch.manual_seed(0)
    save("seven_outputs.pt", torch.jit.script(Small(classes=7)))
    torch.manual_seed(0)
    save("traced.pt", torch.jit.trace(Small(), torch.zeros(2, 1, 28, 28)))
    torch.manual_seed(0)
    save("leak.pt", torch.jit.script(Leaky(True)))
    torch.manual_seed(0)
    save("no_leak.pt", torch.jit.script(Leaky(False)))


if __name__ == "__main__":
    main()
