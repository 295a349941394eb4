// An AdamW's learning rate, set on and read from its parameter groups: tandem's optimizers run
// every group at one rate, which the schedules (lr_schedule.h) set each step.
#pragma once

#include <torch/optim/adamw.h>

namespace tandem {

inline void set_learning_rate(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

// The rate the next step runs with (the first group's; they are all set alike).
inline double learning_rate_of(torch::optim::AdamW& optimizer) {
  return static_cast<torch::optim::AdamWOptions&>(optimizer.param_groups().front().options()).lr();
}

}  // namespace tandem
