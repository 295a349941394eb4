#!/usr/bin/env bash
# The unified step: both tracks train in one run on 2 ranks, each with its own micro geometry
# (reported in metrics); per-track overrides left null equal the shared value set explicitly
# (identical metrics and bitwise-identical final weights); the first FlowGRPO update's ratio is 1;
# the image track writes PNG sample grids; resume of a unified run is exact. With guidance
# (cfg 3), tracks.image.algo.cfg_grad reaches training: the same rollout and a first ratio of 1
# under both choices, different gradients.
set -u
tandem=$1; mpirun=$2; recipe=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
          --config "$recipe" --set run.out_dir="$out" "$@"; }
fail=0
run --set run.name=shared >"$out/a.log" 2>&1 || { echo "FAIL shared run"; tail -30 "$out/a.log"; exit 1; }
run --set run.name=explicit --set train.micro_batch_size=3 --set tracks.ar.micro_batch_size=4 \
    --set tracks.image.micro_batch_size=4 >"$out/b.log" 2>&1 || { echo "FAIL explicit run"; tail -30 "$out/b.log"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/shared/metrics.jsonl" "$out/explicit/metrics.jsonl" || fail=1
for f in ar_model/model.safetensors image_model/model.safetensors; do
  cmp -s "$out/shared/checkpoints/step_000004/$f" "$out/explicit/checkpoints/step_000004/$f" \
    && echo "ok: $f bitwise identical" || { echo "FAIL: $f differs"; fail=1; }
done
run --set run.name=own --set tracks.ar.micro_batch_size=1 --set tracks.image.micro_batch_size=8 >"$out/c.log" 2>&1 \
  || { echo "FAIL own-geometry run"; tail -30 "$out/c.log"; exit 1; }
"$TANDEM_PYTHON" - "$out/own/metrics.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = rows[0]
print(f"own geometry: image micro_batch_size {r['image/geometry/micro_batch_size']:.0f}, "
      f"image micros {r['image/schedule/micros']:.0f}, ar micros {r['ar/schedule/micros']:.0f}")
assert r["image/geometry/micro_batch_size"] == 8 and r["ar/schedule/micros"] == 16 and r["image/schedule/micros"] == 4
assert all(x["image/pg/first_ratio_max_dev"] == 0.0 and x["ar/pg/first_ratio_max_dev"] == 0.0 for x in rows)
print("ok: each track ran its own micro geometry; first ratio exactly 1 on both tracks")
PY
ls "$out/own/samples/"*.png >/dev/null 2>&1 && echo "ok: PNG sample grids written" || { echo "FAIL: no sample grid"; fail=1; }
TANDEM_TEST_KILL=after_step:2 run --set run.name=killed >"$out/k1.log" 2>&1
run --set run.name=killed --resume auto >"$out/k2.log" 2>&1 || { echo "FAIL unified resume"; tail -30 "$out/k2.log"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/shared/metrics.jsonl" "$out/killed/metrics.jsonl" || fail=1
for g in full cond_only; do
  run --set run.name=cfg_$g --set tracks.ar.enabled=false --set run.steps=1 --set tracks.image.sampler.cfg=3.0 \
      --set tracks.image.algo.cfg_grad=$g >"$out/cfg_$g.log" 2>&1 || { echo "FAIL cfg_grad $g run"; tail -30 "$out/cfg_$g.log"; exit 1; }
done
"$TANDEM_PYTHON" - "$out/cfg_full/metrics.jsonl" "$out/cfg_cond_only/metrics.jsonl" <<'PY' || fail=1
import json, sys
full, cond = (json.loads(open(p).readline()) for p in sys.argv[1:])
print(f"cfg_grad: grad_norm full {full['grad_norm']:.6g}, cond_only {cond['grad_norm']:.6g}")
assert full["image/reward/mean"] == cond["image/reward/mean"], "the rollout differs"
assert full["image/pg/first_ratio_max_dev"] == 0.0 and cond["image/pg/first_ratio_max_dev"] == 0.0
assert abs(full["grad_norm"] - cond["grad_norm"]) > 1e-3 * full["grad_norm"], "cfg_grad did not change the gradient"
print("ok: cfg_grad changes the gradient only")
PY
exit $fail
