// Gradient and scalar reductions for the update: gradients summed over a group in flat buckets
// (one collective per bucket, not per parameter), and an agreement on whether a step is finite.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"

namespace tandem::parallel {

constexpr int64_t kDefaultBucketBytes = 32LL << 20;

// Sums p.grad() over `comm` for every parameter. A parameter without a gradient (a rank that ran
// no micro) gets a zero gradient first, so every rank joins every bucket.
void all_reduce_gradients(const std::vector<torch::Tensor>& params, Communicator& comm,
                          int64_t bucket_bytes = kDefaultBucketBytes);

// True on every rank iff `local_finite` is true on every rank.
bool all_ranks_finite(bool local_finite, Communicator& comm);

// True iff every gradient of `params` is finite (local check).
bool gradients_finite(const std::vector<torch::Tensor>& params);

}  // namespace tandem::parallel
