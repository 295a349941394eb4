// Learning-rate schedule shapes.
#include <catch2/catch.hpp>

#include "core/grpo/lr_schedule.h"

using namespace tandem;

TEST_CASE("warmup then constant / linear / cosine", "[lr_schedule]") {
  CHECK(learning_rate(1.0, LrSchedule::kConstant, 4, 100, 0) == 0.25);
  CHECK(learning_rate(1.0, LrSchedule::kConstant, 4, 100, 3) == 1.0);
  CHECK(learning_rate(1.0, LrSchedule::kConstant, 4, 100, 99) == 1.0);
  CHECK(learning_rate(1.0, LrSchedule::kLinear, 0, 10, 0) == 1.0);
  CHECK(learning_rate(1.0, LrSchedule::kLinear, 0, 10, 5) == Approx(0.5));
  CHECK(learning_rate(1.0, LrSchedule::kCosine, 0, 10, 5) == Approx(0.5));
  CHECK(learning_rate(1.0, LrSchedule::kCosine, 2, 12, 2) == Approx(1.0));
  CHECK(learning_rate(1.0, LrSchedule::kCosine, 0, 10, 10) == Approx(0.0).margin(1e-15));
}
