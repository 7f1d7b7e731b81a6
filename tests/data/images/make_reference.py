#!/usr/bin/python3
"""Regenerate the resize / crop / convert references of tests/test_image.c with PIL and torchvision (Debian 12:
python3-pil 9.4, python3-torchvision 0.14): /usr/bin/python3 tests/data/images/make_reference.py, from the repo root.
Inputs are seeded noise (every pixel different: a filter off by one tap shows); outputs are lossless PNGs."""
import os
import numpy as np
from PIL import Image
import torchvision.transforms as T

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240611)
rgb = Image.fromarray(rng.integers(0, 256, (23, 37, 3), dtype=np.uint8), "RGB")
gray = Image.fromarray(rng.integers(0, 256, (23, 37), dtype=np.uint8), "L")
rgb.save(os.path.join(here, "in_rgb.png"))
gray.save(os.path.join(here, "in_gray.png"))
out = {
    "rgb_down.png": T.Resize((11, 16))(rgb),                               # both sides shrink
    "rgb_up.png": T.Resize((50, 61))(rgb),                                 # both sides grow
    "rgb_wide.png": T.Resize((23, 80))(rgb),                               # only the width changes
    "rgb_short.png": T.Compose([T.Resize(20), T.CenterCrop((17, 19))])(rgb),  # the ImageNet-style eval transform
    "gray_short.png": T.Compose([T.Resize(9), T.CenterCrop(9)])(gray),
    "gray_pad.png": T.CenterCrop((30, 40))(gray),                          # crop larger than the image: padded
    "l_of_rgb.png": rgb.convert("L"),                                      # ITU-R 601-2 luma, PIL's fixed point
}
for name, im in out.items():
    im.save(os.path.join(here, name))
    print(name, im.mode, im.size)
