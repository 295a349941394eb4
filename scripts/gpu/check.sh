#!/usr/bin/env bash
# One command that proves a GPU machine runs tandem ([20]). On a bare Linux machine with NVIDIA
# GPUs, PyTorch 2.x (the version scripts/requirements.txt pins) and no network, it uses a build
# made beforehand on a CPU machine (scripts/gpu/pack.sh: tandem and its tests, their libraries,
# Open MPI), unpacks it into a private prefix (never into /) and runs, each stage under its own
# time limit, a failed stage never stopping the next:
#   env          the pack against this machine's torch; GPUs seen
#   version      tandem --version
#   ctest_cuda   ctest -L cuda: the [cuda] unit tests, NCCL on one rank, 20 quickstart steps whose
#                reward rises and the overlap worker on CUDA (tests/e2e/check_cuda.sh)
#   quickstart   20 GRPO steps of configs/quickstart.yaml on one rank, NCCL; the reward's first and
#                last steps
#   quickstart2  the same on 2 ranks (mpirun -np 2) when 2 GPUs are visible
#   bench_mid    bench train, the mid model (hidden 512, 4 layers), bf16, MFU against a bf16 GEMM
#                peak measured on this GPU
#   bench_qwen   bench train on Qwen2-0.5B's shape (hidden 896, 24 layers, 14/2 heads, vocab 151936)
#   real_size    scripts/bench/real_size.sh on CUDA: step time, tokens/s, peak GPU memory
#   long_32k     [19]'s one 32,768-token sequence on the mid model, bf16
# and writes OUT/summary.json (each stage's status, seconds and figures) and OUT/logs/*.log.
#
#   scripts/gpu/check.sh OUT [--pack TAR] [--dry-run]
# --dry-run runs every stage on this CPU machine instead (device cpu, backend mpi, small shapes,
# the pack unpacked into a scratch directory, limits x3), so that CI exercises the script before
# a GPU comes (ctest gpu.check_dry_run). The stage limits add up to 520 s on one GPU.
set -uo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
repo=$PWD

# Stage mode (check.sh --stage FUNCTION ARGS...): this script run again under a stage's time limit
# to call one of its functions, with the environment the main run exported (CHECK_*).
if [ "${1:-}" = --stage ]; then
  stage_fn=$2
  shift 2
  stage_args=("$@")
