#!/usr/bin/env bash
# `tandem bench train` figures (issue [7]): one GRPO training step at two sizes and both layouts
# (and auto), one JSON line each, on THREADS intra-op threads (default 2) of one process; ~5 min.
#   tiny:  hidden 128, 2 layers, vocab 16, 256 sequences of 8..24 tokens (uniform, seed 0)
#   equal: the tiny model on 256 sequences of 16 tokens (no padding: where auto picks padded)
#   mid:   hidden 512, 4 layers, 8 heads, vocab 32000, 64 sequences of 32..512 tokens
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"  # the project's virtual environment (scripts/setup.sh)
tandem=${TANDEM:-build/tandem}
threads=${THREADS:-2}
dir=build/bench
mkdir -p "$dir"
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/tiny.txt" 256 --uniform 8 24 >/dev/null
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/mid.txt" 64 --uniform 32 512 >/dev/null
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/equal.txt" 256 --uniform 16 16 >/dev/null
for workload in tiny equal; do
  for layout in packed padded auto; do
    echo "$workload $layout: $("$tandem" bench train --lengths "$dir/$workload.txt" --hidden 128 --layers 2 \
      --heads 4 --vocab 16 --layout "$layout" --threads "$threads" --steps 10 --warmup 3)"
  done
done
# Every mid micro has padding, so auto packs. Padded pays for its padding (~4x the step): one step.
for layout in packed padded; do
  steps=3
  [ "$layout" = padded ] && steps=1
  echo "mid $layout: $("$tandem" bench train --lengths "$dir/mid.txt" --hidden 512 --layers 4 --heads 8 \
    --vocab 32000 --layout "$layout" --threads "$threads" --steps "$steps" --warmup 1)"
done
