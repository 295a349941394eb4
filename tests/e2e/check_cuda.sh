#!/usr/bin/env bash
# The CUDA end-to-end checks (label cuda, [20]): on the first GPU, with NCCL,
#   quickstart: STEPS (default 20) GRPO steps of the quickstart recipe; the mean reward of the last
#               quarter of the steps exceeds the first quarter's;
#   overlap:    3 steps with train.overlap on and off (float32): the overlap worker's old log-probs
#               on its own stream are the training forward's (first ratio within 1e-5 of 1) and the
#               weights agree within 1e-5 (CUDA's atomics make bitwise equality no promise).
# Where no GPU is visible it prints "skipped: no GPU visible" and exits 0 (ctest marks it skipped).
#   check_cuda.sh TANDEM MPIRUN QUICKSTART_RECIPE
set -u
tandem=$1; mpirun=$2; recipe=$3
python=${TANDEM_PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
if ! gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null); then
  echo "skipped: no GPU visible to ask for ($python cannot import torch; set TANDEM_PYTHON)"
  exit 0
fi
if [ "$gpus" -lt 1 ]; then
  echo "skipped: no GPU visible (torch.cuda.device_count() is $gpus)"
  exit 0
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
run() {  # name steps [--set ...]
  local name=$1 steps=$2; shift 2
  timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 "$tandem" train --config "$recipe" \
    --set run.out_dir="$out" --set run.name="$name" --set run.steps="$steps" --set run.device=cuda \
    --set parallel.backend=nccl --set eval.every=0 --set eval.at_start=false "$@" >"$out/$name.log" 2>&1 \
    || { echo "FAIL $name: the run failed"; tail -8 "$out/$name.log"; return 1; }
}
steps=${STEPS:-20}
if run quickstart "$steps"; then
  "$python" - "$out/quickstart/metrics.jsonl" <<'PY' || fail=1
import json, sys
r = [json.loads(l)["ar/reward/mean"] for l in open(sys.argv[1]) if "ar/reward/mean" in l]
q = max(1, len(r) // 4)
first, last = sum(r[:q]) / q, sum(r[-q:]) / q
print(f"{'ok  ' if last > first else 'FAIL'} quickstart on CUDA: mean reward {first:.3f} (first {q} steps) -> {last:.3f} (last {q})")
sys.exit(0 if last > first else 1)
PY
else
  fail=1
fi
weights() { echo "$out/$1/checkpoints/step_000003/ar_model/model.safetensors"; }
short=(--set tracks.ar.warmstart.steps=10 --set run.dtype=float32)
if run overlap_off 3 --set train.overlap=false "${short[@]}" && run overlap_on 3 --set train.overlap=true "${short[@]}"; then
  dev=$("$python" -c "import json,sys; print(max(json.loads(l)['ar/pg/first_ratio_max_dev'] for l in open(sys.argv[1])))" \
    "$out/overlap_on/metrics.jsonl")
  if "$python" -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$dev" &&
    "$python" "$here/max_weight_diff.py" "$(weights overlap_off)" "$(weights overlap_on)" 1e-5; then
    echo "ok   overlap on CUDA: first ratio max |r - 1| $dev, weights within 1e-5 of overlap off"
  else
    echo "FAIL overlap on CUDA: first ratio max |r - 1| $dev (or the weights differ past 1e-5, above)"
    fail=1
  fi
else
  fail=1
fi
exit $fail
