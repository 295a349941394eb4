// Multi-turn generation on one KV cache (turn_sampler.h), small random float64 models: a resumed
// turn equals a fresh generation over the whole conversation (greedy), sequences that pause,
// wait and resume in any order among others equal their solo runs (sampling), the conversation
// is prefilled once, and the misuse errors.
#include <catch2/catch.hpp>

#include <map>

#include "common/error.h"
#include "llama_test_util.h"
#include "models/llama/model.h"
#include "models/llama/sampler.h"
#include "models/llama/turn_sampler.h"

using namespace tandem;
using models::SamplingParams;
using models::TurnResult;
using models::TurnSampler;

namespace {

// GQA (4 query heads over 2 kv heads), q/k/v bias, a wide init for peaked distributions.
models::LlamaForCausalLM turn_model() {
  models::LlamaConfig c;
  c.vocab_size = 53, c.hidden_size = 24, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2;
  c.intermediate_size = 36, c.max_seq_len = 128, c.qkv_bias = true, c.initializer_range = 0.3;
  models::LlamaForCausalLM m(c, parallel::ParallelContext{}, 5);
  m->to(torch::kFloat64);
  return m;
}

SamplingParams params(double temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = temperature > 0 ? 0.95 : 1.0;
  return p;
}

// Steps until sequence `id`'s turn ends (other ends are kept in `others`).
models::Generation run_until(TurnSampler& ts, int64_t id, std::vector<TurnResult>* others = nullptr) {
  for (int guard = 0; guard < 10000; ++guard)
    for (auto& r : ts.step()) {
      if (r.id == id) return r.turn;
      if (others) others->push_back(std::move(r));
    }
  FAIL("turn of " << id << " never ended");
  return {};
}

void check_same(const models::Generation& a, const models::Generation& b, double tol) {
  REQUIRE(a.tokens == b.tokens);
  CHECK(a.stopped == b.stopped);
  for (size_t i = 0; i < a.logp.size(); ++i) CHECK(std::abs(a.logp[i] - b.logp[i]) <= tol);
}

// The forced tokens after sequence `id`'s turn `turn` (an observation, in a test).
std::vector<int64_t> observation(int64_t id, int turn) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < 2 + (id + turn) % 4; ++k) out.push_back((id * 7 + turn * 11 + k * 3) % 53);
  return out;
}

}  // namespace

TEST_CASE("a resumed turn equals a fresh generation over the whole conversation (greedy, float64)", "[turn_sampler]") {
  auto model = turn_model();
  const SamplingParams p = params(0.0);
  const std::vector<int64_t> prompt = test::random_sequences({6}, 53, 4)[0];
  TurnSampler ts(*model, p, 2, 100);
  ts.start(0, prompt, 1, 7);
  std::vector<int64_t> conversation = prompt;
  int64_t prefix_tokens = 0;
  for (int turn = 0; turn < 3; ++turn) {
    INFO("turn " << turn);
    const models::Generation got = run_until(ts, 0);
    SamplingParams q = p;
    q.max_new_tokens = turn == 0 ? 7 : 5;
    const models::Generation want = models::generate(*model, {{conversation, 1}}, q)[0];
    check_same(got, want, 1e-12);
    conversation.insert(conversation.end(), got.tokens.begin(), got.tokens.end());
    CHECK(ts.length(0) == static_cast<int64_t>(conversation.size()));
    const auto forced = observation(0, turn);
    conversation.insert(conversation.end(), forced.begin(), forced.end());
    ts.resume(0, forced, 5);
    prefix_tokens = static_cast<int64_t>(prompt.size());
  }
  // The conversation was prefilled once: only the prompt went through a prefill.
  CHECK(ts.stats().prefills == 1);
  CHECK(ts.stats().prefill_tokens == prefix_tokens);
}

