#!/usr/bin/python3
"""A small ResNet for Fashion-MNIST (BatchNorm, residual connections) as a TorchScript module: models/resnet_small.pt.

    /usr/bin/python3 models/resnet_small.py [--width W] [OUT.pt]   # Debian's python3-torch

    stem     conv3x3(1 -> W) + BatchNorm + ReLU, maxpool 2          W x 14 x 14
    layer1   BasicBlock(W -> W)                                     W x 14 x 14
    layer2   BasicBlock(W -> 2W, stride 2), 1x1 conv + BN shortcut  2W x 7 x 7
    head     global average pool, linear(2W -> 10)

BasicBlock is ResNet's (He et al. 2015, "Deep Residual Learning", fig. 2; torchvision.models.resnet.BasicBlock):
relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)). Initial weights are PyTorch's defaults after
torch.manual_seed(0). configs/fashion_mnist_resnet.yaml trains it; tests/reference/resnet_small.keys is its
state_dict() key list (written here), which trainrun's checkpoints must reproduce; bench/reference/
train_reference.py imports build() to train the same module eagerly for the parity trace.
"""
import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetSmall(nn.Module):
    def __init__(self, width: int = 32, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.layer1 = BasicBlock(width, width, 1)
        self.layer2 = BasicBlock(width, 2 * width, 2)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build(width: int = 32):
    """The module, initialised from the default generator (seed first)."""
    return ResNetSmall(width)


def export(out, width=32, keys=""):
    """Script the module (initialised after torch.manual_seed(0)) into `out`; write its state_dict keys to `keys`."""
    torch.manual_seed(0)
    model = build(width)
    torch.jit.save(torch.jit.script(model), out)
    if keys:
        with open(keys, "w") as f:
            f.write("".join(k + "\n" for k in model.state_dict().keys()))
    print(f"{out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{len(model.state_dict())} state_dict entries")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default=os.path.join(HERE, "resnet_small.pt"))
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--keys", default=os.path.join(HERE, "..", "tests", "reference", "resnet_small.keys"),
                    help="write the state_dict keys here, one a line ('' = don't)")
    args = ap.parse_args()
    export(args.out, args.width, args.keys)
