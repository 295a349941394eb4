#!/usr/bin/python3
"""Compares two metrics.jsonl files line by line. Timing and memory fields (time/*, perf/*, mem/*)
are skipped.
  compare_metrics.py A B [--rel TOL] [--keys k1,k2]   (default: exact equality)
Exit 0 when every compared value agrees; prints the worst relative difference."""
import argparse
import json
import math
import sys

ap = argparse.ArgumentParser()
ap.add_argument("a")
ap.add_argument("b")
ap.add_argument("--rel", type=float, default=0.0)
ap.add_argument("--keys", default="")
args = ap.parse_args()
la = [json.loads(l) for l in open(args.a) if l.strip()]
lb = [json.loads(l) for l in open(args.b) if l.strip()]
if len(la) != len(lb):
    sys.exit(f"FAIL: {len(la)} lines vs {len(lb)} lines")
keys = [k for k in args.keys.split(",") if k]
worst, compared = 0.0, 0
for x, y in zip(la, lb):
    if x["step"] != y["step"]:
        sys.exit(f"FAIL: step {x['step']} vs {y['step']}")
    names = keys or sorted(k for k in x if k != "step" and not {"time", "perf", "mem"} & set(k.split("/")))
    for k in names:
        if k not in x or k not in y:
            sys.exit(f"FAIL: step {x['step']}: key {k} missing")
        u, v = x[k], y[k]
        if u == v:
            compared += 1
            continue
        d = abs(u - v) / max(abs(v), 1e-300) if not (math.isnan(u) or math.isnan(v)) else math.inf
        worst = max(worst, d)
        compared += 1
        if d > args.rel:
            sys.exit(f"FAIL: step {x['step']} {k}: {u!r} vs {v!r} (rel {d:.3e} > {args.rel})")
print(f"ok: {len(la)} lines, {compared} values compared, worst relative difference {worst:.3e}")
