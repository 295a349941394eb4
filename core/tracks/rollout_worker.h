// A rollout rank's whole job under parallel.rollout_ranks: take the start step, data cursor and
// weights from train rank 0, then generate and score this rank's share of every step's prompts
// with the newest weights StalenessProtocol allows, and send the samples over the bridge.
#pragma once

#include <cstdint>

#include "core/config/config.h"
#include "parallel/communicator.h"

namespace tandem {

struct RolloutComms {
  parallel::Communicator* bridge = nullptr;  // every rank of the job
  parallel::Communicator* group = nullptr;   // the rollout ranks (they split each step's prompts)
  parallel::Communicator* self = nullptr;    // this rank alone (its model's tp / cp groups)
};

// local_rank / local_ranks: this rank's place among the job's ranks on its node (its GPU, and its
// share of the CPUs when run.threads = 0).
void run_rollout_rank(const Config& config, const RolloutComms& comms, int64_t local_rank, int64_t local_ranks);

}  // namespace tandem
