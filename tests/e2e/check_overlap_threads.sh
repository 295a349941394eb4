#!/usr/bin/env bash
# train.overlap keeps the first ratio exactly 1 at any thread count ([17]): one rank with run.threads
# 1, 2 and 3, float32 and float64, 3 GRPO steps of the quickstart recipe after 10 warm-start steps:
# with overlap the old log-probs are the training forward's to the bit (pg/first_ratio_max_dev 0 at
# every step) and the weights equal overlap off bitwise. The control: the same update with another
# micro split (micro_batch_size 32 for 128: the same loss, sums in another order) trains other
# bits, so a numerical difference is visible to the comparison. (Another thread count no longer
# is one: with oneMKL's strict reproducibility, runtime/blas_kernel.h, 1 and 2 threads train the
# same bits here.)
#   check_overlap_threads.sh TANDEM MPIRUN QUICKSTART_RECIPE
set -u
tandem=$1; mpirun=$2; recipe=$3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
run() {  # name threads dtype overlap [--set ...]
  local name=$1 threads=$2 dtype=$3 overlap=$4; shift 4
  timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 "$tandem" train --config "$recipe" \
    --set run.out_dir="$out" --set run.name="$name" --set run.steps=3 --set tracks.ar.warmstart.steps=10 \
    --set eval.every=0 --set eval.at_start=false --set run.threads="$threads" --set run.dtype="$dtype" \
    --set train.overlap="$overlap" "$@" >"$out/$name.log" 2>&1 \
    || { echo "FAIL $name: the run failed"; tail -5 "$out/$name.log"; return 1; }
}
weights() { echo "$out/$1/checkpoints/step_000003/ar_model/model.safetensors"; }
for dtype in float32 float64; do
  for t in 1 2 3; do
    run "off_${dtype}_$t" $t $dtype false && run "on_${dtype}_$t" $t $dtype true || { fail=1; continue; }
    dev=$("$TANDEM_PYTHON" -c "import json,sys; print(max(json.loads(l)['ar/pg/first_ratio_max_dev'] for l in open(sys.argv[1])))" \
          "$out/on_${dtype}_$t/metrics.jsonl")
    if [ "$dev" = "0.0" ] && cmp -s "$(weights off_${dtype}_$t)" "$(weights on_${dtype}_$t)"; then
      echo "ok   $dtype, $t thread(s): overlap's first ratio exactly 1, weights bitwise equal to overlap off"
    else
      echo "FAIL $dtype, $t thread(s): first ratio max |r - 1| $dev, weights $(cmp -s "$(weights off_${dtype}_$t)" "$(weights on_${dtype}_$t)" && echo equal || echo differ)"
      fail=1
    fi
  done
  run "split_${dtype}" 2 $dtype false --set train.micro_batch_size=32 || { fail=1; continue; }
  cmp -s "$(weights off_${dtype}_2)" "$(weights split_${dtype})" \
    && { echo "FAIL control ($dtype): another micro split trained the same bits; the comparison cannot tell"; fail=1; } \
    || echo "ok   control ($dtype): another micro split trains different bits, so the comparisons above can fail"
done
exit $fail
