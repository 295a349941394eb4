// ArSample invariants.
#include <catch2/catch.hpp>

#include "core/batch/sample.h"

using namespace tandem;

TEST_CASE("sample lengths and action counts", "[sample]") {
  ArSample s;
  s.tokens = {1, 2, 3, 4};
  s.prompt_len = 1;
  s.response_mask = {1, 0, 1};
  CHECK(s.response_len() == 3);
  CHECK(s.action_tokens() == 2);
  CHECK_NOTHROW(check_sample(s));
  s.rollout_logp = {0.1};
  CHECK_THROWS_WITH(check_sample(s), Catch::Contains("rollout_logp has 1 entries for 3"));
  s.rollout_logp.clear();
  s.prompt_len = 5;
  CHECK_THROWS_AS(check_sample(s), std::invalid_argument);
}
