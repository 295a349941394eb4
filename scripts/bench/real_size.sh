#!/usr/bin/env bash
# A real size on the CPU: 2 GRPO steps of configs/qwen2_0p5b.yaml on a randomly initialised
# directory with Qwen2-0.5B's exact architecture and the real Qwen2.5 tokenizer (chat template on),
# 4 prompts x 4 samples, 64 new tokens, once in float32 and once in bfloat16 with float32 master
# weights. Prints, per dtype: model load time, rollout tokens/s, train tokens/s (action tokens),
# peak RSS per rank, and the GEMM rate the run measured. A benchmark, not a test (~10-20 min).
#
#   scripts/bench/real_size.sh [NP]      NP ranks (default 1: dp 1, every core for the one rank)
# Env: TANDEM_REAL_MODEL (default build/_deps/qwen2_0p5b_random, written once, ~1 GB),
#      DTYPES (default "float32 bfloat16"), STEPS (default 2), DEVICE (cpu) and BACKEND (mpi):
#      cuda and nccl on a GPU (scripts/gpu/check.sh; peak GPU memory is printed too), TANDEM (the
#      binary, default build/tandem), TANDEM_TOKENIZER (default build/_deps/tokenizers/qwen2_5),
#      LORA (default 0: full fine-tuning): LoRA ranks to run per dtype, e.g. "0 32" for full fine-tuning
#      and rank 32 (alpha 64, all-linear) side by side; each line also gives the AdamW state file's size.
#      An entry RANK:MOMENTS runs that rank with those optim.moments only ("0 32:8bit").
#      RECOMPUTE (default none): train.recompute for every run (layers: activation recompute).
#      OLD_LOGP (default recompute): tracks.ar.algo.old_logp for every run (reuse: exact here, as
#      each step has one mini-batch).
#      MOMENTS (default float32): optim.moments values to run per dtype and rank, e.g. "float32 8bit"
#      for AdamW's float32 moments and its blockwise 8-bit ones side by side.
#      DATA (default tests/fixtures/gsm8k_tiny.jsonl): the prompts. MPIRUN_ARGS: more mpirun
#      arguments, e.g. "-x LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2" for another allocator.
#      Each line also gives the peak RSS after every step (peak_rss_gib_by_step), as it grows.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"  # the project's virtual environment (scripts/setup.sh)
np=${1:-1}
tandem=${TANDEM:-build/tandem}
[ -x "$tandem" ] || { echo "real_size: build first (scripts/build.sh)" >&2; exit 1; }
tok=${TANDEM_TOKENIZER:-build/_deps/tokenizers/qwen2_5}
[ -f "$tok/tokenizer.json" ] || bash scripts/fixtures/fetch_tokenizers.sh >/dev/null
device=${DEVICE:-cpu}
backend=${BACKEND:-mpi}
model=${TANDEM_REAL_MODEL:-build/_deps/qwen2_0p5b_random}
[ -f "$model/model.safetensors" ] || "$TANDEM_PYTHON" scripts/fixtures/make_hf_model.py --size qwen2-0.5b "$model" "$tok"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
steps=${STEPS:-2}
echo "real_size: $model, $np rank(s), $(nproc) CPUs, device $device, $steps steps per dtype"
for dtype in ${DTYPES:-float32 bfloat16}; do
for entry in ${LORA:-0}; do
lora=${entry%%:*}; only=${entry#*:}; [ "$only" = "$entry" ] && only=""
for moments in ${only:-${MOMENTS:-float32}}; do
  name=$dtype; lora_args=()
  if [ "$lora" -gt 0 ]; then
    name=${dtype}_lora$lora; lora_args=(--set tracks.ar.lora.rank="$lora" --set tracks.ar.lora.alpha=$((2 * lora)))
  fi
  [ "$moments" = float32 ] || name=${name}_$moments
  log=$out/$name.log
  start=$(date +%s)
  # shellcheck disable=SC2086  # MPIRUN_ARGS is split into its words on purpose
  mpirun --allow-run-as-root --oversubscribe --bind-to none ${MPIRUN_ARGS:-} -np "$np" "$tandem" train --config configs/qwen2_0p5b.yaml \
    --set tracks.ar.model.hf_dir="$model" --set tracks.ar.data.path="${DATA:-tests/fixtures/gsm8k_tiny.jsonl}" \
    --set run.device="$device" --set parallel.backend="$backend" --set run.out_dir="$out" --set run.name="$name" \
    --set run.dtype="$dtype" --set run.steps="$steps" --set optim.warmup_steps=0 \
    --set tracks.ar.rollout.prompts_per_step=4 --set tracks.ar.rollout.group_size=4 \
    --set tracks.ar.rollout.max_new_tokens=64 --set tracks.ar.model.max_seq_len=512 \
    --set train.num_mini_batches=1 --set train.max_tokens_per_micro=4096 --set train.recompute="${RECOMPUTE:-none}" \
    --set tracks.ar.algo.old_logp="${OLD_LOGP:-recompute}" \
    --set optim.moments="$moments" "${lora_args[@]}" >"$log" 2>&1 \
    || { echo "real_size: $name run failed:"; tail -20 "$log"; exit 1; }
  wall=$(( $(date +%s) - start ))
  "$TANDEM_PYTHON" - "$dtype" "$log" "$out/$name/metrics.jsonl" "$wall" "$lora" "$out/$name" "${RECOMPUTE:-none}" "$moments" \
    "${OLD_LOGP:-recompute}" <<'EOF'
import glob, json, os, re, sys
dtype, log, metrics, wall = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3], int(sys.argv[4])
lora, run_dir = int(sys.argv[5]), sys.argv[6]
opt = sorted(glob.glob(run_dir + "/checkpoints/step_*/optimizer_tp0.pt"))
rows = [json.loads(l) for l in open(metrics)]
load = re.search(r"ar policy: .* loaded in ([0-9.]+) s", log)
gemm = re.search(r"GEMM ([0-9]+) GFLOP/s", log)
threads = re.search(r"(\d+) intra-op threads per rank", log)
rss = re.search(r"peak RSS per rank \(GiB\): ([0-9. ]+)", log)
gpu = re.search(r"peak GPU memory per rank \(GiB\): ([0-9. ]+)", log)
def mean(key):
    vals = [r[key] for r in rows if key in r]
    return sum(vals) / len(vals) if vals else float("nan")
