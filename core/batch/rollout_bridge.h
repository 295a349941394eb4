// Disaggregated rollout (parallel.rollout_ranks): what crosses between rollout ranks and train
// ranks, and when. Every crossing is a collective over the bridge (the whole job), so both sides
// must call them in one order; StalenessProtocol is that order, as pure functions of the step.
//
// Rollout ranks generate step s with weights of version >= s - K (K = rollout.max_staleness).
// K = 0: the newest weights go out after each update and step s waits for them (the colocated
// numbers). K >= 1: rollout runs ahead; the weights go out once step t's samples are in, before
// t trains, so step t + 1 samples with version t. Lags are s - start for the first K steps after
// a (re)start and 1 after that: a lockstep exchange cannot keep rollout more than one update
// ahead (that would take non-blocking weight transfers; README, "Hybrid-async rollout").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/batch/sample.h"
#include "parallel/communicator.h"

namespace tandem {

struct StalenessProtocol {
  int64_t start = 0;          // first step of this process (the resumed step)
  int64_t steps = 0;          // run.steps
  int64_t max_staleness = 0;  // K

  // Train side: weights (version t) go out right after step t's samples arrive.
  bool publish_after_receive(int64_t t) const;
  // Train side: weights (version t + 1) go out after step t's updates.
  bool publish_after_update(int64_t t) const;
  // Rollout side: new weights must arrive before step s is generated.
  bool receive_before_generate(int64_t s) const;
};

// Every rank contributes its samples (train ranks none); every rank gets all of them.
std::vector<ArSample> bridge_samples(parallel::Communicator& bridge, const std::vector<ArSample>& mine);

// Bridge rank 0 sends `params` (and `version`); other ranks receive them into `params` when
// `apply` (rollout ranks) or discard them (the other train ranks, which hold the same weights).
void bridge_weights(parallel::Communicator& bridge, const std::vector<torch::Tensor>& params, int64_t& version,
                    bool apply);

// Bridge rank 0 sends a string (the start step and data cursor, as JSON); returns it everywhere.
std::string bridge_string(parallel::Communicator& bridge, const std::string& text);

// Drops samples more than max_staleness versions behind `step`; lag_histogram[k] counts the
// kept samples k versions behind (size max_staleness + 1). Returns the number dropped.
int64_t drop_stale(std::vector<ArSample>& samples, int64_t step, int64_t max_staleness,
                   std::vector<int64_t>& lag_histogram);

}  // namespace tandem
