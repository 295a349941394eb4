#!/usr/bin/env bash
# transformers as the oracle for the model: scripts/fixtures/hf_oracle.py writes random-init Qwen2 and
# Llama directories with save_pretrained (tied embeddings, q/k/v biases, llama3 and linear rope
# scaling, head_dim != hidden / heads; float32 and bf16 files, one file and several shards) and the
# logits transformers computes; `tandem_tests "[.hf_oracle]"` loads each directory and compares.
# Usage: check_transformers_oracle.sh TESTS_BIN REPO_ROOT
set -euo pipefail
tests_bin=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" models "$out"
TANDEM_HF_ORACLE="$out/manifest.json" "$tests_bin" "[.hf_oracle]"
