#!/usr/bin/env bash
# The Python reference reads what the C++ Llama saver wrote: `tandem_tests "[.llama_writer]"`
# saves both fixture models, scripts/fixtures/make_llama.py --check parses the directories with
# its own safetensors reader and recomputes the reference logits from them.
# Usage: check_llama_python.sh TESTS_BIN REPO_ROOT
set -euo pipefail
tests_bin=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
TANDEM_LLAMA_OUT_DIR="$out" "$tests_bin" "[.llama_writer]" --warn NoTests
for name in tiny_llama tiny_qwen2; do
  "$TANDEM_PYTHON" "$root/scripts/fixtures/make_llama.py" --check "$name" "$out/$name"
done
