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

TEST_CASE("same_prompt: the same group and the same prompt tokens", "[sample]") {
  ArSample a;
  a.group_id = 3, a.tokens = {1, 2, 3, 9}, a.prompt_len = 3;
  ArSample b = a;
  b.tokens = {1, 2, 3, 7, 7};  // another response
  CHECK(same_prompt(a, b));
  b.tokens[2] = 4;
  CHECK_FALSE(same_prompt(a, b));
  b = a, b.group_id = 4;
  CHECK_FALSE(same_prompt(a, b));
  b = a, b.prompt_len = 4;
  CHECK_FALSE(same_prompt(a, b));
}

TEST_CASE("split_turns: one sample per model turn, its context the episode before it", "[sample]") {
  // prompt (3) | turn 1 (2, then an inserted end-of-turn, mask 0) | observation (3) | turn 2 (2) | end (0)
  ArSample e;
  e.tokens = {10, 11, 12, 20, 21, 99, 30, 31, 32, 40, 41, 99};
  e.prompt_len = 3;
  e.response_mask = {1, 1, 0, 0, 0, 0, 1, 1, 0};
  e.rollout_logp = {-0.1, -0.2, 0, 0, 0, 0, -0.3, -0.4, 0};
  e.reward = 1, e.advantage = 0.5, e.group_id = 2, e.index = 7, e.policy_version = 3;
  const std::vector<ArSample> t = split_turns(e);
  REQUIRE(t.size() == 2);
  CHECK(t[0].tokens == std::vector<int64_t>{10, 11, 12, 20, 21});
  CHECK(t[0].prompt_len == 3);
  CHECK(t[0].response_mask == std::vector<uint8_t>{1, 1});
  CHECK(t[0].rollout_logp == std::vector<double>{-0.1, -0.2});
  CHECK(t[1].tokens == std::vector<int64_t>{10, 11, 12, 20, 21, 99, 30, 31, 32, 40, 41});
  CHECK(t[1].prompt_len == 9);
  CHECK(t[1].response_mask == std::vector<uint8_t>{1, 1});
  CHECK(t[1].rollout_logp == std::vector<double>{-0.3, -0.4});
  for (size_t k = 0; k < t.size(); ++k) {
    CHECK_NOTHROW(check_sample(t[k]));
    CHECK(t[k].index == 7 * kTurnIdStride + static_cast<int64_t>(k));
    CHECK((t[k].reward == 1 && t[k].advantage == 0.5 && t[k].group_id == 2 && t[k].policy_version == 3));
  }
  // Every trained token of the episode is trained once, in the turn sample that ends with it.
  int64_t trained = 0;
  for (const auto& s : t) trained += s.action_tokens();
  CHECK(trained == e.action_tokens());

  SECTION("an episode with no trained token stays one sample") {
    ArSample none = e;
    none.response_mask.assign(none.response_mask.size(), 0);
    const auto one = split_turns(none);
    REQUIRE(one.size() == 1);
    CHECK(one[0].tokens == none.tokens);
    CHECK(one[0].index == 7 * kTurnIdStride);
  }
  SECTION("a last turn cut by the cap (no end token) and no rollout log-probs") {
    ArSample cut = e;
    cut.tokens.pop_back(), cut.response_mask.pop_back(), cut.rollout_logp.clear();
    const auto two = split_turns(cut);
    REQUIRE(two.size() == 2);
    CHECK(two[1].tokens.size() == 11);
    CHECK(two[1].rollout_logp.empty());
  }
}
