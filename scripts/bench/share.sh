#!/usr/bin/env bash
# Shared prompts ([13]): a group's prompt computed once vs per sample, side by side in one run
# each, on THREADS intra-op threads (default 2) of one process; ~17 min on 2 cores.
#   train:   `bench train --share-prompt compare`, 4 groups of 8 (32 sequences, one micro)
#   rollout: `bench rollout --share-prompt compare`, 16 groups of 8 (128 requests) through 64
#            slots (the sampler's default max_batch), so groups also share across admissions;
#            then the same requests through 128 slots (the whole rollout in one batch)
# Both: prompts 512-1024 tokens, responses 64-256 (uniform, seed 0), the mid model (hidden 512,
# 4 layers, 8 heads, vocab 32000, float32). tokens/s counts every sequence's prompt and response
# tokens (the unshared batch's real tokens); the speedups are paired step by step / run by run.
set -euo pipefail
cd "$(dirname "$0")/../.."
tandem=${TANDEM:-build/tandem}
threads=${THREADS:-2}
dir=build/bench
mkdir -p "$dir"
/usr/bin/python3 scripts/bench/make_lengths.py "$dir/share_train.txt" 32 --prompt 512 1024 --response 64 256 >/dev/null
/usr/bin/python3 scripts/bench/make_lengths.py "$dir/share_rollout.txt" 128 --prompt 512 1024 --response 64 256 >/dev/null
model=(--heads 8 --vocab 32000 --threads "$threads")
echo "train: $("$tandem" bench train --lengths "$dir/share_train.txt" --hidden 512 --layers 4 "${model[@]}" \
  --share-prompt compare --steps 2 --warmup 1)"
echo "rollout: $("$tandem" bench rollout --lengths "$dir/share_rollout.txt" --hidden-size 512 --layers 4 --kv-heads 8 \
  "${model[@]}" --batch 64 --share-prompt compare --repeats 2)"
echo "rollout_batch128: $("$tandem" bench rollout --lengths "$dir/share_rollout.txt" --hidden-size 512 --layers 4 \
  --kv-heads 8 "${model[@]}" --batch 128 --share-prompt compare --repeats 2)"
