#!/usr/bin/env bash
# Hybrid-async rollout ([8]): train.overlap trains bitwise-identical weights; disaggregated rollout
# ranks at staleness 0 train the colocated weights (float64, 1e-10); staleness 2 runs with TIS
# and reports a lag histogram bounded by 2; resume restores the policy version and the data
# cursor; a killed rollout rank ends the job within the timeout; bad combinations exit 2.
set -u
tandem=$1; mpirun=$2; recipe=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { local np=$1; shift; timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
          "$tandem" train --config "$recipe" --set run.out_dir="$out" --set run.dtype=float64 "$@"; }
model() { echo "$out/$1/checkpoints/step_00000$2/ar_model/model.safetensors"; }
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# 1. Overlap: same weights bitwise; the control (another micro size) shows the comparison can fail.
run 2 --set run.name=base --set run.steps=3 >"$out/base.log" 2>&1 || { tail -20 "$out/base.log"; exit 1; }
run 2 --set run.name=overlap --set run.steps=3 --set train.overlap=true >"$out/ov.log" 2>&1 || { tail -20 "$out/ov.log"; exit 1; }
run 2 --set run.name=control --set run.steps=3 --set train.overlap=true --set train.micro_batch_size=2 \
  >"$out/ctl.log" 2>&1 || { tail -20 "$out/ctl.log"; exit 1; }
cmp -s "$(model base 3)" "$(model overlap 3)" && ok "overlap: weights after 3 steps equal overlap: false bitwise" \
  || bad "overlap changed the weights"
cmp -s "$(model base 3)" "$(model control 3)" && bad "control: another micro size gave the same weights" \
  || ok "control: another micro size gives other weights"
"$TANDEM_PYTHON" - "$out/overlap/metrics.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
dev = max(r["ar/pg/first_ratio_max_dev"] for r in rows)
threads = rows[0]["ar/overlap/sample_threads"], rows[0]["ar/overlap/forward_threads"]
print(f"ok: overlap first-update ratio max |r - 1| = {dev} (threads sample/forward {threads})")
sys.exit(0 if dev == 0 else 1)
PY

# 2. Disaggregated at staleness 0 = colocated: 2 train + 1 rollout rank, and 1 train + 2 rollout.
run 3 --set run.name=dis_a --set run.steps=3 --set parallel.rollout_ranks=1 >"$out/da.log" 2>&1 || { tail -20 "$out/da.log"; exit 1; }
run 3 --set run.name=dis_b --set run.steps=3 --set parallel.rollout_ranks=2 >"$out/db.log" 2>&1 || { tail -20 "$out/db.log"; exit 1; }
for r in dis_a dis_b; do
  "$TANDEM_PYTHON" "$here/max_weight_diff.py" "$(model base 3)" "$(model $r 3)" 1e-10 && ok "$r (staleness 0) = colocated" \
    || bad "$r weights differ from colocated"
done

# 3. Staleness 2 with TIS: lags bounded by 2, histogram covers every sample, nothing dropped.
run 3 --set run.name=stale --set run.steps=6 --set run.save_every=3 --set parallel.rollout_ranks=1 \
  --set tracks.ar.rollout.max_staleness=2 --set tracks.ar.algo.tis_cap=2.0 >"$out/st.log" 2>&1 || { tail -20 "$out/st.log"; exit 1; }
"$TANDEM_PYTHON" - "$out/stale/metrics.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
lags = [[r.get(f"ar/rollout/lag_{k}", 0) for k in range(3)] for r in rows]
hist = [sum(l[k] for l in lags) for k in range(3)]
ok = all(sum(l) == r["ar/rollout/samples"] for l, r in zip(lags, rows)) and hist[2] > 0 and \
     all(r["ar/rollout/stale_dropped"] == 0 for r in rows) and all(0 < r["ar/tis/weight_mean"] < 2 for r in rows)
print(("ok" if ok else "FAIL") + f": staleness 2 lag histogram (samples at lag 0/1/2) {hist}, per step "
      f"{[r['ar/rollout/lag_mean'] for r in rows]}")
sys.exit(0 if ok else 1)
PY

