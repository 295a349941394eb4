// The unified model in the engine (core/unified_policy.h, models/unified/flow.h, generate.h):
// packed log-probs equal padded ones and the model's own logits; the text sampler's log-probs are
// what the training forward computes, and a sample does not depend on its batch; the image side
// reads labels as their text prompts, batch-independently; class prompts need a tokenizer that
// can write them. Each numeric check has a control that breaks it.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "core/batch/collate.h"
#include "core/policies/unified_policy.h"
#include "models/unified/flow.h"
#include "models/unified/generate.h"

using namespace tandem;

namespace {

models::UnifiedConfig tiny_config() {
  models::UnifiedConfig c;
  c.vocab_size = 40, c.hidden_size = 16, c.num_layers = 2, c.num_heads = 2, c.intermediate_size = 32;
  c.max_text_len = 16, c.image_size = 8, c.channels = 3, c.patch_size = 4;
  return c;
}

models::UnifiedModel tiny_model(uint64_t seed = 3) {
  models::UnifiedModel m(tiny_config(), seed);
  m->to(torch::kFloat64);
  return m;
}

ArSample sample(std::vector<int64_t> tokens, int64_t prompt_len) {
  ArSample s;
  s.tokens = std::move(tokens);
  s.prompt_len = prompt_len;
  s.response_mask.assign(s.tokens.size() - static_cast<size_t>(prompt_len), 1);
  s.rollout_logp.assign(s.response_mask.size(), 0.0);
  return s;
}

double max_abs(const torch::Tensor& t) { return t.numel() ? t.abs().max().item<double>() : 0.0; }

}  // namespace

TEST_CASE("unified policy: packed log-probs equal padded ones and the model's logits (float64 1e-12)",
          "[unified_policy]") {
  UnifiedTextPolicy policy(tiny_model());
  const ArSample a = sample({1, 5, 9, 12, 3}, 2), b = sample({7, 2, 30}, 1), c = sample({4, 4, 4, 4, 8, 11, 2}, 3);
  const std::vector<const ArSample*> rows{&a, &b, &c};
  const PackedBatch packed = collate_packed(rows, {}, torch::kFloat64);
  const PaddedBatch padded = collate_padded(rows, {}, torch::kFloat64);
  const auto p = policy.forward_packed(packed, true);
  const auto q = policy.forward_padded(padded, true);
  const torch::Tensor q_on_packed = q.logp.masked_select(padded.attention_mask);  // (N)
  CHECK(p.logp.sizes() == packed.targets.sizes());
  CHECK(max_abs(p.logp - q_on_packed) <= 1e-12);
  CHECK(max_abs(p.entropy - q.entropy.masked_select(padded.attention_mask)) <= 1e-12);
  // The reference: each sequence alone through the model's text head.
  std::vector<torch::Tensor> ref;
  for (const ArSample* s : rows) {
    const torch::Tensor ids = torch::tensor(s->tokens, torch::kInt64).unsqueeze(0);  // (1, T)
    const torch::Tensor lp = torch::log_softmax(policy.model()->text_logits(ids, torch::tensor({ids.size(1)})), -1)[0];
    for (size_t t = 0; t + 1 < s->tokens.size(); ++t) ref.push_back(lp[static_cast<int64_t>(t)][s->tokens[t + 1]]);
    ref.push_back(lp[static_cast<int64_t>(s->tokens.size() - 1)][0]);  // the trailing slot's target is 0
  }
  CHECK(max_abs(p.logp - torch::stack(ref)) <= 1e-12);
  // Control: another model's log-probs are far off.
  UnifiedTextPolicy other(tiny_model(4));
  CHECK(max_abs(other.forward_packed(packed, false).logp - p.logp) > 1e-3);
}

