#!/usr/bin/env bash
# Configures and builds tandem (Release) into build/ against the LibTorch inside the project's
# PyTorch wheel (scripts/setup.sh installs it). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${TANDEM_BUILD_JOBS:-$(nproc)}
venv=${TANDEM_VENV:-.venv}
python=$(cd "$(dirname "$venv/bin/python")" && pwd)/python
[ -x "$python" ] || { echo "build: $venv/bin/python not found: run scripts/setup.sh first" >&2; exit 2; }
torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DTANDEM_PYTHON="$python" "$@" >/dev/null
start=$(date +%s)
cmake --build build -j "$jobs"
echo "build: done in $(( $(date +%s) - start )) s"
