#!/usr/bin/python3
"""Writes the small .npy / .npz fixtures of tests/test_npy.c (committed; run again only to change them).

Run from this directory with Debian's python3-numpy: /usr/bin/python3 make_fixtures.py
"""
import numpy as np

x = np.array([[1.5, -2.0, 3.25], [0.0, 7.0, -0.5]], dtype=np.float32)
y = np.array([3, 9], dtype=np.int64)
np.savez("stored.npz", x=x, y=y)             # zip members stored (method 0)
np.savez_compressed("deflated.npz", x=x, y=y)  # zip members deflated (method 8)
np.save("be.npy", x.astype(">f4"))            # big-endian: refused
np.save("fortran.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))  # fortran_order: refused
