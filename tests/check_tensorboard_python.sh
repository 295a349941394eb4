#!/usr/bin/env bash
# The C++ TensorBoard writer's file, read back by the independent Python reader.
set -eu
tests=$1; reader=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
TANDEM_TB_OUT=$dir "$tests" "[.tbwriter]" >/dev/null
out=$("$TANDEM_PYTHON" "$reader" "$(cat "$dir/path.txt")")
echo "$out"
expected='{"version": "brain.Event:2", "scalars": [[1, "loss", -1.5], [1, "reward/mean", 0.25], [2, "reward/mean", 0.75]]}'
[ "$out" = "$expected" ] || { echo "FAIL: expected $expected"; exit 1; }
