// Group statistics via index_add over dense group indices, so any id set and order works.
#include "core/grpo/advantage.h"

#include "common/error.h"

namespace tandem {

torch::Tensor grpo_advantages(const torch::Tensor& rewards, const torch::Tensor& group_ids,
                              const AdvantageOptions& options, GroupStats* stats) {
  TORCH_CHECK(rewards.dim() == 1 && group_ids.dim() == 1 && rewards.size(0) == group_ids.size(0),
              "grpo_advantages: rewards and group_ids must be 1-D of equal length");
  TORCH_CHECK(rewards.is_floating_point(), "grpo_advantages: rewards must be floating point");
  const int64_t n = rewards.size(0);
  if (n == 0) return rewards.clone();
  auto [unique, inverse] = at::_unique(group_ids.to(torch::kInt64), /*sorted=*/true, /*return_inverse=*/true);
  const int64_t g = unique.size(0);
  auto opts = rewards.options();
  torch::Tensor count = torch::zeros({g}, opts).index_add_(0, inverse, torch::ones({n}, opts));  // (G)
  torch::Tensor sum = torch::zeros({g}, opts).index_add_(0, inverse, rewards);                   // (G)
  torch::Tensor mean = (sum / count).index_select(0, inverse);                                   // (N)
  torch::Tensor centred = rewards - mean;                                                        // (N)
  torch::Tensor sq = torch::zeros({g}, opts).index_add_(0, inverse, centred * centred);          // (G)
  torch::Tensor denom = (count - 1).clamp_min(1);
  torch::Tensor std = (sq / denom).sqrt().index_select(0, inverse);  // (N)
  torch::Tensor size = count.index_select(0, inverse);               // (N)
  torch::Tensor adv = options.norm_by_std ? centred / (std + options.eps) : centred;
  adv = torch::where(size > 1, adv, torch::zeros_like(adv));
  if (options.clip) adv = adv.clamp(-*options.clip, *options.clip);
  if (stats) {
    stats->mean = mean;
    stats->std = std;
    stats->size = size.to(torch::kInt64);
  }
  return adv;
}

}  // namespace tandem
