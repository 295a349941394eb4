// Warmup reaches base_lr at the end of step warmup_steps - 1, as in most trainers (step + 1).
#include "core/grpo/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace tandem {

double learning_rate(double base_lr, LrSchedule schedule, int64_t warmup_steps, int64_t total_steps, int64_t step) {
  if (warmup_steps > 0 && step < warmup_steps) return base_lr * static_cast<double>(step + 1) / warmup_steps;
  if (schedule == LrSchedule::kConstant) return base_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  if (schedule == LrSchedule::kLinear) return base_lr * (1.0 - progress);
  return base_lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tandem
