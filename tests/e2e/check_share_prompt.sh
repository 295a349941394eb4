#!/usr/bin/env bash
# tracks.ar.share_prompt end to end ([13]), float64, the tiny recipe with KL, entropy and TIS on:
# auto trains what off trains (losses, KL, entropy, clip fractions, TIS weights and grad norms to
# 1e-10 relative; the weights after 6 steps, i.e. 12 AdamW updates, to 1e-10) at dp 2 with a token
# budget that cuts groups over micros, at dp 1 with 3 rows per micro (groups of 4 split), and at
# tp 2. schedule/shared_rows_frac shows the sharing happened (auto > 0; the control: off = 0).
# Under cp 2, auto shares in rollout only and says so, and trains what off trains. (Not bitwise
# anywhere: a prompt prefilled once sits in a smaller GEMM than with its group, which may round
# its last bits differently.)
#   check_share_prompt.sh TANDEM MPIRUN TINY_RECIPE
set -u
tandem=$1; mpirun=$2; recipe=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
run() {  # np name share [--set ...]
  local np=$1 name=$2 share=$3; shift 3
  timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" "$tandem" train \
    --config "$recipe" --set run.out_dir="$out" --set run.dtype=float64 --set run.save_every=6 --set run.name="$name" \
    --set tracks.ar.algo.tis_cap=2.0 --set tracks.ar.share_prompt="$share" "$@" >"$out/$name.log" 2>&1 \
    || { echo "FAIL $name: the run failed"; tail -20 "$out/$name.log"; return 1; }
}
frac() {  # the largest schedule/shared_rows_frac of a run
  "$TANDEM_PYTHON" -c "import json,sys; print(max(json.loads(l).get('ar/schedule/shared_rows_frac', 0) for l in open(sys.argv[1])))" \
    "$out/$1/metrics.jsonl"
}
weights() { echo "$out/$1/checkpoints/step_000006/ar_model/model.safetensors"; }
keys=ar/loss,grad_norm,ar/pg/clipfrac,ar/pg/approx_kl,ar/kl,ar/entropy,ar/tis/weight_mean,ar/reward/mean,ar/train/action_tokens
for layout in "budget 2 --set train.max_tokens_per_micro=40 --set train.micro_batch_size=null" \
              "rows 1 --set train.micro_batch_size=3" \
              "tp2 2 --set parallel.tp=2 --set tracks.ar.model.num_kv_heads=2"; do
  set -- $layout; name=$1; np=$2; shift 2
  run "$np" "${name}_off" off "$@" && run "$np" "${name}_auto" auto "$@" || { fail=1; continue; }
  on=$(frac "${name}_auto"); off=$(frac "${name}_off")
  echo -n "$name (np $np): shared rows up to $on of the batch (off: $off); metrics: "
  "$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/${name}_off/metrics.jsonl" "$out/${name}_auto/metrics.jsonl" \
    --rel 1e-10 --keys $keys || fail=1
  echo -n "$name (np $np): "
  "$TANDEM_PYTHON" "$here/max_weight_diff.py" "$(weights "${name}_off")" "$(weights "${name}_auto")" 1e-10 || fail=1
  "$TANDEM_PYTHON" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 and float(sys.argv[2]) == 0 else 1)" "$on" "$off" \
    || { echo "FAIL $name: shared_rows_frac auto $on, off $off (want > 0 and 0)"; fail=1; }
done
# cp 2: training does not share; auto says so and trains exactly what off trains.
if run 2 cp2_off off --set parallel.cp=2 && run 2 cp2_auto auto --set parallel.cp=2; then
  if grep -q "training: not applied under cp" "$out/cp2_auto.log" && [ "$(frac cp2_auto)" = "0" -o "$(frac cp2_auto)" = "0.0" ] \
     && "$TANDEM_PYTHON" "$here/max_weight_diff.py" "$(weights cp2_off)" "$(weights cp2_auto)" 1e-10 >/dev/null; then
    echo "ok   cp 2: auto is stated as not applied in training, and trains what off trains (weights to 1e-10)"
  else
    echo "FAIL cp 2: $(grep -o "share_prompt auto:.*" "$out/cp2_auto.log" | head -1), frac $(frac cp2_auto)"; fail=1
  fi
else
  fail=1
fi
exit $fail
