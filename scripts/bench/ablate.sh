#!/usr/bin/env bash
# `tandem bench ablate` on the quickstart recipe (issue [8]): what each switch is worth, as
# tokens/s speedups over B paired run by run (fresh 2-rank processes, ABBA order). Conditions:
#   B  the recipe as it is (2 mini-batches per step)
#   O  train.overlap=true              mini-batch c's old log-probs run on a second thread while
#                                      mini-batch c+1's groups are sampled
#   M  train.num_mini_batches=1        one update per step (R's precondition, on its own)
#   R  M + tracks.ar.algo.old_logp=reuse   no old-log-prob pass (exact only with one mini-batch);
#                                      its own effect is R over M
#   D  parallel.rollout_ranks=1        one rank only generates, one only trains (staleness 0)
#   S  D + max_staleness=2, tis_cap=2  rollout runs ahead of training (one version behind)
# The warm-start runs before step 1 and is outside the figures. Prints one JSON object; run it on
# a quiet machine. NP, RUNS, STEPS, WARMUP override; extra arguments go to bench ablate.
set -euo pipefail
cd "$(dirname "$0")/../.."
tandem=${TANDEM:-build/tandem}
exec "$tandem" bench ablate --config configs/quickstart.yaml --np "${NP:-2}" --runs "${RUNS:-2}" \
  --steps "${STEPS:-40}" --warmup-steps "${WARMUP:-10}" \
  --condition B= --condition O=train.overlap=true --condition M=train.num_mini_batches=1 \
  --condition "R=train.num_mini_batches=1;tracks.ar.algo.old_logp=reuse" \
  --condition D=parallel.rollout_ranks=1 \
  --condition "S=parallel.rollout_ranks=1;tracks.ar.rollout.max_staleness=2;tracks.ar.algo.tis_cap=2.0" "$@"
