#!/usr/bin/env bash
# Held-out evaluation ([12]): `tandem eval` of one checkpoint gives the same metrics (mean reward,
# greedy pass@1, pass@k) at 1 and 2 ranks to every digit, and equals the in-training eval of that
# step; in training, dp 1 and dp 2 give the same AR eval figures and image eval figures within
# 1e-6 (their weights differ by the reassociation of the dp gradient sum); readable samples
# (samples/step_N.jsonl) hold prompt, response, reward, advantage and length.
#   check_eval.sh TANDEM MPIRUN TINY_UNIFIED_RECIPE
set -u
tandem=$1; mpirun=$2; recipe=$3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ev=(--set eval.every=2 --set eval.at_start=true --set eval.max_prompts=12 --set eval.samples_per_prompt=4
    --set eval.correct_at=0.1 --set eval.image.samples_per_class=3 --set run.out_dir="$out")
for np in 1 2; do
  timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np "$tandem" train \
    --config "$recipe" "${ev[@]}" --set run.name=np$np >"$out/np$np.log" 2>&1 \
    || { echo "FAIL: train at dp $np"; tail -20 "$out/np$np.log"; exit 1; }
done
grep -q "eval after step 4 | ar reward" "$out/np2.log" || { echo "FAIL: no eval line in the log"; fail=1; }
[ -f "$out/np2/samples/eval_step_000004.png" ] && [ -f "$out/np1/samples/eval_step_000000.png" ] \
  || { echo "FAIL: no eval grid"; fail=1; }
"$tandem" eval --checkpoint "$out/np2" >"$out/eval.json" 2>"$out/eval.err" || { echo "FAIL: tandem eval: $(cat "$out/eval.err")"; fail=1; }
timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" eval \
  --checkpoint "$out/np2" >"$out/eval2.json" 2>"$out/eval2.err" || { echo "FAIL: tandem eval -np 2: $(cat "$out/eval2.err")"; fail=1; }
"$TANDEM_PYTHON" - "$out/np1/metrics.jsonl" "$out/np2/metrics.jsonl" "$out/eval.json" "$out/np2/samples/step_000004.jsonl" \
  "$out/eval2.json" <<'PY' || fail=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
evals = lambda rows: {(r["step"], k): v for r in rows for k, v in r.items() if "/eval/" in k and not k.endswith("time_s")}
ea, eb = evals(a), evals(b)
problems = []
if sorted(s for s, _ in ea) != sorted(s for s, _ in eb) or {s for s, _ in ea} != {0, 2, 4}:
    problems.append(f"eval steps {sorted({s for s, _ in ea})} vs {sorted({s for s, _ in eb})}")
def close(k, u, v):
    return u == v if k[1].startswith("ar/") else abs(u - v) <= 1e-6 * max(abs(v), 1e-12)
problems += [f"{k}: dp1 {v!r} vs dp2 {eb.get(k)!r}" for k, v in sorted(ea.items()) if eb.get(k) is None or not close(k, v, eb[k])]
keys = {k for _, k in ea}
for k in ("ar/eval/reward_mean", "ar/eval/pass@1_greedy", "ar/eval/pass@4", "image/eval/reward_mean"):
    if k not in keys:
        problems.append(f"missing {k}")
# Control: the comparison is not of zeros.
if not any(v > 0 for (s, k), v in ea.items() if k.startswith("ar/eval/pass@") and not k.endswith("greedy")):
    problems.append("every pass@k is 0: the dp comparison would prove nothing")
alone = json.load(open(sys.argv[3]))
two = json.load(open(sys.argv[5]))
strip = lambda d: {k: v for k, v in d.items() if k.startswith("eval/") and not k.endswith("time_s")}
if strip(alone) != strip(two) or two.get("ranks") != 2:
    problems.append(f"tandem eval at 1 and 2 ranks differ: {strip(alone)} vs {strip(two)}")
for k in ("reward_mean", "pass@1_greedy", "pass@1", "pass@4"):
    if alone.get("eval/" + k) != eb.get((4, "ar/eval/" + k)):
        problems.append(f"tandem eval {k} {alone.get('eval/' + k)!r} vs the last in-training eval {eb.get((4, 'ar/eval/' + k))!r}")
recs = [json.loads(l) for l in open(sys.argv[4])]
need = {"prompt", "response", "reward", "advantage", "response_tokens", "group", "step", "track"}
if not recs or any(need - set(r) for r in recs) or len({r["group"] for r in recs}) != 2:
    problems.append(f"samples/step_000004.jsonl: {len(recs)} records, fields {sorted(set(recs[0]) if recs else [])}")
for p in problems:
    print("FAIL", p)
if not problems:
    print(f"ok   tandem eval equal at 1 and 2 ranks and to step 4's; {len(ea)} in-training eval values agree at dp 1 "
          f"and 2 (steps 0, 2, 4); "
          f"{len(recs)} readable samples of 2 groups")
sys.exit(1 if problems else 0)
PY
exit $fail
