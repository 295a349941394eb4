// Up-front optimizer state: the same zeros LibTorch's AdamW::step creates on its first call.
#include "core/grpo/adamw_state.h"

#include <torch/optim/adamw.h>

#include "core/grpo/adamw_8bit.h"

namespace tandem {

void allocate_optimizer_state(torch::optim::Optimizer& optimizer) {
  if (auto* eight = dynamic_cast<AdamW8bit*>(&optimizer)) {
    eight->allocate_state();
    return;
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer) == nullptr) return;
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (const torch::Tensor& p : group.params()) {
      auto& slot = optimizer.state()[p.unsafeGetTensorImpl()];
      if (slot) continue;
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(0);
      state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      if (options.amsgrad()) state->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      slot = std::move(state);
    }
  }
}

}  // namespace tandem
