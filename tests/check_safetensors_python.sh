#!/usr/bin/env bash
# The Python reference reads what the C++ writer wrote: `tandem_tests "[.writer]"` writes the
# fixture tensors with save_safetensors, scripts/fixtures/check_safetensors.py parses them
# independently and compares values, layout and bytes. Usage: check_safetensors_python.sh TESTS_BIN REPO_ROOT
set -euo pipefail
tests_bin=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
TANDEM_SAFETENSORS_OUT_DIR="$out" "$tests_bin" "[.writer]" --warn NoTests
"$TANDEM_PYTHON" "$root/scripts/fixtures/check_safetensors.py" "$root/tests/fixtures/safetensors/expected.json" \
  "$out/all_dtypes.safetensors" "$out/with_metadata.safetensors"
