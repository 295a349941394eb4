#!/usr/bin/env bash
# Multi-turn episodes as users run them ([21]), under mpirun -np 2 with the real Qwen2.5 tokenizer and
# chat template (tests/e2e/tiny_env.yaml, a tiny random model):
#   - the built-in guess environment: episodes of several turns train (env/turns_mean > 1, none failed),
#     the eval section plays episodes too (ar/eval/turns_mean, ar/eval/success), and samples/ shows
#     each episode's model turns apart;
#   - under tp 2 and cp 2 the model's peers share one environment (its answers broadcast), and a
#     crashing environment fails the same episode on both peers;
#   - the shipped Python example environment (docs/env_example.py) as env.command drives a run;
#   - a command environment that crashes, answers garbage, prints a stray line or hangs on one episode
#     fails that episode only and is restarted, and the run goes on (env/failed and env/restarts > 0);
#   - resume is exact: killed after step 2 and resumed, step 3 equals 3 steps straight;
#   - one whose every episode fails stops the run with exit 2 naming env.max_failed_fraction;
#   - env.samples turn (a sample per model turn) trains what episodes train under token-mean (step 1's
#     gradient norm equal), and not under seq-mean-token-sum (the control);
#   - the shipped demo recipe (configs/tool_calc.yaml) warm-starts on its demonstrations and trains
#     episodes (a few steps of it);
#   - no environment process outlives its run.
#   check_env.sh TANDEM MPIRUN SOURCE_DIR TOKENIZER_CACHE   (exit 77: no tokenizer files)
set -u
tandem=$1; mpirun=$2; root=$3; tok=$4/qwen2_5
if [ ! -f "$tok/tokenizer.json" ]; then
  echo "SKIP: the qwen2_5 tokenizer files are not in $tok (scripts/fixtures/fetch_tokenizers.sh puts them there)"
  exit 77
fi
py=${TANDEM_PYTHON:-python3}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

run() {  # NAME [--set ...]: exit status of the run
  local name=$1; shift
  timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
    --config "$root/tests/e2e/tiny_env.yaml" --set run.out_dir="$out/runs" --set run.name="$name" \
    --set tracks.ar.tokenizer.path="$tok/tokenizer.json" "$@" >"$out/$name.log" 2>&1
}
metric() {  # NAME KEY: the last value of KEY in the run's metrics.jsonl
  "$py" - "$out/runs/$1/metrics.jsonl" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
vals = [r[sys.argv[2]] for r in rows if sys.argv[2] in r]
print(vals[-1] if vals else "missing")
PY
}

if run guess --set eval.every=2 --set eval.samples_per_prompt=2 --set eval.max_prompts=3; then
  turns=$(metric guess ar/env/turns_mean); failed=$(metric guess ar/env/failed)
  if "$py" -c "import sys; sys.exit(0 if float('$turns') > 1 and float('$failed') == 0 else 1)" 2>/dev/null; then
    ok "guess: 2 steps of multi-turn episodes trained (env/turns_mean $turns, env/failed $failed)"
  else
    bad "guess: env/turns_mean $turns, env/failed $failed"
  fi
  eturns=$(metric guess ar/eval/turns_mean); success=$(metric guess ar/eval/success)
  if "$py" -c "import sys; sys.exit(0 if float('$eturns') > 1 and 0 <= float('$success') <= 1 else 1)" 2>/dev/null; then
    ok "the eval section runs episodes (ar/eval/turns_mean $eturns, ar/eval/success $success)"
  else
    bad "eval of episodes: ar/eval/turns_mean $eturns, ar/eval/success $success"
  fi
  if "$tandem" eval --checkpoint "$out/runs/guess" --set eval.max_prompts=2 --set eval.samples_per_prompt=2 \
       --set "tracks.ar.tokenizer.path=$tok/tokenizer.json" >"$out/eval.log" 2>&1 \
     && grep -q '"eval/turns_mean"' "$out/eval.log" && grep -qE '"eval/prompts":2(\.0)?[,}]' "$out/eval.log"; then
    ok "tandem eval --checkpoint plays episodes: $(grep -o '"eval/success":[0-9.]*' "$out/eval.log"), $(grep -o '"eval/turns_mean":[0-9.]*' "$out/eval.log")"
  else
    bad "tandem eval on an episode run: $(tail -5 "$out/eval.log")"
  fi
  # --config gives the eval section; the checkpoint's model replaces the recipe's, whose hf_dir is
  # not opened (it once was: a recipe written on another machine failed here).
  if "$tandem" eval --checkpoint "$out/runs/guess" --config "$root/tests/e2e/tiny_env.yaml" \
       --set tracks.ar.model.hf_dir=/nonexistent/model --set eval.max_prompts=2 --set eval.samples_per_prompt=2 \
       --set "tracks.ar.tokenizer.path=$tok/tokenizer.json" >"$out/eval_config.log" 2>&1 \
     && grep -qE '"eval/prompts":2(\.0)?[,}]' "$out/eval_config.log"; then
    ok "tandem eval --checkpoint --config: the recipe's own hf_dir is not opened"
  else
    bad "tandem eval --checkpoint --config: $(tail -5 "$out/eval_config.log")"
  fi
  if grep -rqs '"model_turns"' "$out/runs/guess/samples"; then ok "samples/ shows the episodes' model turns"
  else bad "samples/ has no model_turns: $(ls "$out/runs/guess")"; fi
