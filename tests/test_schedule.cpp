// The schedule: conservation, budgets, determinism, keep_groups, denominators, edge cases.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "common/error.h"
#include "core/batch/schedule.h"

using namespace tandem;

namespace {

std::vector<SampleCost> long_tail(size_t n, int64_t group, uint64_t seed, int64_t max_len = 16384) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(6.5, 1.3);
  std::vector<SampleCost> s;
  for (size_t i = 0; i < n; ++i) {
    const int64_t len = std::clamp<int64_t>(static_cast<int64_t>(dist(rng)), 16, max_len);
    const int64_t action = (i % 7 == 3) ? 0 : len / 2;  // some empty responses
    s.push_back({len, action, static_cast<int64_t>(i) / group});
  }
  return s;
}

// Every sample exactly once per schedule, in exactly one mini; denominators add up.
void check_schedule(const Schedule& sch, const std::vector<SampleCost>& samples, const ScheduleOptions& o) {
  std::vector<int> seen(samples.size(), 0);
  REQUIRE(static_cast<int64_t>(sch.minis.size()) == o.num_mini_batches);
  for (const auto& mini : sch.minis) {
    REQUIRE(static_cast<int64_t>(mini.ranks.size()) == o.dp);
    double n_tok = 0, n_seq = 0;
    for (const auto& rank : mini.ranks) {
      for (const auto& m : rank.micros) {
        CHECK_FALSE(m.samples.empty());
        if (o.max_tokens_per_micro)
          CHECK(m.tokens <= *o.max_tokens_per_micro);
        else
          CHECK(static_cast<int64_t>(m.samples.size()) <= *o.micro_batch_size);
        int64_t tokens = 0, action = 0;
        for (int64_t i : m.samples) {
          seen.at(i)++;
          tokens += samples[i].tokens;
          action += samples[i].action_tokens;
        }
        CHECK(m.tokens == tokens);
        CHECK(m.action_tokens == action);
        n_tok += m.action_tokens;
        n_seq += m.action_seqs;
        CHECK(m.denominators.n_tok == mini.denominators.n_tok);
        CHECK(m.denominators.n_seq == mini.denominators.n_seq);
      }
    }
    CHECK(n_tok == mini.denominators.n_tok);
    CHECK(n_seq == mini.denominators.n_seq);
  }
  for (size_t i = 0; i < samples.size(); ++i) CHECK(seen[i] == 1);
}

}  // namespace

TEST_CASE("schedule conserves samples and respects the token budget", "[schedule]") {
  const auto samples = long_tail(512, 8, 1);
  for (int64_t dp : {1, 2, 8}) {
    for (int64_t minis : {1, 2, 3}) {
      ScheduleOptions o;
      o.dp = dp;
      o.num_mini_batches = minis;
      o.max_tokens_per_micro = 32768;
      check_schedule(build_schedule(samples, o), samples, o);
      o.max_tokens_per_micro.reset();
      o.micro_batch_size = 5;
      check_schedule(build_schedule(samples, o), samples, o);
    }
  }
}

TEST_CASE("schedule is deterministic", "[schedule]") {
  const auto samples = long_tail(300, 4, 2);
  ScheduleOptions o;
  o.dp = 4;
  o.max_tokens_per_micro = 20000;
  const Schedule a = build_schedule(samples, o), b = build_schedule(samples, o);
  for (size_t m = 0; m < a.minis.size(); ++m)
    for (int64_t r = 0; r < o.dp; ++r) {
      CHECK(a.rank_samples(m, r) == b.rank_samples(m, r));
      REQUIRE(a.minis[m].ranks[r].micros.size() == b.minis[m].ranks[r].micros.size());
      for (size_t k = 0; k < a.minis[m].ranks[r].micros.size(); ++k)
        CHECK(a.minis[m].ranks[r].micros[k].samples == b.minis[m].ranks[r].micros[k].samples);
    }
}

TEST_CASE("keep_groups never splits a group across ranks or minis", "[schedule]") {
  const auto samples = long_tail(400, 8, 3);
  ScheduleOptions o;
  o.dp = 4;
  o.num_mini_batches = 2;
  o.micro_batch_size = 3;
  o.keep_groups = true;
  const Schedule s = build_schedule(samples, o);
  check_schedule(s, samples, o);
  std::map<int64_t, std::set<std::pair<size_t, int64_t>>> where;
  for (size_t m = 0; m < s.minis.size(); ++m)
    for (int64_t r = 0; r < o.dp; ++r)
      for (int64_t i : s.rank_samples(m, r)) where[samples[i].group_id].insert({m, r});
  for (const auto& [g, places] : where) CHECK(places.size() == 1);
}

TEST_CASE("balance across ranks is tight on long-tail lengths", "[schedule]") {
  const auto samples = long_tail(4096, 8, 4);
  ScheduleOptions o;
  o.dp = 8;
  o.max_tokens_per_micro = 32768;
  const Schedule s = build_schedule(samples, o);
  const ScheduleStats st = schedule_stats(s, samples, o);
  CHECK(st.balance < 1.0001);
  CHECK(st.max_micro_tokens <= 32768);
  CHECK(st.micros == st.micros_lower_bound);
  ScheduleOptions kk = o;
  kk.refine_balance = false;
  CHECK(st.balance <= schedule_stats(build_schedule(samples, kk), samples, kk).balance);
}

