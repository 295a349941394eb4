#!/usr/bin/env bash
# A non-finite loss on one rank skips that update on every rank, and the next one proceeds.
# TANDEM_TEST_NAN_LOSS=1:1 makes rank 1 report a NaN loss for its first micro of step index 1
# while its gradients stay finite, so only the loss check (reduce_and_step's local_loss_finite,
# agreed over ranks) can catch it: steps/skipped_updates is 1 at step 2 and 0 elsewhere, and the
# run goes on to its last step. The control: the same run without the fault skips nothing.
set -u
tandem=$1; mpirun=$2; recipe=$3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
          --config "$recipe" --set run.out_dir="$out" --set run.steps=3 "$@"; }
TANDEM_TEST_NAN_LOSS=1:1 run --set run.name=nan >"$out/nan.log" 2>&1 || { echo "FAIL: the run stopped"; tail -20 "$out/nan.log"; exit 1; }
run --set run.name=clean >"$out/clean.log" 2>&1 || { echo "FAIL: the control run"; tail -20 "$out/clean.log"; exit 1; }
"$TANDEM_PYTHON" - "$out/nan/metrics.jsonl" "$out/clean/metrics.jsonl" <<'PY'
import json, sys
nan = [json.loads(l) for l in open(sys.argv[1])]
clean = [json.loads(l) for l in open(sys.argv[2])]
skipped = [r["steps/skipped_updates"] for r in nan]
control = [r["steps/skipped_updates"] for r in clean]
ok = len(nan) == 3 and skipped == [0, 1, 0] and control == [0, 0, 0]
print(("ok   " if ok else "FAIL ") + f"skipped updates per step with the fault {skipped}, without {control}")
sys.exit(0 if ok else 1)
PY
