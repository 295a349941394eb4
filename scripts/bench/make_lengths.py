#!/usr/bin/python3
"""Writes sequence-length files for `tandem bench schedule` / `bench train`: by default long-tail
lognormal lengths clipped to [16, 16384]; with --uniform LO HI, uniform integers in [LO, HI]
(one per line; groups are consecutive runs of --group-size lines).

  /usr/bin/python3 scripts/bench/make_lengths.py OUT N [--seed S] [--mu M] [--sigma S] [--uniform LO HI]
"""
import argparse

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("n", type=int)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--mu", type=float, default=7.0)     # median ~1100 tokens
ap.add_argument("--sigma", type=float, default=1.2)  # long tail up to the 16384 cap
ap.add_argument("--uniform", type=int, nargs=2, metavar=("LO", "HI"))
args = ap.parse_args()
rng = np.random.default_rng(args.seed)
if args.uniform:
    lengths = rng.integers(args.uniform[0], args.uniform[1], size=args.n, endpoint=True).astype(np.int64)
else:
    lengths = np.clip(rng.lognormal(args.mu, args.sigma, args.n).astype(np.int64), 16, 16384)
np.savetxt(args.out, lengths, fmt="%d")
print(f"{args.out}: {args.n} lengths, mean {lengths.mean():.0f}, max {lengths.max()}, "
      f"min {lengths.min()}" + ("" if args.uniform else f", share at cap {np.mean(lengths == 16384):.3f}"))
