// GRPO group advantages (DESIGN section 3): group-normalised (GRPO) or mean-centred (Dr.GRPO),
// over explicit group ids that need not be contiguous or equal-sized (compact fan-out).
#pragma once

#include <torch/torch.h>

#include <optional>

namespace tandem {

struct AdvantageOptions {
  bool norm_by_std = true;     // false: Dr.GRPO, A = r - mean
  double eps = 1e-6;           // added to the unbiased group std
  std::optional<double> clip;  // clamp A to [-clip, clip]
};

struct GroupStats {
  torch::Tensor mean;  // (N) the group mean, per sample
  torch::Tensor std;   // (N) the unbiased group std (0 for a group of one), per sample
  torch::Tensor size;  // (N) int64, the group size, per sample
};

// rewards (N) any float dtype; group_ids (N) int64. Returns A (N), same dtype as rewards.
// A group of one gets A = 0.
torch::Tensor grpo_advantages(const torch::Tensor& rewards, const torch::Tensor& group_ids,
                              const AdvantageOptions& options, GroupStats* stats = nullptr);

}  // namespace tandem
