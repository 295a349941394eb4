#!/usr/bin/env bash
# LoRA as users run it ([22]): a Qwen3 directory written by transformers, the real Qwen3 tokenizer and
# chat template, bf16 with 2 ranks, rank-8 adapters on every linear layer (tracks.ar.lora).
#   - the run trains only the adapters (the log says so) and its checkpoint holds ar_adapter/ (peft's
#     files and the base's identity), no copy of the base;
#   - resume is exact: killed after step 2 and resumed, step 3's adapters equal 3 steps straight bit for
#     bit, and so does every metric;
#   - peft loads the exported adapter on the same base with tandem's logits (float64 1e-10, through
#     `tandem_tests "[.peft_oracle]"`), transformers reads the --merge export with peft's logits, and its
#     weights equal peft's merge_and_unload (scripts/fixtures/peft_oracle.py);
#   - `generate --checkpoint` samples base + adapters unmerged; resuming on a base whose weights changed
#     exits 2 naming the mismatch.
# First, on configs/quickstart_lora.yaml (a warm-started base no file holds): tp 2, rollout ranks (the
# base sent once, then adapters only) and train.overlap (the reference forward with adapters off on
# the worker's thread) each run, checkpoint and export; `tandem eval` reads such a checkpoint.
#   check_lora.sh TANDEM MPIRUN SOURCE_DIR TOKENIZER_CACHE TESTS_BIN   (exit 77: no tokenizer files)
set -u
tandem=$1; mpirun=$2; root=$3; tok=$4/qwen3; tests_bin=$5
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

quick() {  # NAME [more args]
  local name=$1; shift
  timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
    --config "$root/configs/quickstart_lora.yaml" --set run.out_dir="$out/quick" --set run.name="$name" \
    --set run.steps=4 --set run.save_every=2 --set run.threads=1 --set eval.every=0 --set eval.at_start=false \
    --set tracks.ar.warmstart.steps=10 --set tracks.ar.algo.kl.coef=0.05 --set tracks.ar.lora.rank=8 "$@" >"$out/$name.log" 2>&1
}
for variant in "tp2 --set parallel.tp=2" "rollout_ranks --set parallel.rollout_ranks=1" \
               "overlap --set train.overlap=true"; do
  set -- $variant
  name=$1; shift
  if quick "$name" "$@" && [ -f "$out/quick/$name/checkpoints/step_000004/ar_base/model.safetensors" ] \
     && "$tandem" ckpt export-hf "$out/quick/$name" "$out/quick_$name" --merge >>"$out/$name.log" 2>&1; then
    ok "quickstart_lora with $*: 4 steps, the KL on, a checkpoint with ar_base/, a merged export"
  else
    bad "quickstart_lora with $*: $(tail -15 "$out/$name.log")"
  fi
done
"$TANDEM_PYTHON" - "$out/quick/tp2/checkpoints/step_000004/ar_adapter/adapter_model.safetensors" <<'PY' \
  && ok "tp 2 saves whole factors (the shards gathered)" || fail=1
import sys
from safetensors.torch import load_file
w = load_file(sys.argv[1])
a, b = w["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"], w["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"]
o = w["base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight"]
if a.shape != (8, 128) or b.shape != (128, 8) or o.shape != (8, 128) or len(w) != 42:
    print("FAIL tp 2 adapter shapes:", a.shape, b.shape, o.shape, len(w))
    sys.exit(1)
PY
"$tandem" eval --checkpoint "$out/quick/overlap" >"$out/eval.log" 2>&1 && grep -q '"eval/reward_mean"' "$out/eval.log" \
  && ok "tandem eval --checkpoint on a LoRA run: $(grep -o '"eval/reward_mean":[0-9.]*' "$out/eval.log")" \
  || bad "eval: $(tail -5 "$out/eval.log")"

