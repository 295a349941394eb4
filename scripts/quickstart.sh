#!/usr/bin/env bash
# The quickstart: installs dependencies, builds, then trains the quickstart recipe (GRPO on a
# tiny Llama-style model reversing digit strings) on 2 ranks, and plots its curves.
# Rerunning continues the same run (--resume auto); delete runs/quickstart to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
np=${TANDEM_NP:-2}
python=${TANDEM_VENV:-.venv}/bin/python
start=$(date +%s)
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
  build/tandem train --config configs/quickstart.yaml --resume auto "$@"
echo "quickstart: training took $(( $(date +%s) - start )) s wall on $np ranks"
run=runs/quickstart
"$python" scripts/plot_metrics.py "$run" "$run/metrics.png"
"$python" - "$run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = [x["ar/reward/mean"] for x in rows if "ar/reward/mean" in x]  # (the step-0 line holds only the eval)
first, last = sum(r[:20]) / min(20, len(r)), sum(r[-20:]) / min(20, len(r))
print(f"quickstart: mean reward first 20 steps {first:.3f}, last 20 steps {last:.3f} ({last / max(first, 1e-9):.1f}x)")
ev = [(x["step"], x["ar/eval/pass@1_greedy"], x["ar/eval/pass@4"]) for x in rows if "ar/eval/pass@4" in x]
if ev:
    print("quickstart: held-out greedy pass@1 / pass@4: " + ", ".join(f"step {s} {g:.3f} / {p:.3f}" for s, g, p in ev))
eval_s = sum(x.get("ar/eval/time_s", 0) for x in rows)
step_s = sum(x.get("time/step_s", 0) for x in rows)
print(f"quickstart: evaluation took {eval_s:.1f} s, {100 * eval_s / max(step_s + eval_s, 1e-9):.1f}% of step + eval time")
PY
echo "quickstart: try  build/tandem generate --checkpoint $run --prompt '1234>' --temperature 0"
