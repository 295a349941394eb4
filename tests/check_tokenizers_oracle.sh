#!/usr/bin/env bash
# Hugging Face's tokenizers as the oracle for tandem's tokenizer: scripts/fixtures/hf_oracle.py encodes
# its corpus with the real GPT-2, Llama-3, Qwen2.5, Qwen3, Mistral and Gemma 3 tokenizer.json files
# (and Mistral's rewritten with a Metaspace pre-tokenizer), then
# `tandem_tests "[.hf_tokenizers]"` checks tandem's ids and decoded text against it.
# Usage: check_tokenizers_oracle.sh TESTS_BIN REPO_ROOT TOKENIZER_CACHE   (exit 77: no tokenizer files)
set -euo pipefail
tests_bin=$1; root=$2; tok=$3
for name in gpt2 llama3 qwen2_5 qwen3 mistral gemma3; do
  if [ ! -f "$tok/$name/tokenizer.json" ]; then
    echo "SKIP: the real $name tokenizer is not in $tok (scripts/fixtures/fetch_tokenizers.sh puts it there)"
    exit 77
  fi
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" tokenize "$tok" "$out/ref.json"
TANDEM_HF_TOKENIZERS="$out/ref.json" "$tests_bin" "[.hf_tokenizers]"