if [ ! -f "$tok/tokenizer.json" ] || [ ! -f "$tok/tokenizer_config.json" ]; then
  echo "SKIP: the qwen3 tokenizer files are not in $tok (scripts/fixtures/fetch_tokenizers.sh puts them there)"
  [ $fail -ne 0 ] && exit 1
  exit 77
fi

"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" tiny qwen3 "$out/model" "$tok" >/dev/null 2>&1 \
  || { echo "FAIL writing the qwen3 directory"; exit 1; }
# The run's own template file: Qwen3's with a comment in front (it renders the same prompts), which a
# merged export must carry instead of the base directory's.
"$TANDEM_PYTHON" - "$tok/tokenizer_config.json" "$out/template.jinja" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["chat_template"]
open(sys.argv[2], "w").write("{#- the run's own template file (tandem e2e.lora) -#}\n" + t)
PY
# lr 1e-2 and an entropy bonus: the random model earns no reward, and the adapters' B starts at zero
# and must move enough in 3 steps for the oracle to see it.
common=(--config "$root/configs/qwen2_0p5b.yaml" --set tracks.ar.model.hf_dir="$out/model"
        --set tracks.ar.data.chat_template="$out/template.jinja"
        --set tracks.ar.data.path="$root/tests/fixtures/gsm8k_tiny.jsonl" --set run.device=cpu
        --set parallel.backend=mpi --set run.save_every=1 --set tracks.ar.rollout.prompts_per_step=4
        --set tracks.ar.rollout.group_size=2 --set tracks.ar.rollout.max_new_tokens=8 --set train.num_mini_batches=1
        --set train.max_tokens_per_micro=2048 --set tracks.ar.model.max_seq_len=512 --set run.threads=1
        --set tracks.ar.lora.rank=8 --set tracks.ar.lora.alpha=16 --set optim.lr=1.0e-2 --set run.keep_last=0
        --set optim.warmup_steps=0 --set tracks.ar.algo.entropy_coef=0.1 --set tracks.ar.algo.kl.coef=0.05)
train() {  # NAME STEPS [more args]
  local name=$1 steps=$2; shift 2
  timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train "${common[@]}" \
    --set run.out_dir="$out/runs" --set run.name="$name" --set run.steps="$steps" "$@" >>"$out/$name.log" 2>&1
}
"$tandem" check-config "${common[@]}" --set tracks.ar.warmstart.steps=5 >/dev/null 2>"$out/ws.err"
rc=$?
[ $rc -eq 2 ] && grep -q "tracks.ar.warmstart.steps: with tracks.ar.lora the warm-start trains the base" "$out/ws.err" \
  && ok "a warm-start of an hf_dir base under LoRA exits 2" || bad "warm-start with hf_dir: exit $rc $(cat "$out/ws.err")"
train straight 3 && ok "train 3 steps with LoRA in bf16 on 2 ranks" || { bad "train: $(tail -20 "$out/straight.log")"; exit 1; }
grep -q "ar lora: rank 8, alpha 16 (scale 2), targets all-linear" "$out/straight.log" \
  && ok "the log states what trains: $(grep -o '[0-9]* adapter parameters[^;]*' "$out/straight.log" | head -1)" \
  || bad "no 'ar lora' line: $(grep -i lora "$out/straight.log" | head -3)"
ck=$out/runs/straight/checkpoints/step_000003
[ -f "$ck/ar_adapter/adapter_model.safetensors" ] && [ -f "$ck/ar_adapter/base_model.json" ] && [ ! -e "$ck/ar_model" ] \
  && [ ! -e "$ck/ar_base" ] && ok "the checkpoint holds the adapters and the base's identity, no base" \
  || bad "checkpoint layout: $(ls "$ck" "$ck/ar_adapter" 2>&1 | tr '\n' ' ')"
# Killed after step 2 (its checkpoint written), then resumed: the LR schedule is the 3-step run's.
TANDEM_TEST_KILL=after_step:2 train resumed 3
train resumed 3 --resume auto && grep -q "resume: .* at step 2" "$out/resumed.log" \
  || bad "resumed run: $(tail -20 "$out/resumed.log")"
