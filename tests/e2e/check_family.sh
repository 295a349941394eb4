#!/usr/bin/env bash
# A model directory of one family written by transformers trains 2 GRPO steps in bf16 on 2 ranks
# (shared prompts on), exports with `ckpt export-hf`, and transformers loads the export as the same
# family with tandem's logits and greedy text.
#   qwen3    Qwen3ForCausalLM: q/k norms, no biases, head_dim 16 != hidden / heads, tied embeddings;
#            the real Qwen3 tokenizer and its thinking template
#   mistral  MistralForCausalLM: a 16-token sliding window (shorter than the prompts, so it acts in
#            training, prefill, decode and shared-prompt decode), head_dim 16; the real Mistral
#            tokenizer (SentencePiece-style BPE with byte fallback), raw prompts
#   gemma3   Gemma3ForCausalLM: a local layer (16-token window, its own RoPE base) then a global one,
#            (1 + w) norms around attention and MLP, GeGLU, scaled embeddings, q/k norms; gemma-3-1b's
#            vocabulary of 262144 ids (the tokenizer's <image_soft_token> 262144 lies past it); the
#            real Gemma 3 tokenizer and chat template, which folds the system prompt into the user turn
#
#   check_family.sh FAMILY TANDEM MPIRUN SOURCE_DIR TOKENIZER_CACHE TESTS_BIN   (exit 77: no tokenizer files)
set -u
family=$1; tandem=$2; mpirun=$3; root=$4; tok=$5/$1; tests_bin=$6
if [ ! -f "$tok/tokenizer.json" ] || [ ! -f "$tok/tokenizer_config.json" ]; then
  echo "SKIP: the $family tokenizer files are not in $tok (scripts/fixtures/fetch_tokenizers.sh puts them there)"
  exit 77
fi
case $family in
  qwen3)
    resolved=("qk_norm: true" "qkv_bias: false" "head_dim: 16")
    info="qk_norm yes"
    extra=()
    want='{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "head_dim": 16, "attention_bias": false,
           "tie_word_embeddings": true}'
    prompt="Tom has 3 apples." ;;
  mistral)
    resolved=("sliding_window: 16" "qk_norm: false" "head_dim: 16")
    info="sliding_window 16"
    extra=(--set tracks.ar.data.system_prompt=null)  # Mistral's tokenizer has no chat template: raw prompts
    want='{"model_type": "mistral", "architectures": ["MistralForCausalLM"], "head_dim": 16, "sliding_window": 16,
           "tie_word_embeddings": false}'
    prompt="Tom has 3 apples and buys 5 more at the market on Sunday morning. How many apples does Tom have now?" ;;
  gemma3)
    resolved=("block: gemma3" "sliding_window: 16" "qk_norm: true" "head_dim: 16" "rope_local_theta: 10000"
              "query_pre_attn_scalar: 16")
    info="block gemma3"
    extra=()
    want='{"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "head_dim": 16, "sliding_window": 16,
           "layer_types": ["sliding_attention", "full_attention"], "query_pre_attn_scalar": 16,
           "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true}'
    prompt="Tom has 3 apples and buys 5 more at the market on Sunday morning. How many apples does Tom have now?" ;;
  *) echo "check_family.sh: unknown family $family (qwen3, mistral, gemma3)"; exit 2 ;;
esac
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" tiny "$family" "$out/model" "$tok" >/dev/null 2>&1 \
  || { echo "FAIL writing the $family directory"; exit 1; }
common=(--config "$root/configs/qwen2_0p5b.yaml" --set tracks.ar.model.hf_dir="$out/model"
        --set tracks.ar.data.path="$root/tests/fixtures/gsm8k_tiny.jsonl" --set run.device=cpu
        --set parallel.backend=mpi --set run.out_dir="$out/runs" --set run.name=r --set run.steps=2
        --set run.save_every=1 --set tracks.ar.rollout.prompts_per_step=4 --set tracks.ar.rollout.group_size=2
        --set tracks.ar.rollout.max_new_tokens=8 --set train.num_mini_batches=1
        --set train.max_tokens_per_micro=2048 --set tracks.ar.model.max_seq_len=512 "${extra[@]}")
missing=""
"$tandem" check-config "${common[@]}" >"$out/cc.yaml" 2>"$out/cc.err" || missing="(check-config failed)"
for key in "${resolved[@]}"; do grep -q "$key" "$out/cc.yaml" || missing="$missing [$key]"; done
[ -z "$missing" ] && ok "check-config resolves $family: ${resolved[*]}" \
  || bad "check-config: missing $missing $(cat "$out/cc.err") $(grep -E 'qk_norm|qkv_bias|head_dim|sliding' "$out/cc.yaml")"
timeout -s KILL 600 $mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tandem" train "${common[@]}" \
  >"$out/train.log" 2>&1 && ok "train 2 steps in bf16 on 2 ranks" || { bad "train: $(tail -20 "$out/train.log")"; exit 1; }
"$tandem" ckpt info "$out/runs/r" >"$out/info.log" 2>&1 && grep -q "$info" "$out/info.log" \
  && ok "ckpt info: $info" || bad "ckpt info: $(cat "$out/info.log")"
"$tandem" ckpt export-hf "$out/runs/r" "$out/export" --dtype float32 >"$out/export.log" 2>&1 \
  || bad "export: $(cat "$out/export.log")"
"$TANDEM_PYTHON" - "$out/export" "$want" <<'EOF' && ok "the export is a $family directory" || fail=1
import json, sys
c = json.load(open(f"{sys.argv[1]}/config.json"))
want = json.loads(sys.argv[2])
wrong = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
if wrong:
    print("FAIL export config.json:", wrong)
sys.exit(1 if wrong else 0)
EOF
"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" logits "$out/export" "$out/oracle" >/dev/null 2>&1 \
  && TANDEM_HF_ORACLE="$out/oracle/manifest.json" "$tests_bin" "[.hf_oracle]" >"$out/oracle.log" 2>&1 \
  && ok "transformers' $family class on the export gives tandem's logits (float64 1e-10, bf16 4e-2; decode)" \
  || bad "transformers logits on the export: $(tail -30 "$out/oracle.log")"
hf=$("$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" generate "$out/export" "$prompt" 6 2>"$out/hf.err") \
  || bad "transformers generate: $(tail -5 "$out/hf.err")"
hf_text=$(sed -n '2,$p' <<<"$hf")
g=$("$tandem" generate --model "$out/export" --prompt "$prompt" --chat-template none --temperature 0 \
     --max-new-tokens 6 2>/dev/null)
[ -n "$g" ] && [ "$g" = "$prompt -> $hf_text    (logp ${g##*(logp }" ] \
  && ok "transformers' greedy continuation of the export is tandem's: '$hf_text'" \
  || bad "greedy: tandem '$g', transformers '$hf_text' ($(sed -n 1p <<<"$hf"))"
exit $fail
