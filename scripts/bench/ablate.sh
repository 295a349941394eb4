#!/usr/bin/env bash
# `tandem bench ablate` on the quickstart recipe (issue [8]): what each switch is worth, as
# tokens/s speedups over B paired run by run (fresh 2-rank processes, ABBA order). Conditions:
#   B  the recipe as it is
#   O  train.overlap=true              the next step's rollout overlaps this step's update
#   R  tracks.ar.algo.old_logp=reuse   old log-probs from the training forward: no old-logp pass
#   D  parallel.rollout_ranks=1        one rank only generates (disaggregated rollout)
# Every condition runs one mini-batch per step, since reuse is exact (and allowed) only then; the
# warm-start runs before step 1 and is outside the figures. Prints one JSON object; run it on a
# quiet machine. NP, RUNS, STEPS, WARMUP override; extra arguments go to bench ablate.
set -euo pipefail
cd "$(dirname "$0")/../.."
tandem=${TANDEM:-build/tandem}
exec "$tandem" bench ablate --config configs/quickstart.yaml --np "${NP:-2}" --runs "${RUNS:-4}" \
  --steps "${STEPS:-40}" --warmup-steps "${WARMUP:-10}" --set train.num_mini_batches=1 \
  --condition B= --condition O=train.overlap=true --condition R=tracks.ar.algo.old_logp=reuse \
  --condition D=parallel.rollout_ranks=1 "$@"
