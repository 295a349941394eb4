#!/usr/bin/env bash
# old_logp: reuse (the training forward's own log-probs) gives the same trained weights as
# recompute when there is one mini-batch per step, and saves one forward per step: prints the
# step-time ratio (old_logp phase included). Weights are compared bitwise: the recompute pass runs
# every micro of the schedule in the same layout, shapes and thread count as the training forward
# whose log-probs reuse takes, so both see the same arithmetic on any host.
set -u
tandem=$1; mpirun=$2; recipe=$3; shift 3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
          --config "$recipe" --set run.out_dir="$out" --set train.num_mini_batches=1 --set run.save_every=0 "$@"; }
fail=0
run --set run.name=recompute --set tracks.ar.algo.old_logp=recompute "$@" >"$out/a.log" 2>&1 || { tail -20 "$out/a.log"; exit 1; }
run --set run.name=reuse --set tracks.ar.algo.old_logp=reuse "$@" >"$out/b.log" 2>&1 || { tail -20 "$out/b.log"; exit 1; }
last=$(cat "$out/recompute/checkpoints/latest")
cmp -s "$out/recompute/checkpoints/$last/ar_model/model.safetensors" "$out/reuse/checkpoints/$last/ar_model/model.safetensors" \
  && echo "ok: reuse and recompute trained bitwise-identical weights" || { echo "FAIL: weights differ"; fail=1; }
"$TANDEM_PYTHON" - "$out/recompute/metrics.jsonl" "$out/reuse/metrics.jsonl" <<'PY'
import json, sys
def mean(path, key):
    v = [json.loads(l)[key] for l in open(path) if l.strip()]
    v = v[len(v) // 5:]  # skip warm-up steps
    return sum(v) / len(v)
a, b = (mean(p, "time/step_s") for p in sys.argv[1:3])
oa, ob = (mean(p, "ar/time/old_logp_s") for p in sys.argv[1:3])
print(f"step time: recompute {a*1e3:.1f} ms, reuse {b*1e3:.1f} ms, ratio reuse/recompute {b/a:.3f} "
      f"(old-logp phase {oa*1e3:.1f} ms vs {ob*1e3:.2f} ms)")
PY
exit $fail
