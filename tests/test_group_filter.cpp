// drop_zero_variance_groups: flat groups go, groups with any spread stay in order, for both sample types.
#include <catch2/catch.hpp>

#include "core/batch/group_filter.h"
#include "core/batch/sample.h"

using namespace tandem;

namespace {
template <class Sample>
Sample with(int64_t group, double reward, int64_t index) {
  Sample s;
  s.group_id = group;
  s.reward = reward;
  s.index = index;
  return s;
}
}  // namespace

TEMPLATE_TEST_CASE("zero-variance groups are dropped, the rest keep their order", "[group_filter]", ArSample,
                   ImageSample) {
  std::vector<TestType> samples{with<TestType>(0, 1.0, 0), with<TestType>(1, 1.0, 1), with<TestType>(0, 1.0, 2),
                                with<TestType>(1, 0.0, 3), with<TestType>(2, 0.5, 4), with<TestType>(2, 0.5, 5),
                                with<TestType>(3, -1.0, 6)};
  CHECK(drop_zero_variance_groups(samples) == 5);  // groups 0 and 2 are flat, and group 3 has one member
  REQUIRE(samples.size() == 2);
  CHECK(samples[0].index == 1);
  CHECK(samples[1].index == 3);
  // Control: a group with any spread stays whole.
  std::vector<TestType> spread{with<TestType>(7, 0.0, 0), with<TestType>(7, 1e-12, 1)};
  CHECK(drop_zero_variance_groups(spread) == 0);
  CHECK(spread.size() == 2);
  std::vector<TestType> none;
  CHECK(drop_zero_variance_groups(none) == 0);
}