# 4. Resume: staleness 0 continues exactly; staleness 2 restores the version and the cursor.
run 3 --set run.name=straight --set run.steps=6 --set run.save_every=3 --set parallel.rollout_ranks=1 \
  >"$out/s.log" 2>&1 || { tail -20 "$out/s.log"; exit 1; }
TANDEM_TEST_KILL=after_step:3 run 3 --set run.name=killed --set run.steps=6 --set run.save_every=3 \
  --set parallel.rollout_ranks=1 >"$out/k1.log" 2>&1 && bad "the killed run exited 0"
run 3 --set run.name=killed --set run.steps=6 --set run.save_every=3 --set parallel.rollout_ranks=1 --resume auto \
  >"$out/k2.log" 2>&1 || { tail -20 "$out/k2.log"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight/metrics.jsonl" "$out/killed/metrics.jsonl" \
  && ok "disaggregated resume at staleness 0 continues exactly" || bad "disaggregated resume differs"
TANDEM_TEST_KILL=after_step:3 run 3 --set run.name=stale_k --set run.steps=6 --set run.save_every=3 --set parallel.rollout_ranks=1 \
  --set tracks.ar.rollout.max_staleness=2 --set tracks.ar.algo.tis_cap=2.0 >"$out/sk1.log" 2>&1 && bad "killed stale run exited 0"
run 3 --set run.name=stale_k --set run.steps=6 --set run.save_every=3 --set parallel.rollout_ranks=1 --resume auto \
  --set tracks.ar.rollout.max_staleness=2 --set tracks.ar.algo.tis_cap=2.0 >"$out/sk2.log" 2>&1 || { tail -20 "$out/sk2.log"; exit 1; }
"$TANDEM_PYTHON" - "$out/stale/checkpoints/step_000006/trainer_state.json" "$out/stale_k/checkpoints/step_000006/trainer_state.json" \
  "$out/stale_k/metrics.jsonl" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
rows = [json.loads(l) for l in open(sys.argv[3])]
step4 = [r for r in rows if r["step"] == 4][-1]
same = a["tracks"]["ar"]["data_cursor"] == b["tracks"]["ar"]["data_cursor"] and a["completed_steps"] == b["completed_steps"]
ok = same and step4["ar/rollout/lag_mean"] == 0
print(("ok" if ok else "FAIL") + f": staleness-2 resume: data cursor {b['tracks']['ar']['data_cursor']} as uninterrupted: "
      f"{same}; first resumed step samples version 3 (lag {step4['ar/rollout/lag_mean']})")
sys.exit(0 if ok else 1)
PY

# 5. A killed rollout rank ends the job, non-zero, within the collective timeout.
start=$(date +%s)
TANDEM_TEST_KILL=rollout:2 run 3 --set run.name=dead --set run.steps=6 --set parallel.rollout_ranks=1 \
  --set parallel.timeout_s=10 >"$out/dead.log" 2>&1; rc=$?
took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $took -lt 40 ] && ok "killed rollout rank: exit $rc after ${took} s" || bad "killed rollout rank: exit $rc after ${took} s"

# 6. Bad combinations exit 2 naming the keys.
expect2() { local what=$1; shift; "$tandem" check-config --config "$recipe" "$@" >"$out/bad.log" 2>&1; local rc=$?
  [ $rc -eq 2 ] && grep -q "$what" "$out/bad.log" && ok "refused: $(head -c 150 "$out/bad.log")" || { bad "exit $rc for $*"; cat "$out/bad.log"; }; }
expect2 "old_logp: reuse" --set train.overlap=true --set tracks.ar.algo.old_logp=reuse --set train.num_mini_batches=1
expect2 "tis_cap" --set parallel.rollout_ranks=1 --set tracks.ar.rollout.max_staleness=1
expect2 "rollout_ranks" --set tracks.ar.rollout.max_staleness=1 --set tracks.ar.algo.tis_cap=2
expect2 "divisible" --set train.overlap=true --set train.num_mini_batches=3
expect2 "leaves no train rank" --set parallel.rollout_ranks=2 --world-size 2
[ $fail -eq 0 ] && echo "ok: hybrid-async rollout checks"
exit $fail
