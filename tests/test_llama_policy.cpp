// LlamaPolicy: the core update (train_micro) runs on the Llama model through the PolicyModel
// interface, and the packed and padded layouts give the same loss and gradients.
#include <catch2/catch.hpp>

#include "core/llama_policy.h"
#include "llama_test_util.h"
#include "models/llama/weights.h"

using namespace tandem;

namespace {

ArSample sample(std::vector<int64_t> tokens, int64_t prompt_len, double adv, int64_t index) {
  ArSample s;
  s.tokens = std::move(tokens);
  s.prompt_len = prompt_len;
  s.response_mask.assign(s.response_len(), 1);
  for (int64_t k = 0; k < s.response_len(); ++k) s.rollout_logp.push_back(-4.0 - 0.1 * k);
  s.advantage = adv;
  s.index = index;
  return s;
}

}  // namespace

TEST_CASE("train_micro runs on LlamaPolicy; packed and padded agree (float64 1e-12)", "[llama][policy]") {
  std::vector<ArSample> samples{sample({1, 5, 9, 12, 40, 3}, 2, 0.7, 0), sample({8, 8, 2}, 1, -1.2, 1),
                                sample({60, 61, 62, 63, 64, 65, 66, 67, 1}, 4, 0.3, 2)};
  samples[2].response_mask[1] = 0;
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  LossDenominators den{11, 3, 8};
  UpdateOptions o;
  o.dtype = torch::kFloat64;
  o.entropy_coef = 0.01;
  o.loss_agg_mode = LossAggMode::kSeqMeanTokenMean;
  LlamaPolicy policy(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
  const auto run = [&](bool packed) {
    for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
    o.packed = packed;
    const MicroOutcome out = train_micro(policy, ptrs, den, o);
    std::vector<torch::Tensor> grads;
    for (auto& p : policy.parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(out, grads);
  };
  const auto [packed, packed_grads] = run(true);
  const auto [padded, padded_grads] = run(false);
  CHECK(std::isfinite(packed.loss));
  CHECK(packed.loss != 0);
  CHECK(packed.entropy_sum > 0);
  CHECK(packed.samples == 3);
  CHECK(test::rel_to_max(torch::tensor(padded.loss), torch::tensor(packed.loss)) < 1e-12);
  CHECK(padded.entropy_sum == Approx(packed.entropy_sum).epsilon(1e-12));
  REQUIRE(packed_grads.size() == padded_grads.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < packed_grads.size(); ++i) {
    worst = std::max(worst, test::rel_to_max(padded_grads[i], packed_grads[i]));
    largest = std::max(largest, packed_grads[i].abs().max().item<double>());
  }
  CHECK(worst < 1e-12);
  CHECK(largest > 0);
}

TEST_CASE("the recipe's model block maps to LlamaConfig", "[llama][policy]") {
  ArModelConfig m;
  m.vocab_size = 50;
  m.qkv_bias = true;
  m.tie_embeddings = true;
  const models::LlamaConfig c = llama_config(m);
  CHECK(c.vocab_size == 50);
  CHECK(c.num_kv_heads == m.num_kv_heads);
  CHECK(c.qkv_bias);
  CHECK(c.tie_embeddings);
  CHECK_NOTHROW(c.validate());
}
