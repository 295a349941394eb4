// RolloutBuffer: whole groups only, compact fan-out, zero-variance filtering, bad input.
#include <catch2/catch.hpp>

#include "core/rollout_buffer.h"
#include "core/sample.h"

using namespace tandem;

namespace {
ArSample with(int64_t group, double reward, int64_t index) {
  ArSample s;
  s.group_id = group;
  s.reward = reward;
  s.index = index;
  return s;
}
}  // namespace

TEST_CASE("groups are released only when complete, in group-id order", "[rollout_buffer]") {
  RolloutBuffer<ArSample> buf;
  buf.expect_group(5, 2);
  buf.expect_group(2, 3);  // compact fan-out: any size per group
  buf.add(with(5, 1.0, 0));
  buf.add(with(2, 0.0, 1));
  CHECK(buf.take_complete(false).empty());
  CHECK(buf.pending_groups() == 2);
  buf.add(with(2, 1.0, 2));
  buf.add(with(5, 0.0, 3));
  CHECK(buf.complete(5));
  CHECK_FALSE(buf.complete(2));
  auto out = buf.take_complete(false);
  REQUIRE(out.size() == 2);
  CHECK(out[0].group_id == 5);
  buf.add(with(2, 0.5, 4));
  out = buf.take_complete(false);
  REQUIRE(out.size() == 3);
  CHECK(out[2].index == 4);
  CHECK(buf.pending_groups() == 0);
}

TEST_CASE("zero-variance groups are dropped and counted on request", "[rollout_buffer]") {
  RolloutBuffer<ArSample> buf;
  buf.expect_group(0, 2);
  buf.expect_group(1, 2);
  buf.add(with(0, 1.0, 0));
  buf.add(with(0, 1.0, 1));
  buf.add(with(1, 1.0, 2));
  buf.add(with(1, 0.0, 3));
  BufferStats st;
  const auto out = buf.take_complete(true, &st);
  CHECK(out.size() == 2);
  CHECK(st.groups_dropped_zero_variance == 1);
  CHECK(st.samples_dropped == 2);
  CHECK(st.groups_released == 1);
}

TEST_CASE("bad buffer use is an error", "[rollout_buffer]") {
  RolloutBuffer<ArSample> buf;
  CHECK_THROWS_AS(buf.add(with(9, 0, 0)), std::invalid_argument);
  buf.expect_group(1, 1);
  CHECK_THROWS_AS(buf.expect_group(1, 1), std::invalid_argument);
  CHECK_THROWS_AS(buf.expect_group(2, 0), std::invalid_argument);
  buf.add(with(1, 0, 0));
  CHECK_THROWS_AS(buf.add(with(1, 0, 1)), std::invalid_argument);
}
