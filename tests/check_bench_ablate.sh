#!/usr/bin/env bash
# bench ablate on the tiny recipe: ABBA runs give one JSON object with paired speedups
# (steady_state); one run refuses its speedup; a failed or hung run exits 1 naming the condition
# and its log; bad input exits 2 before any run starts (the launcher given there is /bin/false).
set -u
tandem=$1; mpirun=$2; recipe=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
common=(bench ablate --config "$recipe" --np 2 --set tracks.ar.warmstart.steps=0 --set train.num_mini_batches=1)
real=(--mpirun "$mpirun" --timeout-s 120)
expect_rc() {  # want_rc, description, command...
  local want=$1 what=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -ne $want ]; then echo "FAIL $what: exit $rc, want $want"; tail -20 "$tmp/out" "$tmp/err"; fail=1
  else echo "ok   $what: $(tail -1 "$tmp/err" | cut -c1-160)"; fi
}

# Three conditions, two rounds: B R M, then M R B. The default run directory (under TMPDIR) goes.
mkdir "$tmp/scratch"; export TMPDIR="$tmp/scratch"  # also where failed runs' directories stay
expect_rc 0 "ABBA, 2 runs" "$tandem" "${common[@]}" "${real[@]}" --runs 2 --steps 2 --warmup-steps 1 \
  --condition B= --condition R=tracks.ar.algo.old_logp=reuse --condition "M=train.micro_batch_size=8;run.seed=3"
cp "$tmp/out" "$tmp/abba.json"
[ -z "$(ls -A "$tmp/scratch")" ] || { echo "FAIL the temporary run directory was not removed"; fail=1; }
"$TANDEM_PYTHON" - "$tmp/abba.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
check(j["measurement_scope"] == "steady_state", "scope steady_state")
check(j["order"] == ["B_1", "R_1", "M_1", "M_2", "R_2", "B_2"], "ABBA order " + " ".join(j["order"]))
check(j["unit"] == "action_tokens" and j["gemm_gflops"] > 0, "unit and gemm_gflops")
c = j["conditions"]
check(list(c) == ["B", "R", "M"], "conditions in the given order")
check(c["M"]["overrides"] == ["train.micro_batch_size=8", "run.seed=3"], "overrides split at ';'")
for name, v in c.items():
    t = v["tokens_per_s"]
    check(len(t["runs"]) == 2 and min(t["runs"]) > 0 and t["min"] <= t["mean"] <= t["max"]
          and len(v["step_s"]) == 2, name + ": 2 runs, tokens/s " + " ".join(f"{x:.0f}" for x in t["runs"]))
    s = v["speedup_vs_B"]
    check(s is not None and len(s["pairs"]) == 2 and s["geomean"] > 0, name + f": speedup {(s or {}).get('geomean', 0):.3f}")
    pairs = [a / b for a, b in zip(t["runs"], c["B"]["tokens_per_s"]["runs"])]
    check(all(abs(p - q) < 1e-9 * q for p, q in zip(s["pairs"], pairs)), name + ": pairs are run i over B's run i")
check(abs(c["B"]["speedup_vs_B"]["geomean"] - 1) < 1e-12, "B against itself is 1")
sys.exit(0 if ok else 1)
PY

# One run per condition, the first step only: no speedup, a reason instead; --out is kept.
expect_rc 0 "one run" "$tandem" "${common[@]}" "${real[@]}" --runs 1 --steps 1 --warmup-steps 0 --out "$tmp/one" \
  --condition R=tracks.ar.algo.old_logp=reuse --condition B=
"$TANDEM_PYTHON" - "$tmp/out" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
r = j["conditions"]["R"]
assert j["measurement_scope"] == "first_step", j["measurement_scope"]
assert j["order"] == ["R_1", "B_1"], j["order"]
assert r["speedup_vs_B"] is None and "single unpaired run" in r["speedup_refused"], r
assert len(r["tokens_per_s"]["runs"]) == 1 and r["tokens_per_s"]["runs"][0] > 0
print("ok   one run: first_step, speedup null:", r["speedup_refused"])
PY
for f in one/B_1.log one/R_1.log one/B_1/metrics.jsonl; do
  [ -s "$tmp/$f" ] || { echo "FAIL --out lacks $f"; fail=1; }
done
expect_rc 2 "--out already holds the runs" "$tandem" "${common[@]}" "${real[@]}" --runs 1 --out "$tmp/one" --condition B=

# A run that fails or hangs ends the bench with exit 1, naming the condition and the log.
expect_rc 1 "failing run" "$tandem" "${common[@]}" --mpirun /bin/false --runs 1 --condition B=
grep -q "condition B run 1 exited with status 1; log: .*/B_1.log" "$tmp/err" || { echo "FAIL failing-run message"; fail=1; }
start=$(date +%s)
expect_rc 1 "hung run" "$tandem" "${common[@]}" --mpirun "$mpirun" --timeout-s 0.5 --runs 1 --condition B=
grep -q "condition B run 1 ran past --timeout-s" "$tmp/err" || { echo "FAIL timeout message"; fail=1; }
[ $(( $(date +%s) - start )) -lt 30 ] || { echo "FAIL the timed-out run took too long to end"; fail=1; }

# Bad input: exit 2 before anything runs (/bin/false as launcher would exit 1 if a run started).
bad=(bench ablate --config "$recipe" --mpirun /bin/false)
expect_rc 2 "no baseline B" "$tandem" "${bad[@]}" --condition A= --condition C=run.seed=2
expect_rc 2 "condition without =" "$tandem" "${bad[@]}" --condition B= --condition R
expect_rc 2 "condition without a name" "$tandem" "${bad[@]}" --condition B= --condition =run.seed=2
expect_rc 2 "override not KEY=VALUE" "$tandem" "${bad[@]}" --condition B= --condition R=reuse
expect_rc 2 "name with a slash" "$tandem" "${bad[@]}" --condition B= --condition a/b=run.seed=2
expect_rc 2 "duplicate names" "$tandem" "${bad[@]}" --condition B= --condition B=run.seed=2
expect_rc 2 "--runs 0" "$tandem" "${bad[@]}" --condition B= --runs 0
expect_rc 2 "--steps 0" "$tandem" "${bad[@]}" --condition B= --steps 0
expect_rc 2 "no --config" "$tandem" bench ablate --mpirun /bin/false --condition B=
expect_rc 2 "missing recipe file" "$tandem" bench ablate --config /nonexistent.yaml --mpirun /bin/false --condition B=
expect_rc 2 "unknown key in a condition" "$tandem" "${bad[@]}" --condition B= --condition X=train.bogus=1
expect_rc 2 "reuse with 2 mini-batches" "$tandem" "${bad[@]}" --condition B= --condition R=tracks.ar.algo.old_logp=reuse
expect_rc 2 "a key the bench owns" "$tandem" "${bad[@]}" --condition B= --set run.steps=3
expect_rc 2 "missing launcher" "$tandem" bench ablate --config "$recipe" --mpirun /nonexistent/mpirun --condition B=
exit $fail