else
  bad "guess run: $(tail -15 "$out/guess.log")"
fi

# tp and cp: the model's peers generate together, one of them talks to the environment.
for layout in "tp2 --set parallel.tp=2" "cp2 --set parallel.cp=2"; do
  set -- $layout
  name=$1; shift
  if run "$name" --set tracks.ar.model.num_kv_heads=2 "$@"; then
    turns=$(metric "$name" ar/env/turns_mean); failed=$(metric "$name" ar/env/failed)
    if "$py" -c "import sys; sys.exit(0 if float('$turns') > 1 and float('$failed') == 0 else 1)" 2>/dev/null; then
      ok "guess with $*: the peers share one environment (env/turns_mean $turns, env/failed $failed)"
    else
      bad "guess with $*: env/turns_mean $turns, env/failed $failed"
    fi
  else
    bad "guess with $*: $(tail -15 "$out/$name.log")"
  fi
done

# A private copy, so the orphan check below cannot see another test's run of the same file.
cp "$root/docs/env_example.py" "$out/env_example.py"
if run example --set tracks.ar.env.name=command --set "tracks.ar.env.command=$py $out/env_example.py"; then
  ok "the Python example environment drives a run (env/episodes $(metric example ar/env/episodes))"
else
  bad "example environment run: $(tail -15 "$out/example.log")"
fi

# A fake environment: episodes end after one step with a reward, except the first member of prompt
# slot 0, whose step is held until every other episode this process held is closed; then it
# misbehaves as MODE (so it alone is held when it does).
cat >"$out/fake_env.py" <<'PY'
import json, sys, time
mode, live, held = sys.argv[1], set(), None
def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
def misbehave(rid):
    if mode == "crash": sys.stderr.write("fake env: crashing\n"); sys.exit(3)
    if mode == "garbage": print("oops", flush=True)
    if mode == "stray": out({"id": 10**6})
    if mode == "hang": time.sleep(1000)
for line in sys.stdin:
    req = json.loads(line)
    kind, rid = req["type"], req["id"]
    if kind == "hello":
        out({"id": rid, "name": "fake", "tools": [], "max_turns": 4, "stop": []}); continue
    ep = req["episode"]
    if kind == "close":
        live.discard(ep); out({"id": rid})
        if held is not None and live == {held[0]}: misbehave(held[1]); held = None
        continue
    if kind == "reset":
        if mode == "crash-all": sys.exit(5)
        live.add(ep); out({"id": rid, "messages": [{"role": "user", "content": "Say something."}]}); continue
    if ep.endswith("-p0-m0") and mode != "ok":
        if live == {ep}: misbehave(rid)
        else: held = (ep, rid)
        continue
    out({"id": rid, "messages": [], "reward": float(len(req["text"]) % 3), "done": True})
