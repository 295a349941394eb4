// The sample exchange after a rollout (DESIGN section 4): ranks share only sample costs, all
// compute the same schedule, then each sample moves to its scheduled dp rank in one
// all-to-all of serialized records. Positions in the directory (samples sorted by their global
// `index`) are the schedule's sample indices, so the schedule does not depend on which rank
// produced what.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sample.h"
#include "core/schedule.h"
#include "parallel/communicator.h"

namespace tandem {

struct RolloutDirectory {
  std::vector<int64_t> ids;        // global sample ids (ArSample::index), ascending
  std::vector<SampleCost> costs;   // costs[p] of the sample with id ids[p]
  int64_t position_of(int64_t id) const;  // throws if absent
};

SampleCost cost_of(const ArSample& s);

// Every rank's samples' costs, gathered over `dp`; ids must be unique across ranks.
RolloutDirectory gather_directory(const std::vector<ArSample>& local, parallel::Communicator& dp);

// Destination dp rank of every directory position under `schedule`.
std::vector<int64_t> destinations(const Schedule& schedule, size_t num_samples);

// Sends each local sample to destination[position_of(index)]; returns the samples this rank
// received, sorted by id.
std::vector<ArSample> exchange_samples(const std::vector<ArSample>& local, const RolloutDirectory& directory,
                                       const std::vector<int64_t>& destination, parallel::Communicator& dp);

// Byte encoding of samples (also used by rollout dumps).
std::vector<uint8_t> serialize_samples(const std::vector<const ArSample*>& samples);
std::vector<ArSample> deserialize_samples(const uint8_t* data, size_t size);

}  // namespace tandem
