#!/usr/bin/env bash
# One shared model (tracks.ar.model.arch unified, tracks.image.model.arch shared) on 2 ranks, in
# float64: per-track micro sizes left null equal the shared value set explicitly (same metrics,
# bitwise-identical weights), while another image micro size changes the weights (the control:
# the comparison can fail); both tracks' first ratio is exactly 1; the grids carry their prompts;
# resume is exact, also with both KL references; `tandem generate` writes text and draws images
# from the checkpoint. With tracks.ar.lora both tracks train one set of adapters on the shared
# model's frozen base (checkpoint layout, frozen base bytes, exact resume, generate).
set -u
tandem=$1; mpirun=$2; recipe=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() { timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
          --config "$recipe" --set run.out_dir="$out" "$@"; }
fail=0
run --set run.name=unset >"$out/a.log" 2>&1 || { echo "FAIL null-geometry run"; tail -30 "$out/a.log"; exit 1; }
run --set run.name=explicit --set tracks.ar.micro_batch_size=4 --set tracks.image.micro_batch_size=4 >"$out/b.log" 2>&1 \
  || { echo "FAIL explicit run"; tail -30 "$out/b.log"; exit 1; }
run --set run.name=other --set tracks.image.micro_batch_size=1 >"$out/c.log" 2>&1 \
  || { echo "FAIL control run"; tail -30 "$out/c.log"; exit 1; }
w=checkpoints/step_000003/ar_model/model.safetensors
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/unset/metrics.jsonl" "$out/explicit/metrics.jsonl" || fail=1
# Bitwise: null sizes resolve to the same numbers, so both runs build the same schedule and run the
# same micros through the same kernels.
cmp -s "$out/unset/$w" "$out/explicit/$w" && echo "ok: null vs explicit per-track micro sizes: shared weights bitwise identical" \
  || { echo "FAIL: null vs explicit weights differ"; fail=1; }
cmp -s "$out/unset/$w" "$out/other/$w" && { echo "FAIL control: image micro size 1 gave bitwise the same weights"; fail=1; } \
  || echo "ok: control: image micro size 1 changes the weights (float reassociation), so the comparison can fail"
