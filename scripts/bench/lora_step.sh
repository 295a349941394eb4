#!/usr/bin/env bash
# LoRA's step time against full fine-tuning's, side by side (issue [22]): `tandem bench ablate` on
# scripts/bench/real_size.sh's workload (configs/qwen2_0p5b.yaml on the random-init Qwen2-0.5B
# directory with the real Qwen2.5 tokenizer, bf16 with float32 masters, 4 prompts x 4 samples x 64
# new tokens, one micro), fresh 1-rank processes in ABBA order:
#   B     full fine-tuning
#   lora  tracks.ar.lora rank 32, alpha 64, all-linear (the base frozen)
# speedup_vs_B is B's step time over LoRA's, paired run by run, over the steps after the warm-up
# (the first step's allocations and AdamW state are outside it); the LoRA step's share of full
# fine-tuning's is its inverse. Then, for where the time goes, the sampler with the adapters off,
# on, and on through ATen's GEMMs instead of the host decode kernel (on an AMX host also with the
# AVX-512 kernel in place of AMX's) (`bench rollout --lora-rank`,
# the same 16 sequences of 100 + 64 tokens) and one training step
# of each (`bench train --lora-rank`, pure bf16, untied head). A benchmark, not a test (~15 min on
# 2 cores). RUNS, STEPS, WARMUP override (2, 3, 1); OLD_LOGP=reuse takes both sides' old log-probs
# from the training forward (exact with one mini-batch: DESIGN.md), which drops the ~4 s no-grad
# pass they share; PROMPTS=8 doubles the batch to 8 prompts x 4 samples (the ablate only);
# ABLATE_ONLY=1 (exactly 1) stops after the ablate; LORA_MOMENTS=8bit gives the LoRA side 8-bit AdamW
# moments (the memory goals' configuration; full fine-tuning keeps float32's), and
# LORA_MOMENTS="float32 8bit" runs both LoRA conditions against the same full fine-tuning runs
# (B, lora, lora_8bit, then reversed); TANDEM_REAL_MODEL, TANDEM_TOKENIZER as real_size.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"
tandem=${TANDEM:-build/tandem}
[ -x "$tandem" ] || { echo "lora_step: build first (scripts/build.sh)" >&2; exit 1; }
tok=${TANDEM_TOKENIZER:-build/_deps/tokenizers/qwen2_5}
[ -f "$tok/tokenizer.json" ] || bash scripts/fixtures/fetch_tokenizers.sh >/dev/null
model=${TANDEM_REAL_MODEL:-build/_deps/qwen2_0p5b_random}
[ -f "$model/model.safetensors" ] || "$TANDEM_PYTHON" scripts/fixtures/make_hf_model.py --size qwen2-0.5b "$model" "$tok"
lengths=$(mktemp); trap 'rm -f "$lengths"' EXIT
for g in 0 1 2 3; do for s in 0 1 2 3; do echo "$g 100 64"; done; done >"$lengths"
shape=(--layers 24 --heads 14 --kv-heads 2 --vocab 151936)
conditions=(--condition B=)
for moments in ${LORA_MOMENTS:-float32}; do  # lora (float32 moments), lora_8bit
  name=lora; [ "$moments" = float32 ] || name=lora_$moments
  conditions+=(--condition "$name=tracks.ar.lora.rank=32;tracks.ar.lora.alpha=64;optim.moments=$moments")
done
ablate=$("$tandem" bench ablate --config configs/qwen2_0p5b.yaml --np 1 --runs "${RUNS:-2}" \
  --steps "${STEPS:-3}" --warmup-steps "${WARMUP:-1}" \
  --set tracks.ar.model.hf_dir="$model" --set tracks.ar.data.path=tests/fixtures/gsm8k_tiny.jsonl \
  --set run.device=cpu --set parallel.backend=mpi --set run.dtype=bfloat16 --set optim.warmup_steps=0 \
  --set tracks.ar.rollout.prompts_per_step="${PROMPTS:-4}" --set tracks.ar.rollout.group_size=4 \
  --set tracks.ar.rollout.max_new_tokens=64 --set tracks.ar.model.max_seq_len=512 \
  --set train.num_mini_batches=1 --set train.max_tokens_per_micro=4096 \
  --set tracks.ar.algo.old_logp="${OLD_LOGP:-recompute}" \
  "${conditions[@]}")
echo "ablate: $ablate"
[ "${ABLATE_ONLY:-0}" = 1 ] && exit 0
rollout=$("$tandem" bench rollout --hidden-size 896 --intermediate-size 4864 "${shape[@]}" \
  --lengths "$lengths" --share-prompt auto --batch 16 --max-live 16 --repeats 3 --threads 2 \
  --dtype bfloat16 --lora-rank 32)
echo "rollout: $rollout"
for rank in 0 32; do
  train=$("$tandem" bench train --hidden 896 --ffn 4864 "${shape[@]}" --lengths "$lengths" \
    --threads 2 --dtype bfloat16 --steps 2 --warmup 1 --lora-rank "$rank")
  echo "train lora_rank $rank: $train"
done
