#!/usr/bin/env bash
# The quickstart: installs dependencies, builds, then trains the quickstart recipe (GRPO on a
# tiny Llama-style model reversing digit strings) on 2 ranks, and plots its curves.
# Rerunning continues the same run (--resume auto); delete runs/quickstart to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
np=${TANDEM_NP:-2}
start=$(date +%s)
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
  build/tandem train --config configs/quickstart.yaml --resume auto "$@"
echo "quickstart: training took $(( $(date +%s) - start )) s wall on $np ranks"
run=runs/quickstart
/usr/bin/python3 scripts/plot_metrics.py "$run" "$run/metrics.png"
/usr/bin/python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l)["ar/reward/mean"] for l in open(sys.argv[1]) if l.strip()]
first, last = sum(r[:20]) / min(20, len(r)), sum(r[-20:]) / min(20, len(r))
print(f"quickstart: mean reward first 20 steps {first:.3f}, last 20 steps {last:.3f} ({last / max(first, 1e-9):.1f}x)")
PY
echo "quickstart: try  build/tandem generate --checkpoint $run --prompt '1234>' --temperature 0"
