// Whole-mini-batch loss denominators (DESIGN section 3): the schedule computes them once per
// mini-batch and every micro's loss divides by them, never by its own counts.
#pragma once

namespace tandem {

struct LossDenominators {
  double n_tok = 0;   // action tokens in the mini-batch on all dp ranks
  double n_seq = 0;   // sequences with at least one action token
  double l_norm = 1;  // seq-mean-token-sum-norm length constant
};

}  // namespace tandem
