// The sample exchange after a rollout (DESIGN section 4): ranks share only sample costs, all
// compute the same schedule, then each sample moves to its scheduled dp rank in one
// all-to-all of serialized records. Positions in the directory (samples sorted by their global
// `index`) are the schedule's sample indices, so the schedule does not depend on which rank
// produced what.
#pragma once

#include <cstdint>
#include <vector>

#include "core/batch/sample.h"
#include "core/batch/schedule.h"
#include "parallel/communicator.h"

namespace tandem {

struct RolloutDirectory {
  std::vector<int64_t> ids;               // global sample ids (ArSample::index), ascending
  std::vector<SampleCost> costs;          // costs[p] of the sample with id ids[p]
  int64_t position_of(int64_t id) const;  // throws if absent
};

SampleCost cost_of(const ArSample& s);
// cost_of for each sample, except that a group whose members' prompts differ shares nothing: an
// environment need not greet a group's members alike (the protocol asks for the same row and
// seed), and collate_packed lays unequal prompts out apart, so counting them once would let a
// micro run past max_tokens_per_micro.
std::vector<SampleCost> costs_of(const std::vector<ArSample>& samples);

// An image sample costs its patch count in a token budget and trains `train_timesteps`
// transitions (its share of N_tok).
struct ImageCost {
  int64_t patches = 0;
  int64_t train_timesteps = 0;
};

// Every rank's samples' costs (one row per sample: id and cost), gathered over `dp`; ids must be
// unique across ranks.
RolloutDirectory gather_directory(const std::vector<int64_t>& ids, const std::vector<SampleCost>& costs,
                                  parallel::Communicator& dp);
RolloutDirectory gather_directory(const std::vector<ArSample>& local, parallel::Communicator& dp);

// Destination dp rank of every directory position under `schedule`.
std::vector<int64_t> destinations(const Schedule& schedule, size_t num_samples);

// Byte encodings of samples (the AR one is also the rollout dump format).
std::vector<uint8_t> serialize_samples(const std::vector<const ArSample*>& samples);
std::vector<ArSample> deserialize_samples(const uint8_t* data, size_t size);
std::vector<uint8_t> serialize_samples(const std::vector<const ImageSample*>& samples);
std::vector<ImageSample> deserialize_image_samples(const uint8_t* data, size_t size);

// Sends each local sample to destination[position_of(index)]; returns the samples this rank
// received, sorted by id.
std::vector<ArSample> exchange_samples(const std::vector<ArSample>& local, const RolloutDirectory& directory,
                                       const std::vector<int64_t>& destination, parallel::Communicator& dp);
std::vector<ImageSample> exchange_samples(const std::vector<ImageSample>& local, const RolloutDirectory& directory,
                                          const std::vector<int64_t>& destination, parallel::Communicator& dp);

}  // namespace tandem
