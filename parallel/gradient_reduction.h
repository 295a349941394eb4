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

// What the update needs to know of the reduced gradients, from one collective and one copy to the
// host per step whatever the number of parameters (on CUDA, one host sync).
struct GradientCheck {
  bool finite = true;  // every rank's loss and every gradient finite (agreed over the group)
  double norm = 0;     // L2 norm of this rank's gradients, accumulated in float64
};

// The squared norm of every gradient, summed on the gradients' device: a () float64 tensor that is
// non-finite iff some gradient is (float32 squares cannot overflow float64).
torch::Tensor gradients_sq_norm(const std::vector<torch::Tensor>& params);

// Agrees over `comm` whether the step is finite (local_loss_finite and the gradients on each rank),
// with a flag on the communicator's device, and reads it back with the norm in one copy.
GradientCheck check_gradients(const std::vector<torch::Tensor>& params, bool local_loss_finite, Communicator& comm);

}  // namespace tandem::parallel
