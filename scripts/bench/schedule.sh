#!/usr/bin/env bash
# Scheduler figures on long-tail lengths (issue [2/6]): 4096 and 64 lengths, dp 8, groups of 8,
# token budget 32768, both cost models, with and without keep_groups.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"  # the project's virtual environment (scripts/setup.sh)
tandem=${TANDEM:-build/tandem}
dir=$(mktemp -d)
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/large.txt" 4096 --seed 1
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/small.txt" 64 --seed 2
for set in large small; do
  for cost in tokens workload; do
    for kg in "" "--keep-groups"; do
      echo "$set $cost ${kg:-split-groups}: $("$tandem" bench schedule --lengths "$dir/$set.txt" --dp 8 \
        --max-tokens-per-micro 32768 --group-size 8 --cost $cost $kg)"
    done
  done
  echo "$set rows(mbs=4): $("$tandem" bench schedule --lengths "$dir/$set.txt" --dp 8 --micro-batch-size 4 --group-size 8)"
done
rm -rf "$dir"
