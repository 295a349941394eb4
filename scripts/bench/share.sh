#!/usr/bin/env bash
# Shared prompts ([13]): a group's prompt computed once vs per sample, side by side in one run
# each, on THREADS intra-op threads (default 2) of one process; ~20 min on 2 cores.
#   train:   `bench train --share-prompt compare`, 4 groups of 8 (32 sequences, one micro)
#   rollout: `bench rollout --share-prompt compare`, 16 groups of 8 (128 requests), at the
#            sampler's defaults: a KV cache of max_batch 64 unshared sequences, in which the
#            shared layout decodes up to max_live 256 (here all 128: equal memory, more live);
#            then with max_live 64 too (equal slots, so groups also share across admissions)
# Both: prompts 512-1024 tokens, responses 64-256 (uniform, seed 0), the mid model (hidden 512,
# 4 layers, 8 heads, vocab 32000, float32). tokens/s counts every sequence's prompt and response
# tokens (the unshared batch's real tokens); the speedups are paired step by step / run by run.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"  # the project's virtual environment (scripts/setup.sh)
tandem=${TANDEM:-build/tandem}
threads=${THREADS:-2}
dir=build/bench
mkdir -p "$dir"
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/share_train.txt" 32 --prompt 512 1024 --response 64 256 >/dev/null
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/share_rollout.txt" 128 --prompt 512 1024 --response 64 256 >/dev/null
model=(--heads 8 --vocab 32000 --threads "$threads")
echo "train: $("$tandem" bench train --lengths "$dir/share_train.txt" --hidden 512 --layers 4 "${model[@]}" \
  --share-prompt compare --steps 2 --warmup 1)"
echo "rollout: $("$tandem" bench rollout --lengths "$dir/share_rollout.txt" --hidden-size 512 --layers 4 --kv-heads 8 \
  "${model[@]}" --batch 64 --share-prompt compare --repeats 3)"
echo "rollout_equal_slots: $("$tandem" bench rollout --lengths "$dir/share_rollout.txt" --hidden-size 512 --layers 4 \
  --kv-heads 8 "${model[@]}" --batch 64 --max-live 64 --share-prompt compare --repeats 3)"