PY
for mode in crash garbage stray hang; do
  if run "fake_$mode" --set tracks.ar.env.name=command --set "tracks.ar.env.command=$py $out/fake_env.py $mode" \
       --set tracks.ar.env.timeout_s=3 --set tracks.ar.rollout.prompts_per_step=4; then
    f=$(metric "fake_$mode" ar/env/failed); r=$(metric "fake_$mode" ar/env/restarts)
    if "$py" -c "import sys; sys.exit(0 if float('$f') >= 1 and float('$r') >= 1 and float('$f') < 12 else 1)"; then
      ok "an environment that goes $mode on one episode: that episode failed (env/failed $f, env/restarts $r), the run went on"
    else
      bad "$mode: env/failed $f, env/restarts $r"
    fi
  else
    bad "$mode run: $(tail -15 "$out/fake_$mode.log")"
  fi
done

if run fake_crash_tp2 --set tracks.ar.env.name=command --set "tracks.ar.env.command=$py $out/fake_env.py crash" \
     --set tracks.ar.rollout.prompts_per_step=4 --set parallel.tp=2 --set tracks.ar.model.num_kv_heads=2; then
  f=$(metric fake_crash_tp2 ar/env/failed)
  if "$py" -c "import sys; sys.exit(0 if float('$f') >= 1 else 1)"; then
    ok "under tp 2 a crashing environment fails its episode on both peers alike, the run goes on (env/failed $f)"
  else bad "crash under tp 2: env/failed $f"; fi
else
  bad "crash under tp 2: $(tail -15 "$out/fake_crash_tp2.log")"
fi

# Resume: killed after step 2 and resumed, step 3 equals 3 steps straight (weights bit for bit,
# every metric), with rewards that vary so every step updates the weights.
ok_env=(--set tracks.ar.env.name=command --set "tracks.ar.env.command=$py $out/fake_env.py ok" --set run.steps=3
        --set run.save_every=1)
if run straight "${ok_env[@]}" && { TANDEM_TEST_KILL=after_step:2 run resumed "${ok_env[@]}"; true; } \
   && run resumed "${ok_env[@]}" --resume auto && grep -q "resume: .* at step 2" "$out/resumed.log" \
   && cmp -s "$out/runs/straight/checkpoints/step_000003/ar_model/model.safetensors" \
             "$out/runs/resumed/checkpoints/step_000003/ar_model/model.safetensors" \
   && "$py" "$root/tests/e2e/compare_metrics.py" "$out/runs/straight/metrics.jsonl" "$out/runs/resumed/metrics.jsonl" \
        >"$out/compare.log" 2>&1; then
  ok "killed after step 2 and resumed: step 3's weights equal the straight run's bit for bit, and every metric (grad norm $(metric straight grad_norm))"
else
  bad "resume with episodes is not exact: $(tail -3 "$out/compare.log" 2>/dev/null) $(tail -5 "$out/resumed.log")"
fi

# Evaluated first, with correct_at 0: a failed episode (scored 0) must not count as a success.
run all_fail --set tracks.ar.env.name=command --set "tracks.ar.env.command=$py $out/fake_env.py crash-all" \
  --set eval.at_start=true --set eval.every=1 --set eval.correct_at=0 --set eval.max_prompts=2
code=$?
if [ $code -eq 2 ] && grep -q "more than env.max_failed_fraction" "$out/all_fail.log"; then
  ok "every episode failing stops the run with exit 2: $(grep -o 'tracks.ar.env: [^;]*' "$out/all_fail.log" | head -1)"
else
  bad "all episodes failing: exit $code, $(tail -8 "$out/all_fail.log")"
fi
esuccess=$(metric all_fail ar/eval/success); efailed=$(metric all_fail ar/eval/failed)
if "$py" -c "import sys; sys.exit(0 if float('$esuccess') == 0 and float('$efailed') > 0 else 1)" 2>/dev/null; then
  ok "eval: failed episodes never count as successes, even at correct_at 0 (ar/eval/success $esuccess, ar/eval/failed $efailed)"
else
  bad "eval with every episode failing at correct_at 0: ar/eval/success $esuccess, ar/eval/failed $efailed"
fi

# A dp rank may have no prompt in a step (prompts_per_step 1 on 2 ranks): it plays no episode and
# still joins the step's reductions.
if run one_prompt --set tracks.ar.rollout.prompts_per_step=1 --set run.steps=1; then
  ok "one prompt on 2 ranks: the rank without one joins the step (env/turns_mean $(metric one_prompt ar/env/turns_mean))"
