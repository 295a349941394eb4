// The schedule's view of AR samples (core/batch/exchange.h): what each costs in a token budget.
// The exchange itself runs on real ranks in tests/mpi/test_invariance.cpp.
#include <catch2/catch.hpp>

#include "core/batch/exchange.h"
#include "core/batch/schedule.h"

using namespace tandem;

namespace {

ArSample sample(int64_t group, std::vector<int64_t> prompt, int64_t response) {
  ArSample s;
  s.group_id = group;
  s.prompt_len = static_cast<int64_t>(prompt.size());
  s.tokens = std::move(prompt);
  for (int64_t i = 0; i < response; ++i) s.tokens.push_back(100 + i);
  s.response_mask.assign(static_cast<size_t>(response), 1);
  return s;
}

}  // namespace

TEST_CASE("a group shares its prompt in the budget only when its members' prompts are equal", "[exchange]") {
  // Group 0: one prompt of 4 tokens (3 shared rows each). Group 1: an environment that greeted its
  // members differently: nothing shared, as collate_packed lays both prompts out.
  const std::vector<ArSample> samples{sample(0, {1, 2, 3, 4}, 2), sample(1, {5, 6, 7}, 1), sample(0, {1, 2, 3, 4}, 3),
                                      sample(1, {5, 6, 8}, 2)};
  const std::vector<SampleCost> costs = costs_of(samples);
  REQUIRE(costs.size() == 4);
  CHECK(costs[0].shared_tokens == 3);
  CHECK(costs[2].shared_tokens == 3);
  CHECK(costs[1].shared_tokens == 0);
  CHECK(costs[3].shared_tokens == 0);
  CHECK(cost_of(samples[3]).shared_tokens == 2);  // control: alone, a sample claims its prompt
  for (size_t i = 0; i < samples.size(); ++i) {
    CHECK(costs[i].tokens == samples[i].length());
    CHECK(costs[i].group_id == samples[i].group_id);
  }
  // The micro budget: group 1's two samples cost 4 + 5 = 9 tokens, not 9 - 2.
  CHECK(micro_tokens(costs, {1, 3}, true) == 9);
  CHECK(micro_tokens(costs, {0, 2}, true) == 6 + 7 - 3);
}