TEST_CASE("unified sampler: log-probs are the training forward's, samples do not depend on their batch",
          "[unified_policy]") {
  UnifiedTextPolicy policy(tiny_model());
  models::SamplingParams sp;
  sp.max_new_tokens = 5;
  sp.stop_ids = {2};
  const std::vector<models::GenerationRequest> both{{{1, 5, 9}, 11}, {{7, 3}, 12}};
  const auto g = policy.generate(both, sp);
  REQUIRE(g.size() == 2);
  const auto alone = policy.generate({both[1]}, sp);
  CHECK(alone[0].tokens == g[1].tokens);  // its own stream, whatever shares the batch
  for (size_t r = 0; r < g.size(); ++r) {
    REQUIRE(!g[r].tokens.empty());
    const bool stopped = g[r].tokens.back() == 2;
    CHECK(g[r].stopped == stopped);
    CHECK((stopped || static_cast<int64_t>(g[r].tokens.size()) == sp.max_new_tokens));
    std::vector<int64_t> full = both[r].prompt;
    full.insert(full.end(), g[r].tokens.begin(), g[r].tokens.end());
    const ArSample s = sample(full, static_cast<int64_t>(both[r].prompt.size()));
    const PackedBatch b = collate_packed({&s}, {}, torch::kFloat64);
    const torch::Tensor lp = policy.forward_packed(b, false).logp;  // (N)
    const torch::Tensor sampled = torch::tensor(g[r].logp, torch::kFloat64);
    const int64_t first = static_cast<int64_t>(both[r].prompt.size()) - 1;
    CHECK(max_abs(lp.narrow(0, first, sampled.numel()) - sampled) <= 1e-12);
    // Control: shifted by one slot they disagree.
    CHECK(max_abs(lp.narrow(0, first - 1, sampled.numel()) - sampled) > 1e-6);
  }
  sp.temperature = 0;  // greedy is reproducible across seeds
  CHECK(policy.generate({{{1, 5, 9}, 1}}, sp)[0].tokens == policy.generate({{{1, 5, 9}, 99}}, sp)[0].tokens);
  models::SamplingParams too_long = sp;
  too_long.max_new_tokens = 15;
  CHECK_THROWS_AS(policy.generate({{{1, 5, 9}, 1}}, too_long), UserError);  // 3 + 15 > max_text_len 16
}

TEST_CASE("unified flow: a label is its text prompt, the null label the empty one, batch-independently",
          "[unified_policy]") {
  models::UnifiedModel model = tiny_model();
  const std::vector<std::vector<int64_t>> prompts{{1, 6, 7}, {1, 8}};
  models::UnifiedFlow flow(model, prompts);
  CHECK(flow.null_label() == 2);
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({3, 3, 8, 8}, torch::kFloat64);          // (B, C, H, W)
  const torch::Tensor sigma = torch::tensor({0.9, 0.5, 0.2}, torch::kFloat64);  // (B)
  const torch::Tensor v = flow.velocity(x, sigma, torch::tensor({1, 0, 2}));    // (B, C, H, W)
  const torch::Tensor direct =
      model->velocity(torch::tensor({{1, 8}}), torch::tensor({2}), x.slice(0, 0, 1), sigma.slice(0, 0, 1));
  CHECK(max_abs(v.slice(0, 0, 1) - direct) <= 1e-12);
  const torch::Tensor uncond =
      model->velocity(torch::zeros({1, 0}, torch::kInt64), torch::tensor({0}), x.slice(0, 2, 3), sigma.slice(0, 2, 3));
  CHECK(max_abs(v.slice(0, 2, 3) - uncond) <= 1e-12);
  const torch::Tensor single = flow.velocity(x.slice(0, 1, 2), sigma.slice(0, 1, 2), torch::tensor({0}));
  // Every batch is padded to the same text width, so a row's arithmetic is the same alone or in a
  // batch of 3, but BLAS may block the two GEMM shapes differently (OpenBLAS's Haswell kernels on
  // AMD EPYC do): equal up to float reassociation, float64 1e-12.
  CHECK(max_abs(single - v.slice(0, 1, 2)) <= 1e-12);
  // Control: the other prompt draws something else.
  CHECK(max_abs(flow.velocity(x.slice(0, 1, 2), sigma.slice(0, 1, 2), torch::tensor({1})) - single) > 1e-6);
  CHECK_THROWS_AS(models::UnifiedFlow(model, {{}}), UserError);
  CHECK_THROWS_AS(models::UnifiedFlow(model, {{1, 99}}), UserError);
}

TEST_CASE("class prompts are 'draw <class>' in the AR tokenizer", "[unified_policy]") {
  const auto tok = models::make_char_tokenizer("0123456789+-*=:;,.<>|# abcdefghijklmnopqrstuvwxyz");
  const auto p = class_prompts(*tok, 3);
  REQUIRE(p.size() == 3);
  CHECK(class_prompt_text(2) == "draw triangle");
  std::vector<int64_t> body(p[2].begin() + (tok->bos_id() ? 1 : 0), p[2].end());
  CHECK(tok->decode(body, true) == "draw triangle");
  const auto digits = models::make_char_tokenizer("0123456789");
  CHECK_THROWS_WITH(class_prompts(*digits, 2), Catch::Contains("tracks.ar.tokenizer"));
}
