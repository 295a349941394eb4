#!/usr/bin/env bash
# Resume is exact: 6 steps straight vs 3 steps, SIGKILL, --resume auto, 3 more -> identical
# metrics lines (all but timing). And a SIGKILL during the step-6 checkpoint write resumes from
# the step-3 checkpoint and still ends identical. A checkpoint damaged after it was written is
# refused by `ckpt info` and a named --resume (exit 2, naming the file), and --resume auto falls
# back past it to step 3 and still ends identical.
set -u
tandem=$1; mpirun=$2; recipe=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
          --config "$recipe" --set run.out_dir="$out" "$@"; }
fail=0
run --set run.name=straight >"$out/straight.log" 2>&1 || { echo "FAIL straight run"; tail -30 "$out/straight.log"; exit 1; }

TANDEM_TEST_KILL=after_step:3 run --set run.name=killed >"$out/k1.log" 2>&1
rc=$?; [ $rc -ne 0 ] || { echo "FAIL: the killed run exited 0"; fail=1; }
[ -f "$out/killed/checkpoints/step_000003/COMPLETE" ] || { echo "FAIL: no step-3 checkpoint"; tail -30 "$out/k1.log"; exit 1; }
run --set run.name=killed --resume auto >"$out/k2.log" 2>&1 || { echo "FAIL resumed run"; tail -30 "$out/k2.log"; exit 1; }
grep -q "resume: .*step_000003 at step 3" "$out/k2.log" || { echo "FAIL: did not resume from step 3"; fail=1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight/metrics.jsonl" "$out/killed/metrics.jsonl" || fail=1

TANDEM_TEST_KILL=in_checkpoint:6 run --set run.name=torn >"$out/t1.log" 2>&1
[ -d "$out/torn/checkpoints/.step_000006.staging" ] || { echo "FAIL: no torn staging dir"; fail=1; }
[ "$(cat "$out/torn/checkpoints/latest")" = step_000003 ] || { echo "FAIL: latest moved to a torn checkpoint"; fail=1; }
run --set run.name=torn --resume auto >"$out/t2.log" 2>&1 || { echo "FAIL resume after torn write"; tail -30 "$out/t2.log"; exit 1; }
grep -q "resume: .*step_000003 at step 3" "$out/t2.log" || { echo "FAIL: torn run did not resume from step 3"; fail=1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight/metrics.jsonl" "$out/torn/metrics.jsonl" || fail=1

cp -r "$out/straight" "$out/damaged"
model="$out/damaged/checkpoints/step_000006/ar_model/model.safetensors"
"$TANDEM_PYTHON" -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[-5] ^= 1; open(sys.argv[1], 'wb').write(b)" "$model"
"$tandem" ckpt info "$out/straight" >"$out/info_ok.log" 2>&1 && grep -q "^integrity: ok, " "$out/info_ok.log" \
  || { echo "FAIL: ckpt info on an intact checkpoint"; cat "$out/info_ok.log"; fail=1; }
"$tandem" ckpt info "$out/damaged" >"$out/info_bad.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "damaged checkpoint: ar_model/model.safetensors: contents changed" "$out/info_bad.log" \
  || { echo "FAIL: ckpt info on a damaged checkpoint: exit $rc"; cat "$out/info_bad.log"; fail=1; }
run --set run.name=damaged --resume "$out/damaged/checkpoints/step_000006" >"$out/d1.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "damaged checkpoint: ar_model/model.safetensors" "$out/d1.log" \
  || { echo "FAIL: named damaged resume: exit $rc"; tail -5 "$out/d1.log"; fail=1; }
run --set run.name=damaged --resume auto >"$out/d2.log" 2>&1 || { echo "FAIL resume past damage"; tail -30 "$out/d2.log"; exit 1; }
grep -q "skipping damaged checkpoint .*step_000006 (ar_model/model.safetensors: .*; using .*step_000003" "$out/d2.log" \
  || { echo "FAIL: no warning naming the damaged file"; fail=1; }
grep -q "resume: .*step_000003 at step 3" "$out/d2.log" || { echo "FAIL: damaged run did not resume from step 3"; fail=1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight/metrics.jsonl" "$out/damaged/metrics.jsonl" || fail=1

# Starting over a run that has checkpoints, without --resume, is refused (no lost data).
run --set run.name=straight >"$out/again.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "already holds checkpoints" "$out/again.log" || { echo "FAIL: rerun without --resume: exit $rc"; fail=1; }
# An incompatible recipe is refused on resume.
run --set run.name=straight --set tracks.ar.model.hidden_size=48 --resume auto >"$out/incompat.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "differs in model, tokenizer, LoRA or optim.moments" "$out/incompat.log" || { echo "FAIL: incompatible resume: exit $rc"; fail=1; }
# optim.moments: 8bit (the MLP's three 32x128 weights get 8-bit moments): resume is exact too, and
# a checkpoint is not resumed with the other moments.
q8=(--set optim.moments=8bit --set tracks.ar.model.intermediate_size=128)
run "${q8[@]}" --set run.name=straight8 >"$out/s8.log" 2>&1 || { echo "FAIL 8-bit straight run"; tail -30 "$out/s8.log"; exit 1; }
grep -q "optim.moments: 8bit: .* for 3 of 12 trained tensors" "$out/s8.log" || { echo "FAIL: no 8-bit moments line"; grep optim "$out/s8.log"; fail=1; }
TANDEM_TEST_KILL=after_step:3 run "${q8[@]}" --set run.name=killed8 >"$out/k81.log" 2>&1
run "${q8[@]}" --set run.name=killed8 --resume auto >"$out/k82.log" 2>&1 || { echo "FAIL 8-bit resumed run"; tail -30 "$out/k82.log"; exit 1; }
grep -q "resume: .*step_000003 at step 3" "$out/k82.log" || { echo "FAIL: 8-bit run did not resume from step 3"; fail=1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight8/metrics.jsonl" "$out/killed8/metrics.jsonl" || fail=1
# Control: the 8-bit run is not the float32 run (same model shape).
run --set tracks.ar.model.intermediate_size=128 --set run.name=float8 >"$out/f8.log" 2>&1 || { echo "FAIL float32 run"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight8/metrics.jsonl" "$out/float8/metrics.jsonl" >/dev/null 2>&1 \
  && { echo "FAIL: 8-bit moments left the metrics identical to float32's"; fail=1; }
run --set tracks.ar.model.intermediate_size=128 --set run.name=killed8 --resume auto >"$out/m8.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "differs in model, tokenizer, LoRA or optim.moments (optim: ... '  moments: 8bit' vs now '  moments: float32')" "$out/m8.log" \
  || { echo "FAIL: resuming 8-bit moments as float32: exit $rc"; tail -3 "$out/m8.log"; fail=1; }
[ $fail -eq 0 ] && echo "ok: resume exact after SIGKILL, a torn checkpoint write and a damaged checkpoint"
exit $fail