r=$out/runs/resumed/checkpoints/step_000003
# Step 3's adapters depend on the AdamW moments of steps 1-2, so equal adapters mean the state came back.
cmp -s "$ck/ar_adapter/adapter_model.safetensors" "$r/ar_adapter/adapter_model.safetensors" \
  && "$TANDEM_PYTHON" "$root/tests/e2e/compare_metrics.py" "$out/runs/straight/metrics.jsonl" \
       "$out/runs/resumed/metrics.jsonl" >"$out/compare.log" 2>&1 \
  && ok "killed after step 2 and resumed: step 3's adapters equal the straight run's bit for bit, and every metric" \
  || bad "resume is not exact: $(cat "$out/compare.log")"
# Control: the adapters moved in the last step, so equality above is not equality of untrained files.
cmp -s "$ck/ar_adapter/adapter_model.safetensors" "$out/runs/straight/checkpoints/step_000002/ar_adapter/adapter_model.safetensors" \
  && bad "control: steps 2 and 3 hold the same adapters" || ok "control: step 3's adapters differ from step 2's"
# A base directory whose template is also in chat_template.jinja (as newer repos ship it), which
# transformers reads before tokenizer_config.json's: the merged export must not keep it.
"$TANDEM_PYTHON" -c "import json,sys; open(sys.argv[2],'w').write(json.load(open(sys.argv[1]))['chat_template'])" \
  "$out/model/tokenizer_config.json" "$out/model/chat_template.jinja"
"$tandem" ckpt export-hf "$out/runs/straight" "$out/adapter" >"$out/export.log" 2>&1 \
  && "$tandem" ckpt export-hf "$out/runs/straight" "$out/merged" --merge --dtype float32 >>"$out/export.log" 2>&1 \
  && ok "export-hf: the peft adapter and --merge" || bad "export: $(cat "$out/export.log")"
"$TANDEM_PYTHON" - "$out/template.jinja" "$out/merged" "$out/model" <<'PY' \
  && ok "the merged export carries the run's template file and its stop ids (eos_token_id), as full fine-tuning's does" \
  || bad "the merged export's tokenizer_config.json / generation_config.json are the base's"
import json, sys
want, merged, base = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
got = json.load(open(merged + "/tokenizer_config.json"))["chat_template"]
assert got == want, "the merged chat_template is not the run's file"
assert json.load(open(base + "/tokenizer_config.json"))["chat_template"] != want  # control: the base's differs
import os
assert not os.path.exists(merged + "/chat_template.jinja"), "the base's chat_template.jinja would override it"
eos = json.load(open(merged + "/generation_config.json"))["eos_token_id"]
assert 151645 in (eos if isinstance(eos, list) else [eos]), eos  # <|im_end|>, where the chat turns end
PY
"$TANDEM_PYTHON" "$root/scripts/fixtures/peft_oracle.py" check "$out/model" "$out/adapter" "$out/merged" "$ck" \
  "$out/oracle" 2>"$out/oracle.err" || bad "peft oracle: $(tail -5 "$out/oracle.err")"
TANDEM_PEFT_ORACLE="$out/oracle/manifest.json" "$tests_bin" "[.peft_oracle]" >"$out/oracle.log" 2>&1 \
  && ok "peft's logits with the exported adapter are tandem's (unmerged, float64 1e-10)" \
  || bad "tandem vs peft logits: $(tail -30 "$out/oracle.log")"
g=$("$tandem" generate --checkpoint "$out/runs/straight" --prompt "Tom has 3 apples." --temperature 0 \
     --max-new-tokens 4 2>"$out/gen.err")
