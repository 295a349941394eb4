#!/usr/bin/env bash
# Configures and builds tandem (Release) into build/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${TANDEM_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
start=$(date +%s)
cmake --build build -j "$jobs"
echo "build: done in $(( $(date +%s) - start )) s"
