// An optimizer's learning rate, set on and read from its parameter groups: tandem's optimizers run
// every group at one rate, which the schedules (lr_schedule.h) set each step. Works for AdamW and
// AdamW8bit alike (both keep torch::optim::AdamWOptions per group).
#pragma once

#include <torch/optim/optimizer.h>

namespace tandem {

inline void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// The rate the next step runs with (the first group's; they are all set alike).
inline double learning_rate_of(torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().front().options().get_lr();
}

}  // namespace tandem
