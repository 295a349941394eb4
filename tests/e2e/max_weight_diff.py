#!/usr/bin/python3
"""Largest |a - b| over every tensor of two safetensors files with the same names and shapes.
  max_weight_diff.py A B TOL   -> exit 0 when the largest difference is <= TOL.
Reads the format directly (8-byte header length, JSON header, raw little-endian data)."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64}


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
if sorted(a) != sorted(b):
    sys.exit("FAIL: tensor names differ")
worst = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) if a[k].size else 0.0 for k in a)
print(f"max |weight difference| = {worst:.3e} (tolerance {tol:.0e})")
sys.exit(0 if worst <= tol else 1)
