#!/usr/bin/env bash
# One error, once ([12]): a recipe error every rank hits is printed once, by rank 0, and the job
# exits 2 through a clean finalize (no MPI_ABORT); an error on one rank only is printed once,
# naming that rank, and still ends the job with 2.
#   check_startup_errors.sh TANDEM MPIRUN
set -u
tandem=$1; mpirun=$2
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf 'run: {steps: 0}\n' >"$out/bad.yaml"
fail=0
$mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4 "$tandem" train --config "$out/bad.yaml" >"$out/a.out" 2>&1; rc=$?
n=$(grep -c "tandem: error" "$out/a.out")
[ $rc -eq 2 ] && [ "$n" -eq 1 ] && grep -q "^tandem: error: run.steps: 0 is out of range" "$out/a.out" && ! grep -q MPI_ABORT "$out/a.out" \
  && echo "ok   a recipe error on 4 ranks: one message from rank 0, exit 2, no MPI_ABORT" \
  || { echo "FAIL recipe error: exit $rc, $n messages"; cat "$out/a.out"; fail=1; }
TANDEM_TEST_FAIL=startup:2 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4 "$tandem" train \
  --set run.out_dir="$out" >"$out/b.out" 2>&1; rc=$?
n=$(grep -c "tandem: error" "$out/b.out")
[ $rc -eq 2 ] && [ "$n" -eq 1 ] && grep -q "tandem: error (rank 2): start-up failure injected" "$out/b.out" \
  && echo "ok   an error on rank 2 only: one message naming rank 2, exit 2" \
  || { echo "FAIL one-rank error: exit $rc, $n messages"; cat "$out/b.out"; fail=1; }
exit $fail