TEST_CASE("sequences pausing and resuming in any order among others equal their solo runs (float64)",
          "[turn_sampler]") {
  auto model = turn_model();
  const SamplingParams p = params(1.0);
  constexpr int64_t kSeqs = 5, kTurns = 3;
  const auto prompts = test::random_sequences({3, 7, 5, 2, 9}, 53, 8);
  // Together: 3 slots for 5 sequences; ended turns are resumed late, newest first, two steps on.
  std::map<int64_t, std::vector<models::Generation>> together;
  {
    TurnSampler ts(*model, p, 3, 100);
    for (int64_t i = 0; i < kSeqs; ++i)
      ts.start(i, prompts[static_cast<size_t>(i)], 100 + static_cast<uint64_t>(i), 3 + i);
    std::vector<std::pair<int64_t, int>> parked;  // (id, steps waited)
    int64_t finished = 0;
    for (int guard = 0; finished < kSeqs && guard < 20000; ++guard) {
      for (auto& r : ts.step()) {
        together[r.id].push_back(r.turn);
        parked.emplace_back(r.id, 0);
      }
      for (auto it = parked.rbegin(); it != parked.rend(); ++it) ++it->second;
      std::vector<std::pair<int64_t, int>> still;
      for (auto it = parked.rbegin(); it != parked.rend(); ++it) {
        if (it->second < 2) {
          still.insert(still.begin(), *it);
          continue;
        }
        const int done = static_cast<int>(together[it->first].size());
        if (done == kTurns) {
          ts.finish(it->first);
          ++finished;
        } else {
          ts.resume(it->first, observation(it->first, done - 1), 4);
        }
      }
      parked = still;
    }
    CHECK(finished == kSeqs);
    CHECK(ts.live() + ts.paused() + ts.waiting() == 0);
    CHECK(ts.stats().max_live == 3);
    int64_t prompt_tokens = 0;
    for (const auto& pr : prompts) prompt_tokens += static_cast<int64_t>(pr.size());
    CHECK(ts.stats().prefill_tokens == prompt_tokens);
  }
  // Alone, one slot each, resumed at once.
  std::set<std::vector<int64_t>> distinct;
  for (int64_t i = 0; i < kSeqs; ++i) {
    INFO("sequence " << i);
    TurnSampler solo(*model, p, 1, 100);
    solo.start(i, prompts[static_cast<size_t>(i)], 100 + static_cast<uint64_t>(i), 3 + i);
    for (int turn = 0; turn < kTurns; ++turn) {
      const models::Generation got = run_until(solo, i);
      REQUIRE(together[i].size() == kTurns);
      check_same(got, together[i][static_cast<size_t>(turn)], 1e-12);
      distinct.insert(got.tokens);
      if (turn + 1 < kTurns) solo.resume(i, observation(i, turn), 4);
    }
  }
  CHECK(distinct.size() > kSeqs);  // not degenerate: the turns differ
}

TEST_CASE("a stop id ends a turn; misuse is refused", "[turn_sampler]") {
  auto model = turn_model();
  SamplingParams p = params(1.0);
  p.stop_ids.assign({});
  for (int64_t t = 0; t < 53; t += 2) p.stop_ids.push_back(t);  // half the vocabulary stops
  TurnSampler ts(*model, p, 2, 40);
  ts.start(7, {1, 2, 3}, 9, 30);
  const auto turn = run_until(ts, 7);
  CHECK(turn.stopped);
  CHECK(turn.tokens.back() % 2 == 0);
  CHECK(ts.paused() == 1);
  CHECK_THROWS_WITH(ts.start(7, {1}, 0, 2), "turn sampler: sequence 7 exists");
  CHECK_THROWS_WITH(ts.resume(8, {}, 2), "turn sampler: sequence 8 is not paused");
  CHECK_THROWS_WITH(ts.resume(7, std::vector<int64_t>(30, 1), 20),
                    "turn sampler: sequence 7 would outgrow its capacity 40");
  CHECK_THROWS_WITH(ts.resume(7, {99}, 2), "turn sampler: forced id 99 is outside the vocabulary");
  CHECK_THROWS_AS(ts.start(9, {1, 2}, 0, 39), UserError);  // prompt + max_new beyond the capacity
  // One slot, paused on its environment, and a start waiting for it: nothing can advance (the
  // episode runner then waits on the environment instead of stepping in a loop); a step changes
  // nothing, and finishing the paused sequence lets the waiting one in.
  TurnSampler one(*model, p, 1, 40);
  one.start(1, {1, 2, 3}, 9, 30);
  CHECK(one.can_advance());
  run_until(one, 1);
  CHECK_FALSE(one.can_advance());  // nothing waits
  one.start(2, {4, 5}, 9, 30);
  CHECK_FALSE(one.can_advance());  // the one slot is paused
  CHECK(one.step().empty());
  CHECK(one.waiting() == 1);
  one.finish(1);
  CHECK(one.can_advance());
  run_until(one, 2);
  ts.finish(7);
  CHECK(ts.paused() == 0);
  CHECK_THROWS_AS(TurnSampler(*model, p, 1, 500), UserError);  // beyond max_seq_len
}
