#!/usr/bin/env bash
# torchao's AdamW8bit is the oracle for tandem's (optim.moments: 8bit): the Python writes torchao's
# inputs and results, `tandem_tests "[.adamw8bit_oracle]"` replays the inputs and compares.
# Usage: check_adamw8bit_torchao.sh TESTS_BIN REPO_ROOT
set -euo pipefail
tests_bin=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$TANDEM_PYTHON" "$root/scripts/fixtures/adamw8bit_oracle.py" "$out/oracle.safetensors"
TANDEM_ADAMW8BIT_ORACLE="$out/oracle.safetensors" "$tests_bin" "[.adamw8bit_oracle]"
