#!/usr/bin/python3
"""models/resnet_small_w64.pt: the ResNet of models/resnet_small.py at width 64 (306,122 parameters).

    /usr/bin/python3 models/resnet_small_w64.py     # rewrites models/resnet_small_w64.pt (Debian's python3-torch)

configs/fashion_mnist_resnet.yaml trains it (README: "Fashion-MNIST, small ResNet, full run"); its state_dict keys
are those of tests/reference/resnet_small.keys. build() is the eager twin that bench/reference/train_reference.py
(and so bench/vs_eager.sh) trains from the archive's weights.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import resnet_small  # noqa: E402

WIDTH = 64


def build():
    """The eager module, initialised from the default generator (seed first)."""
    return resnet_small.build(WIDTH)


if __name__ == "__main__":
    resnet_small.export(os.path.join(HERE, "resnet_small_w64.pt"), WIDTH)
