#!/usr/bin/env bash
# transformers as the oracle for the model: scripts/fixtures/hf_oracle.py writes random-init Qwen2, Qwen3, Mistral,
# Gemma 3 and Llama directories with save_pretrained (tied embeddings, q/k/v biases, llama3 and linear rope
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
# Controls: a directory whose config.json is changed in one feature must disagree with transformers'
# logits of the original, so that feature is what the test sees:
#   no_window       Mistral without its sliding window (its sequences outgrow it)
#   gemma_all_full  Gemma 3 with its local layer made global (no window, the global RoPE base)
#   gemma_one_base  Gemma 3 with its local layers on the global RoPE base
for control in no_window gemma_all_full gemma_one_base; do
  "$TANDEM_PYTHON" - "$out" "$control" <<'PY'
import json, shutil, sys
from pathlib import Path
out, control = Path(sys.argv[1]), sys.argv[2]
source = "mistral_window4" if control == "no_window" else "gemma3_window4"
entry = next(e for e in json.loads((out / "manifest.json").read_text()) if e["name"] == source)
ctl = out / f"control_{control}"
shutil.copytree(entry["dir"], ctl)
cfg = json.loads((ctl / "config.json").read_text())
if control == "no_window":
    cfg["sliding_window"] = None
elif control == "gemma_all_full":
    cfg["layer_types"] = ["full_attention"] * len(cfg["layer_types"])
else:
    cfg["rope_parameters"]["sliding_attention"]["rope_theta"] = cfg["rope_parameters"]["full_attention"]["rope_theta"]
(ctl / "config.json").write_text(json.dumps(cfg))
entry.update(name=f"control_{control}", dir=str(ctl))
(out / "control.json").write_text(json.dumps([entry]))
PY
  if TANDEM_HF_ORACLE="$out/control.json" "$tests_bin" "[.hf_oracle]" >"$out/control.log" 2>&1; then
    echo "FAIL control $control: the changed config.json still matched transformers' logits of the original"
    exit 1
  fi
  echo "ok   control $control: differs from transformers' logits"
done
