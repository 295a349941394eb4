#!/usr/bin/env bash
# The real-model path as a user takes it: a Hugging Face Qwen2 directory (random weights, Qwen2-0.5B's
# config.json keys, the real Qwen2.5 tokenizer and its chat template), GSM8K-style JSONL data and the
# shipped configs/qwen2_0p5b.yaml. check-config opens what the recipe names; GRPO trains in bf16 with
# float32 master weights on 2 ranks; a resume with the dims spelled out is accepted; ckpt info shows
# the resolved architecture; the export is a complete HF directory (every config.json key, tokenizer
# files, chat template, generation_config) that `generate --model` reads with training's stop tokens,
# and that transformers loads with tandem's logits, greedy text and stopping point.
#
#   check_real_model.sh TANDEM MPIRUN SOURCE_DIR TOKENIZER_CACHE TESTS_BIN
set -u
tandem=$1; mpirun=$2; root=$3; tok=$4/qwen2_5; tests_bin=$5
if [ ! -f "$tok/tokenizer.json" ] || [ ! -f "$tok/tokenizer_config.json" ]; then
  echo "SKIP: the Qwen2.5 tokenizer files are not in $tok (scripts/fixtures/fetch_tokenizers.sh fetches them)"
  exit 77
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$TANDEM_PYTHON" "$root/scripts/fixtures/make_hf_model.py" --size tiny "$out/qwen" "$tok" >/dev/null || { echo "FAIL make_hf_model"; exit 1; }
data=$root/tests/fixtures/gsm8k_tiny.jsonl
recipe=$root/configs/qwen2_0p5b.yaml
common=(--set tracks.ar.model.hf_dir="$out/qwen" --set tracks.ar.data.path="$data" --set run.device=cpu
        --set parallel.backend=mpi --set run.out_dir="$out/runs")

