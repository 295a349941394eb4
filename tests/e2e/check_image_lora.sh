#!/usr/bin/env bash
# LoRA on the image track ([22]): configs/image.yaml cut small, with tracks.image.lora, 2 ranks.
#   - the run trains only the adapters (the log says so), the KL reference is the base with the adapters
#     off (no reference copy saved), and the checkpoint holds the base beside the adapters;
#   - the base stays frozen (step 2's and step 4's base files are the same bytes, equal to the pretrained
#     weights) while the adapters move; adapter_config.json names the layers all-linear resolved to;
#   - resume is exact: killed after step 2 and resumed, every metric and step 4's adapters equal the
#     straight run's bit for bit;
#   - resume refuses a checkpoint whose base is not the pretrained weights the run loads, and a recipe
#     whose tracks.image.lora differs; pretrain.path at a LoRA checkpoint is refused (exit 2, naming what).
#   check_image_lora.sh TANDEM MPIRUN SOURCE_DIR
set -u
tandem=$1; mpirun=$2; root=$3; here=$(dirname "$0")
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
run() {  # NAME [more args]
  local name=$1; shift
  timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
    --config "$root/configs/image.yaml" --set run.out_dir="$out" --set run.name="$name" --set run.steps=4 \
    --set run.save_every=2 --set run.keep_last=0 --set run.threads=1 --set tracks.image.pretrain.steps=20 \
    --set tracks.image.pretrain.batch_size=16 --set tracks.image.pretrain.path="$out/pretrain" \
    --set tracks.image.rollout.prompts_per_step=2 --set tracks.image.rollout.group_size=4 \
    --set tracks.image.sampler.steps=4 --set train.micro_batch_size=4 --set tracks.image.lora.rank=4 \
    --set tracks.image.lora.alpha=8 --set optim.lr=1.0e-2 "$@" >>"$out/$name.log" 2>&1
}
ckpt=checkpoints/step_000004/image_model

if run straight && grep -q "image lora: rank 4, alpha 8 (scale 2), targets qkv, proj, mlp_fc1, mlp_fc2: 18432 adapter" \
     "$out/straight.log" && grep -q "the KL reference is the base (adapters off)" "$out/straight.log" \
   && [ -f "$out/straight/$ckpt/adapter_model.safetensors" ] && [ ! -f "$out/straight/$ckpt/reference.safetensors" ] \
   && grep -q '"image/kl"' "$out/straight/metrics.jsonl"; then
  ok "4 steps train 18,432 adapter parameters; the checkpoint holds base + adapters, no reference copy"
else
  bad "straight run: $(tail -15 "$out/straight.log")"
fi
c=$out/straight/checkpoints
if cmp -s "$c/step_000002/image_model/model.safetensors" "$c/step_000004/image_model/model.safetensors" \
   && ! cmp -s "$c/step_000002/image_model/adapter_model.safetensors" "$c/step_000004/image_model/adapter_model.safetensors"; then
  ok "the base is the same bytes at steps 2 and 4; the adapters moved"
else
  bad "the base moved or the adapters did not"
fi

# The base the run trained on is the pretrained one, tensor for tensor; the adapter config names the layers.
"$TANDEM_PYTHON" - "$out/pretrain/model.safetensors" "$c/step_000004/image_model" <<'PY' \
  && ok "step 4's base equals the pretrained weights; adapter_config.json names qkv, proj, mlp_fc1, mlp_fc2" \
  || bad "the checkpoint's base or adapter config"
import json, sys, torch
from safetensors.torch import load_file
pre, ck = load_file(sys.argv[1]), load_file(sys.argv[2] + "/model.safetensors")
same = pre.keys() == ck.keys() and all(torch.equal(pre[k], ck[k]) for k in pre)
targets = json.load(open(sys.argv[2] + "/adapter_config.json"))["target_modules"]
sys.exit(0 if same and targets == ["qkv", "proj", "mlp_fc1", "mlp_fc2"] else 1)
PY

TANDEM_TEST_KILL=after_step:2 run killed
run killed --resume auto
if grep -q "resume: .*step_000002 at step 2" "$out/killed.log" \
   && "$TANDEM_PYTHON" "$here/compare_metrics.py" "$out/straight/metrics.jsonl" "$out/killed/metrics.jsonl" \
   && cmp -s "$out/straight/$ckpt/adapter_model.safetensors" "$out/killed/$ckpt/adapter_model.safetensors"; then
  ok "killed after step 2 and resumed: every metric and step 4's adapters equal the straight run's"
else
  bad "resume: $(tail -15 "$out/killed.log")"
fi

run straight --resume auto --set tracks.image.lora.rank=8; rc=$?
[ $rc -eq 2 ] && grep -q "differs in model, tokenizer, LoRA or optim.moments" "$out/straight.log" \
  && ok "resume with another tracks.image.lora exits 2" || bad "other lora resume: exit $rc"
# A LoRA checkpoint's image_model/ as pretrained weights would drop its adapters: refused.
run from_ckpt --set tracks.image.pretrain.path="$out/straight/$ckpt"; rc=$?
[ $rc -eq 2 ] && grep -q "tracks.image.pretrain.path: .* holds LoRA adapters" "$out/from_ckpt.log" \
  && ok "pretrain.path at a LoRA checkpoint's image_model/ exits 2" || bad "pretrain.path at adapters: exit $rc"
# The pretrained base changes under the checkpoint: the adapters were trained on the other one.
"$TANDEM_PYTHON" - "$out/pretrain/model.safetensors" <<'PY' || bad "could not rewrite the pretrained base"
import sys
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
w["blocks.0.attn.qkv.weight"] = w["blocks.0.attn.qkv.weight"] * 1.01
save_file(w, sys.argv[1])
PY
run straight --resume auto --set run.steps=6; rc=$?
[ $rc -eq 2 ] && grep -q "the checkpoint's image base differs from .*pretrain/model.safetensors (tensor blocks.0.attn.qkv.weight)" \
  "$out/straight.log" && ok "resume on a changed pretrained base exits 2 naming the tensor" \
  || bad "changed base: exit $rc: $(tail -3 "$out/straight.log")"
exit $fail
