#!/usr/bin/python3
"""Writes sequence-length files for `tandem bench schedule` / `bench train`: by default long-tail
lognormal lengths clipped to [16, 16384]; with --uniform LO HI, uniform integers in [LO, HI]
(one per line). With --prompt LO HI --response LO HI, lines "group prompt_len response_len":
N sequences in groups of --group-size (default 8) sharing a prompt of uniform length in [LO, HI],
each response of uniform length in [LO, HI] (`bench train/rollout --share-prompt`).

  /usr/bin/python3 scripts/bench/make_lengths.py OUT N [--seed S] [--mu M] [--sigma S] [--uniform LO HI]
  /usr/bin/python3 scripts/bench/make_lengths.py OUT N --prompt LO HI --response LO HI [--group-size G]
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
ap.add_argument("--prompt", type=int, nargs=2, metavar=("LO", "HI"))
ap.add_argument("--response", type=int, nargs=2, metavar=("LO", "HI"))
ap.add_argument("--group-size", type=int, default=8)
args = ap.parse_args()
rng = np.random.default_rng(args.seed)
if args.prompt or args.response:
    if not (args.prompt and args.response) or args.n % args.group_size:
        raise SystemExit("--prompt and --response go together, and N must be a multiple of --group-size")
    groups = args.n // args.group_size
    prompts = rng.integers(args.prompt[0], args.prompt[1], size=groups, endpoint=True)
    responses = rng.integers(args.response[0], args.response[1], size=args.n, endpoint=True)
    with open(args.out, "w") as f:
        for i in range(args.n):
            f.write(f"{i // args.group_size} {prompts[i // args.group_size]} {responses[i]}\n")
    print(f"{args.out}: {groups} groups of {args.group_size}, prompts mean {prompts.mean():.0f}, "
          f"responses mean {responses.mean():.0f}")
    raise SystemExit(0)
if args.uniform:
    lengths = rng.integers(args.uniform[0], args.uniform[1], size=args.n, endpoint=True).astype(np.int64)
else:
    lengths = np.clip(rng.lognormal(args.mu, args.sigma, args.n).astype(np.int64), 16, 16384)
np.savetxt(args.out, lengths, fmt="%d")
print(f"{args.out}: {args.n} lengths, mean {lengths.mean():.0f}, max {lengths.max()}, "
      f"min {lengths.min()}" + ("" if args.uniform else f", share at cap {np.mean(lengths == 16384):.3f}"))