"$TANDEM_PYTHON" "$here/max_weight_diff.py" "$out/unset/$w" "$out/other/$w" 1e-10 || fail=1
"$TANDEM_PYTHON" - "$out/unset" <<'PY' || fail=1
import json, os, sys
run = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
assert all(r["ar/pg/first_ratio_max_dev"] == 0.0 and r["image/pg/first_ratio_max_dev"] == 0.0 for r in rows), "first ratio"
assert all(r["ar/rollout/samples"] == 16 and r["image/rollout/samples"] == 8 for r in rows)
print("ok: both tracks trained every step; first ratio exactly 1 on both")
grid = json.load(open(os.path.join(run, "samples", "step_000000.json")))
prompts = sorted({c["prompt"] for c in grid["cells"]})
assert prompts == ["draw circle", "draw square"], prompts
assert os.path.exists(os.path.join(run, "samples", "step_000000.png")) and os.path.exists(os.path.join(run, "samples", "step_000003.png"))
print(f"ok: sample grids at steps 0 and 3 with their prompts {prompts}")
PY
TANDEM_TEST_KILL=after_step:2 run --set run.name=killed --set run.save_every=1 >"$out/k1.log" 2>&1
run --set run.name=killed --set run.save_every=1 --resume auto >"$out/k2.log" 2>&1 || { echo "FAIL resume"; tail -30 "$out/k2.log"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/unset/metrics.jsonl" "$out/killed/metrics.jsonl" || fail=1
cmp -s "$out/unset/$w" "$out/killed/$w" && echo "ok: resumed shared run ends bitwise where the uninterrupted one does" \
  || { echo "FAIL: resumed weights differ"; fail=1; }
# With KL terms on both tracks (two frozen references of the shared model, saved in ar_reference/
# and image_model/reference.safetensors), resume is exact too.
kl="--set tracks.ar.algo.kl.coef=0.05 --set tracks.image.algo.kl.coef=0.05"
run --set run.name=kl $kl >"$out/kl.log" 2>&1 || { echo "FAIL KL run"; tail -30 "$out/kl.log"; exit 1; }
TANDEM_TEST_KILL=after_step:2 run --set run.name=kl_killed --set run.save_every=1 $kl >"$out/kk1.log" 2>&1
run --set run.name=kl_killed --set run.save_every=1 $kl --resume auto >"$out/kk2.log" 2>&1 \
  || { echo "FAIL KL resume"; tail -30 "$out/kk2.log"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/kl/metrics.jsonl" "$out/kl_killed/metrics.jsonl" || fail=1
test -d "$out/kl/checkpoints/step_000003/ar_reference" && echo "ok: the AR KL reference is saved" \
  || { echo "FAIL: no ar_reference in the checkpoint"; fail=1; }
"$tandem" generate --checkpoint "$out/unset" --prompt "square corners=" --prompt "draw circle" --samples 2 \
    --image-out "$out/gen/grid.png" >"$out/gen.log" 2>&1 || { echo "FAIL generate"; cat "$out/gen.log"; exit 1; }
grep -q "square corners= -> " "$out/gen.log" && test -s "$out/gen/grid.png" && grep -q '"draw circle"' "$out/gen/grid.json" \
  && echo "ok: generate wrote text and drew a grid from the shared checkpoint" || { echo "FAIL generate output"; cat "$out/gen.log"; fail=1; }
# tracks.ar.lora on the shared model: both tracks train the same adapters on a frozen base (the
# warm-start and the flow pretraining train the base, adapters off); both KL references are the
# base with the adapters off (no copies saved); resume is exact; generate runs base + adapters.
lora="--set tracks.ar.lora.rank=4 --set tracks.ar.lora.alpha=8 $kl --set run.save_every=1"
run --set run.name=lora $lora >"$out/l.log" 2>&1 || { echo "FAIL LoRA run"; tail -30 "$out/l.log"; exit 1; }
grep -q "ar lora: rank 4, alpha 8 .* 2176 adapter parameters" "$out/l.log" \
  && grep -q "image: tracks.ar.lora is on: pretraining trains the base (adapters off)" "$out/l.log" \
  && echo "ok: LoRA on the shared model: 2,176 adapter parameters (q/k/v/o, gate/up/down), pretrained base" \
  || { echo "FAIL: LoRA log lines"; grep -i "lora" "$out/l.log"; fail=1; }
c1=$out/lora/checkpoints/step_000001; c3=$out/lora/checkpoints/step_000003
for f in ar_adapter/adapter_model.safetensors ar_adapter/adapter_config.json ar_adapter/base_model.json ar_base/model.safetensors; do
  test -s "$c3/$f" || { echo "FAIL: no $f in the LoRA checkpoint"; fail=1; }
done
test ! -e "$c3/ar_reference" && test ! -e "$c3/image_model" && test ! -e "$c3/ar_model" \
  && echo "ok: the LoRA checkpoint holds adapters + base, no reference copies" || { echo "FAIL: LoRA checkpoint layout"; ls "$c3"; fail=1; }
cmp -s "$c1/ar_base/model.safetensors" "$c3/ar_base/model.safetensors" \
  && ! cmp -s "$c1/ar_adapter/adapter_model.safetensors" "$c3/ar_adapter/adapter_model.safetensors" \
  && echo "ok: the base is byte-identical at steps 1 and 3 while the adapters move" || { echo "FAIL: base moved or adapters did not"; fail=1; }
TANDEM_TEST_KILL=after_step:2 run --set run.name=lora_killed $lora >"$out/lk1.log" 2>&1
run --set run.name=lora_killed $lora --resume auto >"$out/lk2.log" 2>&1 || { echo "FAIL LoRA resume"; tail -30 "$out/lk2.log"; exit 1; }
"$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/lora/metrics.jsonl" "$out/lora_killed/metrics.jsonl" || fail=1
cmp -s "$c3/ar_adapter/adapter_model.safetensors" "$out/lora_killed/checkpoints/step_000003/ar_adapter/adapter_model.safetensors" \
  && echo "ok: resumed LoRA run's step-3 adapters equal the straight run's bit for bit" || { echo "FAIL: resumed adapters differ"; fail=1; }
"$tandem" generate --checkpoint "$out/lora" --prompt "square corners=" --prompt "draw square" --samples 2 \
    --image-out "$out/lgen/grid.png" >"$out/lgen.log" 2>&1 && grep -q "square corners= -> " "$out/lgen.log" && test -s "$out/lgen/grid.png" \
  && echo "ok: generate reads the LoRA checkpoint (base + adapters) for text and images" || { echo "FAIL: LoRA generate"; cat "$out/lgen.log"; fail=1; }
# What the shared model cannot do is refused with exit 2, naming why.
expect2() {  # expect2 WHAT TEXT CMD...: CMD exits 2 and its stderr contains TEXT
  local what=$1 text=$2; shift 2
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -eq 2 ] && [[ "$err" == *"$text"* ]] && echo "ok: $what refused: $(echo "$err" | tail -1)" \
    || { echo "FAIL: $what: exit $rc: $err"; fail=1; }
}
expect2 "ckpt export-hf of a unified model" "no Hugging Face equivalent" "$tandem" ckpt export-hf "$out/unset" "$out/hf"
expect2 "pretrain-flow of a shared model" "pretrains both heads together" "$tandem" pretrain-flow --config "$recipe"
expect2 "ckpt export-hf of a unified LoRA checkpoint" "no Hugging Face equivalent" "$tandem" ckpt export-hf "$out/lora" "$out/hf2"
expect2 "tracks.image.lora on a shared model" "takes its adapters from tracks.ar.lora" "$tandem" check-config --config "$recipe" --set tracks.image.lora.rank=4
exit $fail
