#!/usr/bin/env bash
# A Qwen3 directory written by transformers (Qwen3ForCausalLM.save_pretrained: q/k norms, no biases,
# head_dim 16 != hidden / heads, tied embeddings; the real Qwen3 tokenizer and its thinking template)
# trains 2 GRPO steps in bf16 on 2 ranks, exports with `ckpt export-hf`, and transformers loads the
# export as a Qwen3ForCausalLM with tandem's logits and greedy text.
#
#   check_qwen3.sh TANDEM MPIRUN SOURCE_DIR TOKENIZER_CACHE TESTS_BIN   (exit 77: no tokenizer files)
set -u
tandem=$1; mpirun=$2; root=$3; tok=$4/qwen3; tests_bin=$5
if [ ! -f "$tok/tokenizer.json" ] || [ ! -f "$tok/tokenizer_config.json" ]; then
  echo "SKIP: the Qwen3 tokenizer files are not in $tok (scripts/fixtures/fetch_tokenizers.sh puts them there)"
  exit 77
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" tiny qwen3 "$out/qwen3" "$tok" >/dev/null 2>&1 \
  || { echo "FAIL writing the Qwen3 directory"; exit 1; }
common=(--config "$root/configs/qwen2_0p5b.yaml" --set tracks.ar.model.hf_dir="$out/qwen3"
        --set tracks.ar.data.path="$root/tests/fixtures/gsm8k_tiny.jsonl" --set run.device=cpu
        --set parallel.backend=mpi --set run.out_dir="$out/runs" --set run.name=r --set run.steps=2
        --set run.save_every=1 --set tracks.ar.rollout.prompts_per_step=4 --set tracks.ar.rollout.group_size=2
        --set tracks.ar.rollout.max_new_tokens=8 --set train.num_mini_batches=1
        --set train.max_tokens_per_micro=2048 --set tracks.ar.model.max_seq_len=512)
"$tandem" check-config "${common[@]}" >"$out/cc.yaml" 2>"$out/cc.err" \
  && grep -q "qk_norm: true" "$out/cc.yaml" && grep -q "qkv_bias: false" "$out/cc.yaml" \
  && grep -q "head_dim: 16" "$out/cc.yaml" && ok "check-config resolves Qwen3: qk_norm, no q/k/v bias, head_dim 16" \
  || bad "check-config: $(cat "$out/cc.err") $(grep -E 'qk_norm|qkv_bias|head_dim' "$out/cc.yaml")"
timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train "${common[@]}" \
  >"$out/train.log" 2>&1 && ok "train 2 steps in bf16 on 2 ranks" || { bad "train: $(tail -20 "$out/train.log")"; exit 1; }
"$tandem" ckpt info "$out/runs/r" >"$out/info.log" 2>&1 && grep -q "qk_norm yes" "$out/info.log" \
  && ok "ckpt info: qk_norm yes" || bad "ckpt info: $(cat "$out/info.log")"
"$tandem" ckpt export-hf "$out/runs/r" "$out/export" --dtype float32 >"$out/export.log" 2>&1 \
  || bad "export: $(cat "$out/export.log")"
"$TANDEM_PYTHON" - "$out/export" <<'EOF' && ok "the export is a Qwen3 directory" || fail=1
import json, sys
c = json.load(open(f"{sys.argv[1]}/config.json"))
want = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "head_dim": 16, "attention_bias": False,
        "tie_word_embeddings": True}
wrong = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
if wrong:
    print("FAIL export config.json:", wrong)
sys.exit(1 if wrong else 0)
EOF
"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" logits "$out/export" "$out/oracle" >/dev/null 2>&1 \
  && TANDEM_HF_ORACLE="$out/oracle/manifest.json" "$tests_bin" "[.hf_oracle]" >"$out/oracle.log" 2>&1 \
  && ok "transformers' Qwen3ForCausalLM on the export gives tandem's logits (float64 1e-10, bf16 4e-2)" \
  || bad "transformers logits on the export: $(tail -30 "$out/oracle.log")"
prompt="Tom has 3 apples."
hf=$("$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" generate "$out/export" "$prompt" 6 2>"$out/hf.err") \
  || bad "transformers generate: $(tail -5 "$out/hf.err")"
hf_text=$(sed -n '2,$p' <<<"$hf")
g=$("$tandem" generate --model "$out/export" --prompt "$prompt" --chat-template none --temperature 0 \
     --max-new-tokens 6 2>/dev/null)
[ -n "$g" ] && [ "$g" = "$prompt -> $hf_text    (logp ${g##*(logp }" ] \
  && ok "transformers' greedy continuation of the export is tandem's: '$hf_text'" \
  || bad "greedy: tandem '$g', transformers '$hf_text' ($(sed -n 1p <<<"$hf"))"
exit $fail
