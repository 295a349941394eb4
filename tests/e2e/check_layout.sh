#!/usr/bin/env bash
# Layout invariance end to end (float64): one rollout dumped at dp 1, replayed at dp 2, micro
# size 1 and a token budget: identical losses and grad norms (1e-10 relative). Also checks that
# old_logp: recompute gives a first-update ratio of exactly 1.
set -u
tandem=$1; mpirun=$2; recipe=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { local np=$1; shift; timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
          "$tandem" train --config "$recipe" --set run.out_dir="$out" --set run.dtype=float64 --set run.save_every=0 "$@"; }
fail=0
run 1 --set run.name=dump --set tracks.ar.rollout.dump=true >"$out/dump.log" 2>&1 || { echo "FAIL dump run"; tail -30 "$out/dump.log"; exit 1; }
keys=ar/loss,grad_norm,ar/pg/clipfrac,ar/pg/approx_kl,ar/kl,ar/entropy,ar/reward/mean,ar/train/action_tokens
for layout in "2 mbs1 --set train.micro_batch_size=1" "1 budget --set train.max_tokens_per_micro=24" \
              "2 budget2 --set train.max_tokens_per_micro=40 --set train.micro_batch_size=null"; do
  set -- $layout; np=$1; name=$2; shift 2
  run "$np" --set run.name="$name" --set tracks.ar.rollout.replay_dir="$out/dump/rollouts" "$@" >"$out/$name.log" 2>&1 \
    || { echo "FAIL replay $name"; tail -30 "$out/$name.log"; fail=1; continue; }
  echo -n "dp=$np $name: "
  "$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/dump/metrics.jsonl" "$out/$name/metrics.jsonl" --rel 1e-10 --keys $keys || fail=1
done
"$TANDEM_PYTHON" - "$out/dump/metrics.jsonl" <<'PY' || fail=1
import json, sys
devs = [json.loads(l)["ar/pg/first_ratio_max_dev"] for l in open(sys.argv[1])]
print(f"old_logp recompute: max |ratio - 1| on the first update of each step: {max(devs)}")
sys.exit(0 if max(devs) == 0.0 else 1)
PY
exit $fail
