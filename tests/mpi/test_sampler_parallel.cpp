// The sampler on real tp / cp ranks: tokens equal the one-rank model's and log-probs agree to
// 1e-10 (float64), with and without the KV cache and with shared prompts; cp ranks are ignored by
// generation, so each runs it whole and gets the same result. Layouts that do not divide the world are skipped.
#include <catch2/catch.hpp>

#include "llama_test_util.h"
#include "models/llama/model.h"
#include "models/llama/sampler.h"
#include "mpi_test_util.h"
#include "parallel/process_groups.h"

using namespace tandem;

namespace {

using test::Groups;
using test::Layout;

// Splits over 4 tp ranks (8 heads over 4 kv heads, GQA) with an uneven vocab and MLP.
models::LlamaConfig config() {
  models::LlamaConfig c;
  c.vocab_size = 97, c.hidden_size = 64, c.num_layers = 2, c.num_heads = 8, c.num_kv_heads = 4;
  c.intermediate_size = 50, c.max_seq_len = 64, c.qkv_bias = true, c.initializer_range = 0.3;
  return c;
}

models::LlamaForCausalLM make(const parallel::ParallelContext& ctx) {
  models::LlamaForCausalLM m(config(), ctx, 3);
  m->to(torch::kFloat64);
  return m;
}

std::vector<models::GenerationRequest> requests() {
  const auto prompts = test::random_sequences({5, 1, 9, 4, 12, 7}, 97, 21);
  std::vector<models::GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i)
    out.push_back({prompts[i], models::sample_seed(5, 1, static_cast<int64_t>(i), 0)});
  return out;
}

}  // namespace

TEST_CASE("tp and cp generation gives the one-rank tokens and log-probs (float64)", "[mpi][sampler]") {
  const auto reqs = requests();
  models::LlamaForCausalLM single = make({});
  std::vector<models::SamplingParams> settings(2);
  settings[0].temperature = 1.0, settings[0].top_p = 0.9, settings[0].top_k = 30;
  settings[0].max_new_tokens = 14, settings[0].max_batch = 4, settings[0].stop_ids = {7};
  settings[1].temperature = 0.0, settings[1].max_new_tokens = 10, settings[1].vocab_limit = 90;
  for (const Layout l : {Layout{2, 1}, Layout{4, 1}, Layout{1, 2}, Layout{2, 2}}) {
    if (test::world_size() % (l.tp * l.cp) != 0) continue;
    INFO("tp=" << l.tp << " cp=" << l.cp << " world=" << test::world_size());
    Groups g(l);
    models::LlamaForCausalLM model = make(g.ctx);
    for (const bool cache : {true, false}) {
      for (models::SamplingParams p : settings) {
        INFO("kv cache " << cache << " temperature " << p.temperature);
        p.use_kv_cache = cache;
        const auto ref = models::generate(*single, reqs, p);
        const auto got = models::generate(*model, reqs, p);
        REQUIRE(got.size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          INFO("request " << i);
          CHECK(got[i].tokens == ref[i].tokens);
          CHECK(got[i].stopped == ref[i].stopped);
          REQUIRE(got[i].logp.size() == ref[i].logp.size());
          CHECK(test::rel_floor1(torch::tensor(got[i].logp, torch::kFloat64),
                                 torch::tensor(ref[i].logp, torch::kFloat64)) < 1e-10);
        }
      }
    }
  }
}

TEST_CASE("shared prompts under tp and cp give the unshared one-rank samples (float64)", "[mpi][sampler][share]") {
  // Groups of 3 samples of each prompt (their own streams); 4 slots split groups across
  // admissions, so a group is prefilled once per admission it spans.
  std::vector<models::GenerationRequest> reqs;
  const auto prompts = requests();
  for (size_t g = 0; g < 4; ++g)
    for (int64_t k = 0; k < 3; ++k)
      reqs.push_back({prompts[g].prompt, models::sample_seed(5, 1, static_cast<int64_t>(g), k)});
  models::LlamaForCausalLM single = make({});
  models::SamplingParams p;
  p.temperature = 1.0, p.max_new_tokens = 12, p.max_batch = 4, p.max_live = 4;
  const auto ref = models::generate(*single, reqs, p);  // unshared, one rank
  p.share_prompts = true;
  for (const Layout l : {Layout{2, 1}, Layout{4, 1}, Layout{2, 2}}) {
    if (test::world_size() % (l.tp * l.cp) != 0) continue;
    INFO("tp=" << l.tp << " cp=" << l.cp << " world=" << test::world_size());
    Groups g(l);
    models::LlamaForCausalLM model = make(g.ctx);
    models::GenerationStats stats;
    const auto got = models::generate(*model, reqs, p, &stats);
    REQUIRE(got.size() == ref.size());
    int64_t prompt_tokens = 0;
    for (const auto& r : reqs) prompt_tokens += static_cast<int64_t>(r.prompt.size());
    CHECK(stats.prefill_tokens < prompt_tokens);  // sharing happened
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("request " << i);
      CHECK(got[i].tokens == ref[i].tokens);
      REQUIRE(got[i].logp.size() == ref[i].logp.size());
      CHECK(test::rel_floor1(torch::tensor(got[i].logp, torch::kFloat64), torch::tensor(ref[i].logp, torch::kFloat64)) <
            1e-10);
    }
  }
}
