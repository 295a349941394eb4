// Learning-rate schedule: linear warmup from 0, then constant, cosine or linear decay to 0 at the
// last step. A pure function of the step, so a resumed run needs no schedule state.
#pragma once

#include <cstdint>

#include "core/config/enums.h"

namespace tandem {

// step is 0-based (the step being trained); total_steps = run.steps.
double learning_rate(double base_lr, LrSchedule schedule, int64_t warmup_steps, int64_t total_steps, int64_t step);

}  // namespace tandem
