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
  bool finite = true;  // every rank's loss and every gradient finite (agreed over the group and tp)
  double norm = 0;     // L2 norm of the gradients (over tp: the whole model's), accumulated in float64
};

// Tensor parallelism for check_gradients: the tp group and, per parameter, whether it is sharded
// over it (each tp rank holds other values, whose squares add up across tp) or replicated (the same
// on every tp rank: counted once). Null tp or a group of one: nothing is sharded.
struct TpShards {
  Communicator* tp = nullptr;
  std::vector<bool> sharded;  // parallel to the parameters
  bool active() const { return tp != nullptr && tp->size() > 1; }
};

// The squared norm of every gradient, summed on the gradients' device: a () float64 tensor that is
// non-finite iff some gradient is (float32 squares cannot overflow float64).
torch::Tensor gradients_sq_norm(const std::vector<torch::Tensor>& params);

// Agrees over `comm` whether the step is finite (local_loss_finite and the gradients on each rank),
// with a flag on the communicator's device, and reads it back with the norm in one copy. Under tp
// the sharded parameters' squared norm is first summed over tp (one more collective), so every tp
// rank gets the whole model's norm, and a non-finite shard anywhere makes it non-finite everywhere.
GradientCheck check_gradients(const std::vector<torch::Tensor>& params, bool local_loss_finite, Communicator& comm,
                              const TpShards& tp = {});

}  // namespace tandem::parallel
