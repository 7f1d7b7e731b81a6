#!/usr/bin/env python3
"""multinode_params.py A.safetensors B.safetensors [--identical | --rtol-l2 X --rtol-max Y]

Compare two model.safetensors files tensor by tensor (the same names, dtypes and shapes; F32 only). Prints the worst
tensor's relative difference ||a - b||_2 / ||a||_2 and max|a - b| / max|a|, and whether the files' tensors are
byte-identical. Exit 0 when the bound holds (--identical: every tensor's bytes equal), 1 when it does not, 2 on a
malformed file. Only the standard library: the format is an 8-byte little-endian header length, a JSON header
{name: {dtype, shape, data_offsets}}, then the data.
"""
import array
import json
import math
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} past the end of the file")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        if not 0 <= b <= e <= len(data):
            raise ValueError(f"{path}: {name}: data_offsets {b}..{e} outside the data ({len(data)} bytes)")
        out[name] = (t["dtype"], t["shape"], data[b:e])
    return out


def main(argv):
    args = argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    identical = "--identical" in args
    rtol_l2 = float(args[args.index("--rtol-l2") + 1]) if "--rtol-l2" in args else 1e-6
    rtol_max = float(args[args.index("--rtol-max") + 1]) if "--rtol-max" in args else 1e-5
    try:
        a, b = read(args[0]), read(args[1])
    except (OSError, ValueError, KeyError) as e:
        print(f"multinode_params: {e}", file=sys.stderr)
        return 2
    if sorted(a) != sorted(b):
        print(f"multinode_params: tensor names differ: {sorted(a)} vs {sorted(b)}", file=sys.stderr)
        return 1
    worst_l2 = worst_max = 0.0
    same_bytes = True
    for name in sorted(a):
        (da, sa, ba), (db, sb, bb) = a[name], b[name]
        if da != db or sa != sb or len(ba) != len(bb):
            print(f"multinode_params: {name}: {da}{sa} vs {db}{sb}", file=sys.stderr)
            return 1
        same_bytes = same_bytes and ba == bb
        if da != "F32":
            continue
        xa, xb = array.array("f", ba), array.array("f", bb)
        if sys.byteorder != "little":
            xa.byteswap()
            xb.byteswap()
        d2 = sum((p - q) ** 2 for p, q in zip(xa, xb))
        a2 = sum(p * p for p in xa)
        dmax = max((abs(p - q) for p, q in zip(xa, xb)), default=0.0)
        amax = max((abs(p) for p in xa), default=0.0)
        worst_l2 = max(worst_l2, math.sqrt(d2 / a2) if a2 > 0 else math.sqrt(d2))
        worst_max = max(worst_max, dmax / amax if amax > 0 else dmax)
    print(f"tensors {len(a)} rel_l2 {worst_l2:.3g} rel_max {worst_max:.3g} identical {int(same_bytes)}")
    if identical:
        return 0 if same_bytes else 1
    return 0 if worst_l2 <= rtol_l2 and worst_max <= rtol_max else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
