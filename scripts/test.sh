#!/usr/bin/env bash
# The one test command: installs dependencies, builds, and runs the whole suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# The real tokenizer files (../shared/tokenizers or $TANDEM_TOKENIZER_DIR, sha256-checked); the
# tests that need them are skipped, loudly, only when no copy exists.
bash scripts/fixtures/fetch_tokenizers.sh \
  || echo "WARN: the real tokenizer files are missing (above); their tests will be skipped"
start=$(date +%s)
(cd build && ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-2}" "$@")
echo "test: ctest done in $(( $(date +%s) - start )) s"
