#!/usr/bin/env bash
# The one test command: installs dependencies, builds, and runs the whole suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
start=$(date +%s)
(cd build && ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-2}" "$@")
echo "test: ctest done in $(( $(date +%s) - start )) s"