print(json.dumps({
    "dtype": dtype, "lora_rank": lora, "moments": sys.argv[8], "recompute": sys.argv[7], "old_logp": sys.argv[9], "steps": len(rows), "threads_per_rank": int(threads.group(1)) if threads else None,
    "gemm_gflops": int(gemm.group(1)) if gemm else None,
    "load_s": float(load.group(1)) if load else None,
    "rollout_tokens_per_s": round(mean("ar/perf/rollout_tokens_per_s"), 1),
    "train_action_tokens_per_s": round(mean("ar/perf/train_tokens_per_s"), 1),
    "step_s": round(mean("time/step_s"), 1), "update_s": round(mean("time/update_s"), 2),
    "generate_s": round(mean("ar/time/generate_s"), 1), "train_s": round(mean("ar/time/train_s"), 1),
    "peak_rss_gib_per_rank": [float(x) for x in rss.group(1).split()] if rss else None,
    "peak_rss_gib_by_step": [round(r["mem/peak_rss_gib"], 2) for r in rows if "mem/peak_rss_gib" in r],
    "peak_gpu_gib_per_rank": [float(x) for x in gpu.group(1).split()] if gpu else None,
    "optimizer_state_mb": round(os.path.getsize(opt[-1]) / 1e6, 1) if opt else None,
    "wall_s": wall,
    "phases_s": {k: round(mean(k), 2) for k in sorted({k for r in rows for k in r if "time/" in k})},
}))
EOF
done
done
done
