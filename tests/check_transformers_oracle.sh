#!/usr/bin/env bash
# transformers as the oracle for the model: scripts/fixtures/hf_oracle.py writes random-init Qwen2, Qwen3, Mistral and
# Llama directories with save_pretrained (tied embeddings, q/k/v biases, llama3 and linear rope
# scaling, head_dim != hidden / heads, sliding windows shorter than the sequences; float32 and bf16 files,
# one file and several shards) and the
# logits transformers computes; `tandem_tests "[.hf_oracle]"` loads each directory and compares.
# Usage: check_transformers_oracle.sh TESTS_BIN REPO_ROOT
set -euo pipefail
tests_bin=$1
root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$TANDEM_PYTHON" "$root/scripts/fixtures/hf_oracle.py" models "$out"
TANDEM_HF_ORACLE="$out/manifest.json" "$tests_bin" "[.hf_oracle]"
# Control: the Mistral directory with its sliding window removed from config.json must disagree with
# transformers' windowed logits (its sequences outgrow the window), so the window is what the test sees.
"$TANDEM_PYTHON" - "$out" <<'PY'
import json, shutil, sys
from pathlib import Path
out = Path(sys.argv[1])
entry = next(e for e in json.loads((out / "manifest.json").read_text()) if e["name"] == "mistral_window4")
ctl = out / "control_no_window"
shutil.copytree(entry["dir"], ctl)
cfg = json.loads((ctl / "config.json").read_text())
cfg["sliding_window"] = None
(ctl / "config.json").write_text(json.dumps(cfg))
entry.update(name="control_no_window", dir=str(ctl))
(out / "control.json").write_text(json.dumps([entry]))
PY
if TANDEM_HF_ORACLE="$out/control.json" "$tests_bin" "[.hf_oracle]" >"$out/control.log" 2>&1; then
  echo "FAIL control: Mistral without its sliding window still matched transformers' windowed logits"
  exit 1
fi
echo "ok   control: Mistral without its sliding window differs from transformers' windowed logits"
