#!/usr/bin/env bash
# Long responses ([19]): one GRPO training step on one packed sequence of L tokens (its first half
# its prompt), L = 2K..32K, on THREADS intra-op threads (default 2) of one process, the mid model
# (hidden 512, 4 layers, 8 heads, 4 kv heads, vocab 32000, float32), `--max-tokens-per-micro L`:
#   materialised: the (L, L) scores held (the float64 reference path), up to MATERIALISED_MAX
#                 tokens (default 4096; 8192 needs more than 24 GiB)
#   fused:        LibTorch's flash attention kernel, recompute none and layers
# One JSON line per run (peak_rss_gib is the process's peak resident memory), then a table.
# Then the short-sequence check: the mid workload of scripts/bench/train.sh (64 sequences of
# 32..512 tokens) and 16 sequences of 1024..2048, materialised and fused alternating (ABAB) in
# separate processes, with the paired tokens/s ratios (SHORT=0 skips it). ~40 min on 2 cores (32K:
# ~25 min); LENGTHS="4096 32768" SHORT=0 measures the goals' pair alone (~15 min).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${TANDEM_PYTHON:=$PWD/.venv/bin/python}"  # the project's virtual environment (scripts/setup.sh)
tandem=${TANDEM:-build/tandem}
threads=${THREADS:-2}
lengths=${LENGTHS-2048 4096 8192 16384 32768}  # LENGTHS="": the short-sequence check only
materialised_max=${MATERIALISED_MAX:-4096}
dir=build/bench
mkdir -p "$dir"
model=(--hidden 512 --layers 4 --heads 8 --kv-heads 4 --vocab 32000 --threads "$threads")
out="$dir/long.jsonl"
: >"$out"
for len in $lengths; do
  echo "$len" >"$dir/long_$len.txt"
  # One warm-up step at every length: without it a 32K step also pays its first touch of ~6 GiB
  # (1.5 M page faults, 13 s of system time in a 108 s step), which the 4K row's warm-up excludes.
  steps=(--steps 2 --warmup 1)
  [ "$len" -gt 8192 ] && steps=(--steps 1 --warmup 1)  # a 32K step takes minutes
  for variant in "materialised none" "fused none" "fused layers"; do
    read -r attention recompute <<<"$variant"
    [ "$attention" = materialised ] && [ "$len" -gt "$materialised_max" ] && continue
    line=$("$tandem" bench train --lengths "$dir/long_$len.txt" "${model[@]}" --max-tokens-per-micro "$len" \
      --attention "$attention" --recompute "$recompute" "${steps[@]}")
    echo "L=$len $attention $recompute: $line"
    echo "{\"L\": $len, \"run\": $line}" >>"$out"
  done
done
"$TANDEM_PYTHON" - "$out" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| L | attention | recompute | peak RSS (GiB) | tokens/s | step (s) | MFU | GEMM peak (GFLOP/s) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    x = r["run"]
    print(f"| {r['L']:,} | {x['attention']} | {x['recompute']} | {x['peak_rss_gib']:.2f} | "
          f"{x['tokens_per_s']:.0f} | {x['step_s']:.1f} | {x['mfu']:.2f} | {x['gemm2048_f32_gflops']:.0f} |")
# [19]'s goals from this run's rows: 32K against 4K, raw and each divided by its run's GEMM peak.
fused = {(r["L"], r["run"]["recompute"]): r["run"] for r in rows if r["run"]["attention"] == "fused"}
for rec in ("none", "layers"):
    a, b = fused.get((4096, rec)), fused.get((32768, rec))
    if a and b:
        per_peak = (b["tokens_per_s"] / b["gemm2048_f32_gflops"]) / (a["tokens_per_s"] / a["gemm2048_f32_gflops"])
        print(f"32K / 4K, fused, recompute {rec}: tokens/s {b['tokens_per_s'] / a['tokens_per_s']:.3f} "
              f"({per_peak:.3f} per GEMM peak), peak RSS {b['peak_rss_gib'] / a['peak_rss_gib']:.2f}x")
EOF
[ "${SHORT:-1}" = 0 ] && exit 0  # SHORT=0: the lengths only
# Short sequences: fused against materialised, paired round by round.
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/mid.txt" 64 --uniform 32 512 >/dev/null
"$TANDEM_PYTHON" scripts/bench/make_lengths.py "$dir/mid2k.txt" 16 --uniform 1024 2048 >/dev/null
for workload in mid mid2k; do
  for round in 1 2; do
    m=$("$tandem" bench train --lengths "$dir/$workload.txt" "${model[@]}" --attention materialised --steps 2 --warmup 1)
    f=$("$tandem" bench train --lengths "$dir/$workload.txt" "${model[@]}" --attention fused --steps 2 --warmup 1)
    ratio=$("$TANDEM_PYTHON" -c 'import json, sys
m, f = (json.loads(a) for a in sys.argv[1:])
print("%.3f (materialised %.0f, fused %.0f tok/s; peak RSS %.2f vs %.2f GiB)" % (f["tokens_per_s"] / m["tokens_per_s"],
      m["tokens_per_s"], f["tokens_per_s"], m["peak_rss_gib"], f["peak_rss_gib"]))' "$m" "$f")
    echo "$workload round $round: fused / materialised tokens/s = $ratio"
  done
done