[ -n "$g" ] && ok "generate --checkpoint: $g" || bad "generate: $(tail -5 "$out/gen.err")"
# Another base: one weight changed, same shapes and headers.
cp -r "$out/model" "$out/model2"
"$TANDEM_PYTHON" - "$out/model2" <<'PY'
import sys
from safetensors.torch import load_file, save_file
path = sys.argv[1] + "/model.safetensors"
w = load_file(path)
k = sorted(w)[0]
w[k] = w[k].clone(); w[k].view(-1)[0] += 1
save_file(w, path, metadata={"format": "pt"})
PY
# The base moved (or the checkpoint went to another machine): export, generate and eval say --base,
# and with it read the base from its new place, checked against the checkpoint's record of it.
mv "$out/model" "$out/moved"
"$tandem" ckpt export-hf "$out/runs/straight" "$out/merged_gone" --merge >"$out/base.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "is gone; .*--base DIR" "$out/base.log" \
  && ok "export-hf of a LoRA checkpoint whose base moved exits 2 naming --base" || bad "moved base: exit $rc $(tail -3 "$out/base.log")"
"$tandem" ckpt export-hf "$out/runs/straight" "$out/merged2" --merge --dtype float32 --base "$out/moved" >>"$out/base.log" 2>&1 \
  && cmp -s "$out/merged/model.safetensors" "$out/merged2/model.safetensors" \
  && cmp -s "$out/merged/tokenizer_config.json" "$out/merged2/tokenizer_config.json" \
  && ok "export-hf --merge --base: the same merged directory from the moved base" || bad "export --base: $(tail -3 "$out/base.log")"
g2=$("$tandem" generate --checkpoint "$out/runs/straight" --base "$out/moved" --prompt "Tom has 3 apples." \
      --temperature 0 --max-new-tokens 4 2>>"$out/base.log")
[ -n "$g2" ] && [ "$g2" = "$g" ] && ok "generate --base: the same text" || bad "generate --base: '$g2' vs '$g'"
"$tandem" eval --checkpoint "$out/runs/straight" --base "$out/moved" --set eval.max_prompts=2 \
  --set eval.samples_per_prompt=1 --set eval.max_new_tokens=4 --set eval.data.task=jsonl \
  --set eval.data.path="$root/tests/fixtures/gsm8k_tiny.jsonl" --set eval.data.prompt_key=question \
  --set eval.data.answer_key=answer >"$out/eval_base.log" 2>&1 \
  && ok "eval --base: $(grep -o '"eval/reward_mean":[0-9.e-]*' "$out/eval_base.log" | head -1)" \
  || bad "eval --base: $(tail -3 "$out/eval_base.log")"
"$tandem" ckpt export-hf "$out/runs/straight" "$out/adapter2" --base "$out/moved" >>"$out/base.log" 2>&1 \
  && "$TANDEM_PYTHON" -c "import json,sys; assert json.load(open(sys.argv[1]))['base_model_name_or_path'] == sys.argv[2]" \
       "$out/adapter2/adapter_config.json" "$out/moved" \
  && ok "export-hf --base (the peft adapter): adapter_config.json names the base where it is now" \
  || bad "adapter export --base: $(tail -3 "$out/base.log")"
for how in "--merge" ""; do
  "$tandem" ckpt export-hf "$out/runs/straight" "$out/merged3" $how --base "$out/model2" >"$out/base2.log" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "adapters only fit the base they were trained on" "$out/base2.log" \
    && ok "export-hf ${how:-(adapter)} --base naming another model exits 2" \
    || bad "--base of another model ($how): exit $rc $(tail -3 "$out/base2.log")"
done
mv "$out/moved" "$out/model"
timeout -s KILL 300 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train "${common[@]}" \
  --set tracks.ar.model.hf_dir="$out/model2" --set tracks.ar.tokenizer.path="$out/model" --set run.out_dir="$out/runs" --set run.name=straight --set run.steps=4 \
  --resume auto >"$out/other.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "adapters only fit the base they were trained on" "$out/other.log" \
  && ok "resume on a changed base exits 2 naming it" || bad "resume on another base: exit $rc $(tail -5 "$out/other.log")"
exit $fail
