#!/usr/bin/env bash
# Counts fresh processes whose first parallel float64 cos differs from their second, with oneMKL's
# vector math set up on one thread first (warm, as tandem does) and without (cold). A diagnostic,
# not a ctest: the race shows in ~1% of cold processes, so telling the two apart takes hundreds of
# runs (minutes). More threads than cores, or a busy machine, make it likelier.
#   check_vml_first_call.sh BUILD_DIR [RUNS=300] [THREADS=3]
set -u
bin=$1/tests/tandem_vml_first_call; runs=${2:-300}; threads=${3:-3}
[ -x "$bin" ] || { echo "no $bin: build the tests first (cmake --build $1)" >&2; exit 2; }
fail=0
for mode in cold warm; do
  differ=0
  for _ in $(seq "$runs"); do "$bin" "$threads" "$mode" >/dev/null || differ=$((differ + 1)); done
  echo "$mode: $differ of $runs fresh processes at $threads threads: first float64 cos != second"
  [ "$mode" = warm ] && [ "$differ" -gt 0 ] && fail=1
done
exit $fail
