#!/usr/bin/env bash
# Sampler figures (issue [4/6]): KV cache vs full recompute and continuous vs static batching
# on a lognormal long tail, for the default small model and a 32k-vocabulary one (~45 s on 1 core).
set -euo pipefail
cd "$(dirname "$0")/../.."
tandem=${TANDEM:-build/tandem}
echo "default: $("$tandem" bench rollout)"
echo "vocab32k: $("$tandem" bench rollout --hidden-size 512 --layers 4 --heads 8 --kv-heads 2 --vocab 32000 \
  --prompt-len 32 --max-new-tokens 64 --batch 8 --requests 32)"