else
  stage_fn=""
  out=""
  pack=build/gpu-pack/tandem-gpu.tar.gz
  dry=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry-run) dry=1 ;;
      --pack) pack=$2; shift ;;
      -*) echo "check: unknown option $1 (use OUT [--pack TAR] [--dry-run])" >&2; exit 2 ;;
      *) out=$1 ;;
    esac
    shift
  done
  [ -n "$out" ] || { echo "usage: scripts/gpu/check.sh OUT [--pack TAR] [--dry-run]" >&2; exit 2; }
  [ -f "$pack" ] || { echo "check: no pack at $pack; run scripts/gpu/pack.sh on the build machine first" >&2; exit 2; }
  mkdir -p "$out/logs" || exit 2
  # The Python that holds torch: TANDEM_PYTHON, else the first candidate that imports it.
  python=${TANDEM_PYTHON:-}
  if [ -z "$python" ]; then
    candidates=(python3 /opt/torch/.venv/bin/python3 python)
    [ "$dry" = 1 ] && candidates=("$repo/.venv/bin/python" "${candidates[@]}")
    for c in "${candidates[@]}"; do
      if "$c" -c 'import torch' 2>/dev/null; then python=$c; break; fi
    done
  fi
  "$python" -c 'import torch' 2>/dev/null ||
    { echo "check: no Python here imports torch (tried ${python:-python3, /opt/torch/.venv/bin/python3, python}); set TANDEM_PYTHON" >&2; exit 2; }
  # The private prefix: removed on exit, whatever happens.
  prefix=$(mktemp -d "${TMPDIR:-/tmp}/tandem-gpu.XXXXXX")
  trap 'rm -rf "$prefix"' EXIT
  tar -C "$prefix" -xzf "$pack" || { echo "check: cannot unpack $pack" >&2; exit 2; }
  torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
  nvidia_libs=$(find "$(dirname "$torch_dir")/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | tr '\n' ':')
  p=$prefix/tandem-gpu
  export CHECK_OUT=$(cd "$out" && pwd) CHECK_DRY=$dry CHECK_PYTHON=$python CHECK_PREFIX=$prefix
  export TANDEM_FIXTURES_DIR=$repo/tests/fixtures  # the packed tests were built where the tree was elsewhere
  export LD_LIBRARY_PATH="$p/lib:$p/openmpi/usr/lib/x86_64-linux-gnu:$p/openmpi/usr/lib/x86_64-linux-gnu/openmpi/lib:$torch_dir/lib:$nvidia_libs${LD_LIBRARY_PATH:-}"
  export PATH="$p/bin:$p/openmpi/usr/bin:$PATH"
  export OPAL_PREFIX=$p/openmpi/usr OPAL_SYSCONFDIR=$p/openmpi/etc/openmpi
  export OMPI_MCA_plm_rsh_agent=false  # one machine: never ssh
  export OMPI_MCA_btl_vader_single_copy_mechanism=none  # CMA is often refused in containers
fi

# Both modes: what the stages share.
out=$CHECK_OUT dry=$CHECK_DRY python=$CHECK_PYTHON prefix=$CHECK_PREFIX
p=$prefix/tandem-gpu
tandem=$p/bin/tandem
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
if [ "$dry" = 0 ]; then
  device=cuda backend=nccl dtype=bfloat16 steps=20 mid_sequences=64 limit_scale=1 threads=2
else  # on 2 CPU cores beside other tests: fewer steps and sequences, 3x the limits, 1 thread a rank
  device=cpu backend=mpi dtype=float32 steps=2 mid_sequences=8 limit_scale=${CHECK_LIMIT_SCALE:-3} threads=1
fi
lengths=$prefix/lengths
mid=(--hidden 512 --layers 4 --heads 8 --kv-heads 4 --vocab 32000)
bench=(bench train --device "$device" --dtype "$dtype" --steps 3 --warmup 1 --threads 2)
[ "$dry" = 1 ] && bench=(bench train --device "$device" --dtype "$dtype" --steps 1 --warmup 0 --threads 2)
if [ "$dry" = 1 ]; then
  qwen=(--hidden 64 --layers 2 --heads 4 --kv-heads 2 --vocab 1000)
else
  qwen=(--hidden 896 --layers 24 --heads 14 --kv-heads 2 --ffn 4864 --vocab 151936)
fi

# The stages that are functions (run through --stage).
env_check() {
  "$python" - "$p/manifest.json" "$dry" <<'PY'
import json, sys, torch
m = json.load(open(sys.argv[1]))
have = torch.__version__.split("+")[0]
print(f"pack: built at {m['commit']} against torch {m['torch']} (CUDA {m['torch_cuda']}); here torch {torch.__version__}")
print(f"GPUs visible: {torch.cuda.device_count()}" + "".join(f"; {i}: {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())))
if have != m["torch"]:
    sys.exit(f"check: the pack was built against torch {m['torch']} but this machine has {have}: LibTorch's C++ ABI "
             "differs between versions; install the pinned torch or rebuild the pack against this one")
if sys.argv[2] == "0" and torch.cuda.device_count() == 0:
    sys.exit("check: torch sees no GPU here (torch.cuda.device_count() == 0); use --dry-run on a CPU machine")
PY
  [ $? -eq 0 ] || return 1
  # The pack's own Open MPI, not one this machine may have (the dry run proves the pack holds it).
  [ "$(command -v mpirun)" = "$p/openmpi/usr/bin/mpirun" ] ||
    { echo "check: mpirun is $(command -v mpirun), not the pack's $p/openmpi/usr/bin/mpirun"; return 1; }
  ! ldd "$tandem" | grep "not found"
}

quickstart() {  # NP NAME
  "${mpirun[@]}" -np "$1" "$tandem" train --config configs/quickstart.yaml --set run.out_dir="$out/runs" \
    --set run.name="$2" --set run.device="$device" --set parallel.backend="$backend" --set run.steps="$steps" \
    --set run.threads="$threads" --set eval.every=0 --set eval.at_start=false || return
  "$python" - "$out/runs/$2/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = [x["ar/reward/mean"] for x in rows if "ar/reward/mean" in x]
k = max(1, min(5, len(r) // 2))
print(json.dumps({"steps": len(r), "reward_first": sum(r[:k]) / k, "reward_last": sum(r[-k:]) / k,
                  "step_s": sum(x.get("time/step_s", 0) for x in rows) / max(1, len(r)),
                  "peak_gpu_gib": max([x.get("mem/peak_gpu_gib", 0) for x in rows] + [0])}))
PY
}

real_size() {
  if [ "$dry" = 1 ]; then  # the tiny directory with Qwen2's config keys, not the 1 GB one
    local model=$prefix/tiny_qwen2
    "$python" scripts/fixtures/make_hf_model.py --size tiny "$model" "$p/tokenizers/qwen2_5" >/dev/null || return
    TANDEM_REAL_MODEL=$model DTYPES=float32 STEPS=1 TANDEM=$tandem TANDEM_TOKENIZER=$p/tokenizers/qwen2_5 \
      TANDEM_PYTHON=$python bash scripts/bench/real_size.sh 1
  else
    TANDEM_REAL_MODEL=$prefix/qwen2_0p5b DTYPES=bfloat16 STEPS=3 DEVICE=cuda BACKEND=nccl TANDEM=$tandem \
      TANDEM_TOKENIZER=$p/tokenizers/qwen2_5 TANDEM_PYTHON=$python bash scripts/bench/real_size.sh 1
  fi
}

# Without ctest on this machine the same three tests run one after the other.
cuda_tests_direct() {
  local rc=0
  "$p/bin/tandem_tests" "[cuda]" --durations yes || rc=1
  "${mpirun[@]}" -np 1 "$p/bin/tandem_mpi_tests" "[cuda]" || rc=1
  TANDEM_PYTHON=$python bash "$repo/tests/e2e/check_cuda.sh" "$tandem" mpirun "$repo/configs/quickstart.yaml" || rc=1
  return $rc
}
if [ -n "$stage_fn" ]; then
  "$stage_fn" "${stage_args[@]}"
  exit $?
fi

# The main run.
script_start=$(date +%s)
results=$out/stages.jsonl
: >"$results"
# stage NAME LIMIT_S COMMAND...: runs it with its log, records status and seconds.
stage() {
  local name=$1 limit=$(($2 * limit_scale))
  shift 2
  local log=$out/logs/$name.log t0 rc status ms s
  t0=$(date +%s%N)
  echo "check: $name (limit ${limit} s)"
  if declare -F "$1" >/dev/null; then  # a function of this script: run it in a fresh copy of it
    timeout --kill-after=10 "$limit" bash "$self" --stage "$@" >"$log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  fi
  rc=$?
  status=passed
  [ $rc -ne 0 ] && status=failed
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && status="timed out"
  ms=$((($(date +%s%N) - t0) / 1000000))
  s=$((ms / 1000)).$((ms % 1000 / 100))
  echo "check: $name $status in ${s} s (exit $rc)"
  [ "$status" = passed ] || tail -5 "$log" | sed 's/^/    /'
  printf '{"stage": "%s", "status": "%s", "exit": %d, "seconds": %s, "limit_s": %d}\n' \
    "$name" "$status" "$rc" "$s" "$limit" >>"$results"
}
skip() {
  echo "check: $1 skipped: $2"
  printf '{"stage": "%s", "status": "skipped", "why": "%s"}\n' "$1" "$2" >>"$results"
}

stage env 20 env_check
stage version 20 "$tandem" --version

# ctest over the packed test binaries: the [cuda] cases under the label cuda.
ctest_dir=$prefix/ctest
mkdir -p "$ctest_dir"
cat >"$ctest_dir/CTestTestfile.cmake" <<CMAKE
add_test(cuda.unit "$p/bin/tandem_tests" "[cuda]" --durations yes)
set_tests_properties(cuda.unit PROPERTIES LABELS cuda WORKING_DIRECTORY "$repo" TIMEOUT 80 SKIP_REGULAR_EXPRESSION "skipped: ")
add_test(cuda.nccl_one_rank ${mpirun[*]} -np 1 "$p/bin/tandem_mpi_tests" "[cuda]")
set_tests_properties(cuda.nccl_one_rank PROPERTIES LABELS cuda WORKING_DIRECTORY "$repo" TIMEOUT 60 SKIP_REGULAR_EXPRESSION "skipped: ")
add_test(cuda.e2e bash "$repo/tests/e2e/check_cuda.sh" "$tandem" mpirun "$repo/configs/quickstart.yaml")
set_tests_properties(cuda.e2e PROPERTIES LABELS cuda WORKING_DIRECTORY "$repo" TIMEOUT 140 ENVIRONMENT "TANDEM_PYTHON=$python" SKIP_REGULAR_EXPRESSION "skipped: ")
CMAKE
if [ -z "${CHECK_NO_CTEST:-}" ] && command -v ctest >/dev/null; then  # CHECK_NO_CTEST=1: as without it
  stage ctest_cuda 150 ctest --test-dir "$ctest_dir" -L cuda --output-on-failure
else
  stage ctest_cuda 150 cuda_tests_direct
fi

gpus=0
[ "$dry" = 0 ] && gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
stage quickstart 60 quickstart 1 quickstart1
if [ "$gpus" -ge 2 ] || [ "$dry" = 1 ]; then  # the dry run takes the 2-rank path on the CPU
  stage quickstart2 60 quickstart 2 quickstart2
else
  skip quickstart2 "fewer than 2 GPUs visible"
fi

mkdir -p "$lengths"
"$python" -c 'import random, sys
random.seed(0)  # the mid workload: sequences of 32..512 tokens (the standard library: no numpy needed)
print("\n".join(str(random.randint(32, 512)) for _ in range(int(sys.argv[1]))))' "$mid_sequences" >"$lengths/mid.txt"
if [ "$dry" = 1 ]; then echo 1024 >"$lengths/long.txt"; else echo 32768 >"$lengths/long.txt"; fi
stage bench_mid 45 "$tandem" "${bench[@]}" --lengths "$lengths/mid.txt" "${mid[@]}"
stage bench_qwen 60 "$tandem" "${bench[@]}" --lengths "$lengths/mid.txt" "${qwen[@]}"
if [ -f "$p/tokenizers/qwen2_5/tokenizer.json" ]; then
  stage real_size 100 real_size
else
  skip real_size "the pack holds no Qwen2.5 tokenizer (pack.sh found none)"
fi
stage long_32k 65 "$tandem" "${bench[@]}" --lengths "$lengths/long.txt" \
  --max-tokens-per-micro "$(cat "$lengths/long.txt")" "${mid[@]}"

"$python" - "$results" "$out" "$dry" "$(($(date +%s) - script_start))" <<'PY'
import json, os, re, sys
results, out, dry, total = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
stages = [json.loads(l) for l in open(results)]
for s in stages:  # each stage's figures: the last JSON line its log printed
    log = os.path.join(out, "logs", s["stage"] + ".log")
    if s["status"] == "skipped" or not os.path.exists(log):
        continue
    lines = open(log, errors="replace").read().splitlines()
    figs = []
    for line in lines:
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                figs.append(json.loads(line))
            except ValueError:
                pass
    keep = ("tokens_per_s", "mfu", "step_s", "peak_gpu_gib", "peak_rss_gib", "gemm2048_f32_gflops", "gemm_peak",
            "device", "dtype", "reward_first", "reward_last", "steps", "rollout_tokens_per_s",
            "train_action_tokens_per_s", "peak_rss_gib_per_rank", "peak_gpu_gib_per_rank", "load_s")
    if figs:
        s["figures"] = [{k: f[k] for k in keep if k in f} for f in figs]
    if s["stage"] == "version":
        s["version"] = lines[:3]
summary = {"dry_run": dry, "seconds": total, "passed": sum(s["status"] == "passed" for s in stages),
           "failed": [s["stage"] for s in stages if s["status"] not in ("passed", "skipped")], "stages": stages}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"check: {summary['passed']} stages passed, failed: {summary['failed'] or 'none'}; {total} s; "
      f"{os.path.join(out, 'summary.json')}")
sys.exit(1 if summary["failed"] else 0)
PY