# exit 2 with a one-line message containing $2, for check-config with the rest of the arguments.
expect2() {
  local what=$1 needle=$2; shift 2
  "$tandem" check-config --config "$recipe" "$@" >/dev/null 2>"$out/expect2.err"; local rc=$?
  local err; err=$(grep -v "\[warning\]" "$out/expect2.err")  # the tokenizer's NFC note is not the error
  if [ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$needle"* ]]; then ok "$what: $err"
  else bad "$what: exit $rc, want 2 with '$needle': $err"; fi
}

# 1. check-config opens what the recipe names.
expect2 "shipped recipe, model directory absent" "/models/Qwen2-0.5B-Instruct: no such directory"
"$tandem" check-config --config "$recipe" "${common[@]}" >"$out/cc.yaml" 2>"$out/cc.err" \
  && ok "check-config on the real layout" || { bad "check-config: $(cat "$out/cc.err")"; }
grep -q "ok: model: $out/qwen" "$out/cc.err" || bad "check-config did not report the weights check"
grep -q "chat template $out/qwen/tokenizer_config.json, system prompt, stop on <|im_end|> <|endoftext|>" "$out/cc.err" \
  || bad "check-config: chat template / stop tokens: $(grep tokenizer "$out/cc.err")"
grep -q "12 prompts" "$out/cc.err" || bad "check-config did not read the data"
grep -q "hidden_size: 32" "$out/cc.yaml" && grep -q "vocab_size: 151936" "$out/cc.yaml" \
  && grep -q "eos_token_ids: \[151645, 151643\]" "$out/cc.yaml" && ok "resolved architecture in the printed recipe" \
  || bad "resolved architecture missing from the printed recipe"
expect2 "a given dim that differs" "hidden_size: the recipe says 64 but $out/qwen/config.json says 32" \
  "${common[@]}" --set tracks.ar.model.hidden_size=64
expect2 "max_seq_len past the model's context" "max_seq_len: 40000 exceeds the model's context of 32768" \
  "${common[@]}" --set tracks.ar.model.max_seq_len=40000
"$TANDEM_PYTHON" - "$data" "$out/bad.jsonl" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
lines[2] = '{"question": "How many?", "answer": "nobody knows"}'
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
EOF
expect2 "a reference answer without a number" "bad.jsonl:3: the reference answer has no number" \
  "${common[@]}" --set tracks.ar.data.path="$out/bad.jsonl"
expect2 "nccl without a GPU" "use parallel.backend: mpi" "${common[@]}" --set parallel.backend=nccl
expect2 "cuda without a GPU" "no usable GPU" "${common[@]}" --set run.device=cuda
expect2 "a tokenizer of another model" "has 151665 ids but the model's vocabulary has 97" "${common[@]}" \
  --set tracks.ar.model.hf_dir="$root/tests/fixtures/llama/tiny_llama" --set tracks.ar.tokenizer.path="$tok" \
  --set tracks.ar.model.max_seq_len=64 --set train.max_tokens_per_micro=64 --set tracks.ar.rollout.max_new_tokens=16
expect2 "a system prompt without a template" "needs a chat template" "${common[@]}" --set tracks.ar.data.chat_template=none
err=$("$tandem" train --config "$recipe" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && [[ "$err" == *"no such directory"* ]] && ok "train on the shipped recipe without the model: exit 2" \
  || bad "train on the shipped recipe without the model: exit $rc: $err"

# 2. GRPO in bf16 (float32 master weights) with the chat template, on 2 ranks.
train=(--set run.name=r --set run.steps=2 --set run.save_every=1 --set tracks.ar.rollout.prompts_per_step=4
       --set tracks.ar.rollout.group_size=2 --set tracks.ar.rollout.max_new_tokens=8 --set train.num_mini_batches=1
       --set train.max_tokens_per_micro=2048 --set tracks.ar.model.max_seq_len=256)
timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
  --config "$recipe" "${common[@]}" "${train[@]}" >"$out/train.log" 2>&1 && ok "train 2 steps" \
  || { bad "train: $(tail -20 "$out/train.log")"; exit 1; }
grep -q "float32 master weights" "$out/train.log" || bad "the start-up line does not state the master weights"
grep -q "hidden_size: 32" "$out/runs/r/recipe.yaml" || bad "recipe.yaml lacks the resolved dims"
[ "$(wc -l <"$out/runs/r/metrics.jsonl")" -eq 2 ] || bad "metrics.jsonl does not hold 2 steps"
# Resume with the dims spelled out as config.json has them: the same resolved model, accepted.
timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train \
  --config "$recipe" "${common[@]}" "${train[@]}" --set run.steps=3 --set tracks.ar.model.hidden_size=32 \
  --set tracks.ar.model.num_layers=2 --set tracks.ar.model.vocab_size=151936 --resume auto >"$out/resume.log" 2>&1 \
  && grep -q "resume: .*step_000002 at step 2" "$out/resume.log" && ok "resume with the dims spelled out" \
  || bad "resume with matching dims: $(tail -5 "$out/resume.log")"

# 3. ckpt info: the resolved architecture, the float32 master in the checkpoint.
"$tandem" ckpt info "$out/runs/r" >"$out/info.log" 2>&1 || bad "ckpt info: $(cat "$out/info.log")"
grep -q "vocab 151936  hidden 32  layers 2  heads 4/2  head_dim 8  ffn 64  context 256" "$out/info.log" \
  && grep -q "ar_model: .* parameters (F32)" "$out/info.log" && ok "ckpt info: architecture, F32 master" \
  || bad "ckpt info: $(cat "$out/info.log")"

# 4. Export: a complete HF directory in the dtype asked for.
"$tandem" ckpt export-hf "$out/runs/r" "$out/export" --dtype bfloat16 >"$out/export.log" 2>&1 \
  || bad "export: $(cat "$out/export.log")"
"$TANDEM_PYTHON" - "$out/qwen" "$out/export" "$root" <<'EOF' || fail=1
import json, sys
from pathlib import Path
src, exp, root = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
sys.path.insert(0, str(root / "scripts" / "fixtures"))
from make_safetensors import read_safetensors
problems = []
a, b = json.loads((src / "config.json").read_text()), json.loads((exp / "config.json").read_text())
problems += [f"config.json lost {k}" for k in a if k not in b]
problems += [f"config.json {k}: {a[k]} -> {b[k]}" for k in a if k in b and k != "eos_token_id" and a[k] != b[k]]
if b.get("eos_token_id") != [151645, 151643]:
    problems.append(f"config.json eos_token_id {b.get('eos_token_id')}")
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    if not (exp / name).exists() or (exp / name).read_bytes() != (src / name).read_bytes():
        problems.append(f"{name} not copied through")
g = json.loads((exp / "generation_config.json").read_text())
if g.get("eos_token_id") != [151645, 151643] or g.get("top_k") != 20:
    problems.append(f"generation_config.json {g}")
_, _, entries = read_safetensors(exp / "model.safetensors")  # the independent reader
if {e["dtype"] for e in entries.values()} != {"BF16"} or len(entries) != 2 + 12 * 2:
    problems.append(f"weights: {len(entries)} tensors, dtypes {sorted({e['dtype'] for e in entries.values()})}")
for p in problems:
    print("FAIL export:", p)
print("ok   export: every config.json key kept, tokenizer files copied, generation_config, 26 BF16 tensors"
      if not problems else "")
sys.exit(1 if problems else 0)
EOF

# eval of a run whose recipe has no eval section (configs/qwen2_0p5b.yaml): refused, as its eval.data
# would be the default reverse_digits task; --set on a --checkpoint names the held-out prompts.
err=$("$tandem" eval --checkpoint "$out/runs/r" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && [[ "$err" == *"names no held-out prompts"* ]] && ok "eval without held-out prompts: exit 2" \
  || bad "eval without held-out prompts: exit $rc: $err"
"$tandem" eval --checkpoint "$out/runs/r" --set eval.data.task=jsonl --set eval.data.path="$data" \
  --set eval.data.prompt_key=question --set eval.max_prompts=3 --set eval.samples_per_prompt=1 \
  --set eval.max_new_tokens=4 >"$out/eval.json" 2>"$out/eval.err" \
  && grep -qE '"eval/prompts":3(\.0)?[,}]' "$out/eval.json" && ok "eval --checkpoint --set eval.data...: 3 prompts" \
  || bad "eval --checkpoint with --set: $(cat "$out/eval.json" "$out/eval.err" | tail -3)"

# 5. generate from the export stops where training stopped; a float32 export greedy-decodes as the checkpoint.
"$tandem" generate --model "$out/export" --prompt "What is 2 + 3?" --max-new-tokens 4 >"$out/gen_export.out" 2>"$out/gen_export.err" \
  || bad "generate --model export: $(cat "$out/gen_export.err")"
"$tandem" generate --checkpoint "$out/runs/r" --prompt "What is 2 + 3?" --max-new-tokens 4 >"$out/gen_ckpt.out" 2>"$out/gen_ckpt.err" \
  || bad "generate --checkpoint: $(cat "$out/gen_ckpt.err")"
stops() { sed -n 's/.*, stop on /stop on /p' "$1"; }
[ -n "$(stops "$out/gen_export.err")" ] && [ "$(stops "$out/gen_export.err")" = "$(stops "$out/gen_ckpt.err")" ] \
  && [ "$(stops "$out/gen_export.err")" = "stop on <|im_end|> <|endoftext|>" ] && grep -q "chat template" "$out/gen_export.err" \
  && ok "generate --model EXPORT: chat template, $(stops "$out/gen_export.err")" \
  || bad "stop tokens: export '$(cat "$out/gen_export.err")' vs checkpoint '$(cat "$out/gen_ckpt.err")'"
# OUT with a trailing slash, as the README writes it: the export once wrote OUT/.partial, inside the
# folder it then removed, and lost itself.
"$tandem" ckpt export-hf "$out/runs/r" "$out/export32/" --dtype float32 >"$out/export32.log" 2>&1 \
  && [ -f "$out/export32/model.safetensors" ] && [ ! -e "$out/export32/.partial" ] && [ ! -e "$out/export32.partial" ] \
  && ok "export-hf into OUT/ (a trailing slash)" || bad "float32 export into OUT/: $(cat "$out/export32.log")"
g1=$("$tandem" generate --model "$out/export32" --prompt "Tom has 3 apples." --chat-template none --temperature 0 \
      --max-new-tokens 6 2>/dev/null)
g2=$("$tandem" generate --checkpoint "$out/runs/r" --prompt "Tom has 3 apples." --chat-template none --temperature 0 \
      --max-new-tokens 6 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ] && ok "greedy text from the float32 export equals the checkpoint's" \
  || bad "greedy export vs checkpoint: '$g1' vs '$g2'"

# 6. transformers reads the export: AutoModelForCausalLM gives tandem's logits (float64 1e-10, bf16 as
# llama.transformers_logits states), AutoTokenizer + generate give tandem's greedy text, and with a
# stop id that greedy decoding reaches, both stop on it at the same place.
"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" logits "$out/export32" "$out/oracle" >/dev/null 2>&1 \
  && TANDEM_HF_ORACLE="$out/oracle/manifest.json" "$tests_bin" "[.hf_oracle]" >"$out/oracle.log" 2>&1 \
  && ok "transformers' AutoModelForCausalLM on the export gives tandem's logits" \
  || bad "transformers logits on the export: $(tail -30 "$out/oracle.log")"
prompt="Tom has 3 apples."
hf=$("$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" generate "$out/export32" "$prompt" 6 2>"$out/hf_gen.err") \
  || bad "transformers generate: $(tail -5 "$out/hf_gen.err")"
hf_ids=$(sed -n 1p <<<"$hf"); hf_text=$(sed -n '2,$p' <<<"$hf")
[ -n "$hf_ids" ] && [ "$g1" = "$prompt -> $hf_text    (logp ${g1##*(logp }" ] \
  && ok "transformers' greedy continuation of the export is tandem's: '$hf_text'" \
  || bad "greedy continuation: tandem '$g1', transformers '$hf_text' ($hf_ids)"
# A stop id taken from that continuation (its 3rd token): transformers' generate and tandem's stop there.
stop=$(awk '{print $3}' <<<"$hf_ids")
cp -r "$out/export32" "$out/export_stop"
"$TANDEM_PYTHON" - "$out/export_stop" "$stop" <<'EOF'
import json, sys
path = f"{sys.argv[1]}/generation_config.json"
g = json.load(open(path)); g["eos_token_id"] = [int(sys.argv[2])]; json.dump(g, open(path, "w"))
EOF
hs=$("$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" generate "$out/export_stop" "$prompt" 6 2>/dev/null)
ts=$("$tandem" generate --model "$out/export_stop" --prompt "$prompt" --chat-template none --temperature 0 \
      --max-new-tokens 6 2>/dev/null)
hs_ids=$(sed -n 1p <<<"$hs"); hs_text=$(sed -n '2,$p' <<<"$hs")
[ "${hs_ids##* }" = "$stop" ] && [ "$(wc -w <<<"$hs_ids")" -lt 6 ] && [[ "$ts" != *"cut at max_new_tokens"* ]] \
  && [ "$ts" = "$prompt -> $hs_text    (logp ${ts##*(logp }" ] \
  && ok "both stop on id $stop after $(wc -w <<<"$hs_ids") tokens: '$hs_text'" \
  || bad "stop id $stop: transformers '$hs_ids' '$hs_text', tandem '$ts'"
exit $fail