else
  bad "one prompt on 2 ranks: $(tail -8 "$out/one_prompt.log")"
fi

# env.samples: turn trains each model turn as its own sample (context: the episode before it). Under
# token-mean that is the same tokens with the same weights: step 1's loss and gradient norm equal the
# episode run's (random model, so the entropy bonus makes the gradient). Control: under
# seq-mean-token-sum each turn is a sequence, and the two differ.
for agg in token-mean seq-mean-token-sum; do
  for mode in episode turn; do
    run "$mode-$agg" --set run.steps=1 --set tracks.ar.env.samples=$mode --set train.loss_agg_mode=$agg \
      --set tracks.ar.algo.entropy_coef=0.1 || bad "env.samples $mode, $agg: $(tail -5 "$out/$mode-$agg.log")"
  done
done
gn() { metric "$1" grad_norm; }
if "$py" -c "import sys; a, b = float('$(gn episode-token-mean)'), float('$(gn turn-token-mean)'); sys.exit(0 if a > 0 and abs(a - b) <= 1e-5 * a else 1)" 2>/dev/null \
   && "$py" -c "import sys; a, b = float('$(gn episode-seq-mean-token-sum)'), float('$(gn turn-seq-mean-token-sum)'); sys.exit(0 if abs(a - b) > 0.5 * b else 1)" 2>/dev/null \
   && [ "$(metric turn-token-mean ar/env/turn_samples)" != missing ]; then
  ok "env.samples turn: $(metric turn-token-mean ar/env/turn_samples) turn samples of $(metric turn-token-mean ar/env/episodes) episodes; token-mean grad norm $(gn turn-token-mean) = episode's $(gn episode-token-mean) (1e-5); control: seq-mean-token-sum $(gn turn-seq-mean-token-sum) vs $(gn episode-seq-mean-token-sum)"
else
  bad "env.samples turn: grad norms $(gn episode-token-mean) $(gn turn-token-mean) / $(gn episode-seq-mean-token-sum) $(gn turn-seq-mean-token-sum)"
fi

sleep 1

# The shipped demo, briefly: its warm-start on demonstrated episodes and a step of RL with the calculator.
# The warm-start runs its own schedule (here linear decay after 2 warmup steps from the recipe's
# lr 2e-3): the optimizer's rate read back each step is 1e-3, 2e-3, 2e-3, 1e-3.
timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
  --config "$root/configs/tool_calc.yaml" --set run.out_dir="$out/runs" --set run.name=tool_calc \
  --set run.steps=1 --set run.save_every=0 --set tracks.ar.warmstart.steps=4 --set eval.every=0 \
  --set tracks.ar.warmstart.schedule=linear --set tracks.ar.warmstart.warmup_steps=2 \
  --set eval.at_start=false --set tracks.ar.tokenizer.path="$tok/tokenizer.json" \
  --set tracks.ar.warmstart.demos="$root/configs/data/tool_calc_demos.jsonl" \
  --set tracks.ar.data.path="$root/configs/data/tool_calc_prompts.jsonl" >"$out/tool_calc.log" 2>&1
rc=$?
rates=$(grep -o 'warmstart [0-9]/4 | lr [0-9.e-]*' "$out/tool_calc.log" | sed 's/.*lr //' | tr '\n' ' ')
last=$(grep -o 'warmstart 4/4 | lr [0-9.]* | model-turn-token NLL [0-9.]*' "$out/tool_calc.log")
if [ $rc -eq 0 ] && [ "$rates" = "0.001 0.002 0.002 0.001 " ] && [ -n "$last" ] \
   && [ "$(metric tool_calc ar/env/episodes)" = "64.0" ]; then
  ok "configs/tool_calc.yaml: warm-start lr $rates(linear, 2 warmup), $last, then a step of 64 episodes"
else
  bad "configs/tool_calc.yaml: exit $rc, rates '$rates': $(tail -8 "$out/tool_calc.log")"
fi

if pgrep -f "$out/fake_env.py" >/dev/null || pgrep -f "$out/env_example.py" >/dev/null; then
  bad "environment processes outlived their runs: $(pgrep -af "$out/(fake_env|env_example).py")"
else
  ok "no environment process outlived its run"
fi
exit $fail