TEST_CASE("compact groups: any number of samples per group id", "[schedule]") {
  std::vector<SampleCost> samples{{10, 5, 0}, {12, 6, 0}, {8, 4, 0}, {9, 0, 1}, {30, 20, 2}};
  ScheduleOptions o;
  o.dp = 2;
  o.micro_batch_size = 2;
  o.keep_groups = true;
  const Schedule s = build_schedule(samples, o);
  check_schedule(s, samples, o);
  CHECK(s.minis[0].denominators.n_tok == 35);
  CHECK(s.minis[0].denominators.n_seq == 4);  // the empty response does not count
}

TEST_CASE("empty and tiny rollouts produce well-formed schedules", "[schedule]") {
  ScheduleOptions o;
  o.dp = 4;
  o.num_mini_batches = 2;
  o.micro_batch_size = 2;
  const Schedule empty = build_schedule({}, o);
  REQUIRE(empty.minis.size() == 2);
  for (const auto& m : empty.minis) {
    CHECK(m.ranks.size() == 4);
    CHECK(m.denominators.n_tok == 0);
  }
  const std::vector<SampleCost> one{{5, 2, 0}};
  check_schedule(build_schedule(one, o), one, o);
}

TEST_CASE("a sample over the budget and bad options are errors", "[schedule]") {
  ScheduleOptions o;
  o.max_tokens_per_micro = 100;
  CHECK_THROWS_WITH(build_schedule({{101, 50, 0}}, o), Catch::Contains("over max_tokens_per_micro 100"));
  ScheduleOptions none;
  none.micro_batch_size.reset();
  CHECK_THROWS_AS(build_schedule({{1, 1, 0}}, none), UserError);
  ScheduleOptions bad_dp;
  bad_dp.dp = 0;
  bad_dp.micro_batch_size = 1;
  CHECK_THROWS_AS(build_schedule({{1, 1, 0}}, bad_dp), UserError);
}

TEST_CASE("the workload cost model weights long sequences quadratically", "[schedule]") {
  ScheduleOptions o;
  o.cost_model = CostModel::kWorkload;
  o.attn_coef = 0.01;
  CHECK(sample_cost({100, 0, 0}, o) == Approx(200.0));
  o.cost_model = CostModel::kTokens;
  CHECK(sample_cost({100, 0, 0}, o) == 100.0);
}

TEST_CASE("share_prompts: a group's prompt counted once, groups kept in a micro, split when over budget",
          "[schedule][share]") {
  // 3 groups of 4 samples: prompt 40 tokens (39 shared), responses of 10 tokens: 50 tokens each alone.
  std::vector<SampleCost> samples;
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t k = 0; k < 4; ++k) samples.push_back({50, 10, g, 39});
  CHECK(micro_tokens(samples, {0, 1, 2, 3}, true) == 50 + 3 * 11);
  CHECK(micro_tokens(samples, {0, 1, 2, 3}, false) == 200);
  CHECK(micro_tokens(samples, {3, 4}, true) == 100);  // two groups: nothing shared
  ScheduleOptions o;
  o.max_tokens_per_micro = 90;  // a whole group takes 83 tokens shared (200 unshared)
  o.share_prompts = true;
  const Schedule s = build_schedule(samples, o);
  const auto& micros = s.minis[0].ranks[0].micros;
  REQUIRE(micros.size() == 3);  // one micro per group: the lower bound at 83 tokens a group
  for (const auto& m : micros) {
    CHECK(m.share_prompts);
    CHECK_FALSE(m.padded);
    CHECK(m.tokens == 83);
    REQUIRE(m.samples.size() == 4);
    CHECK(samples[m.samples[0]].group_id == samples[m.samples[3]].group_id);
  }
  // A budget below a whole group: the group is cut into chunks that fit, each repeating the prompt.
  o.max_tokens_per_micro = 70;  // 2 samples share to 61 tokens; 3 would take 72
  const Schedule split = build_schedule(samples, o);
  int64_t total = 0, count = 0;
  for (const auto& m : split.minis[0].ranks[0].micros) {
    CHECK(m.tokens <= 70);
    total += m.tokens, count += static_cast<int64_t>(m.samples.size());
  }
  CHECK(count == 12);
  CHECK(total == 6 * 61);  // 6 chunks of 2 samples
  // dp 2: groups stay whole on a rank, and the rank cost counts their prompts once.
  o.max_tokens_per_micro = 90;
  o.dp = 2;
  const Schedule two = build_schedule(samples, o);
  for (const auto& rank : two.minis[0].ranks)
    for (const auto& m : rank.micros) CHECK(m.tokens == 83);
  // Control: without sharing the same budget cuts every group into 50-token samples.
  o.share_prompts = false;
  o.dp = 1;
  const Schedule plain = build_schedule(samples, o);
  for (const auto& m : plain.minis[0].ranks[0].micros) CHECK_FALSE(m.share_prompts);
  CHECK(plain.minis[0].ranks[0].micros.size() == 12);
}
