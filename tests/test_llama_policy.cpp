// LlamaPolicy: the core update (train_micro) runs on the Llama model through the PolicyModel
// interface, and the packed and padded layouts give the same loss and gradients.
#include <catch2/catch.hpp>

#include "core/batch/schedule.h"
#include "core/policies/llama_policy.h"
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

TEST_CASE("layout auto: per-micro packed / padded gives the loss and gradients of both fixed layouts (float64)",
          "[llama][policy][layout]") {
  // Sorted longest first in pairs: (9, 9) and (4, 4) need no padding, (6, 5) does.
  const std::vector<std::vector<int64_t>> tokens{
      {1, 5, 9, 12, 40, 3, 7, 7, 7}, {8, 8, 2, 7, 7, 9}, {4, 3, 2, 1, 9, 9, 9, 9, 9},
      {11, 12, 13, 14, 15},          {60, 61, 62, 1},    {5, 6, 7, 2}};
  std::vector<ArSample> samples;
  for (size_t i = 0; i < tokens.size(); ++i)
    samples.push_back(sample(tokens[i], 2, i % 2 ? -0.8 : 1.1, static_cast<int64_t>(i)));
  std::vector<SampleCost> costs;
  for (const auto& s : samples) costs.push_back({s.length(), s.action_tokens(), s.index});
  LlamaPolicy policy(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
  UpdateOptions o;
  o.dtype = torch::kFloat64;
  o.loss_agg_mode = LossAggMode::kSeqMeanTokenSum;
  const auto run = [&](BatchLayout layout, int64_t* padded_micros, int64_t* packed_micros) {
    for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
    ScheduleOptions so;
    so.micro_batch_size = 2;
    so.layout = layout;
    const Schedule sched = build_schedule(costs, so);
    double loss = 0;
    for (const auto& micro : sched.minis[0].ranks[0].micros) {
      std::vector<const ArSample*> ptrs;
      for (int64_t i : micro.samples) ptrs.push_back(&samples[static_cast<size_t>(i)]);
      o.packed = !micro.padded;
      ++*(micro.padded ? padded_micros : packed_micros);
      loss += train_micro(policy, ptrs, micro.denominators, o).loss;
    }
    std::vector<torch::Tensor> grads;
    for (auto& p : policy.parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss, grads);
  };
  int64_t auto_padded = 0, auto_packed = 0, a = 0, b = 0;
  const auto [auto_loss, auto_grads] = run(BatchLayout::kAuto, &auto_padded, &auto_packed);
  const auto [packed_loss, packed_grads] = run(BatchLayout::kPacked, &a, &b);
  const auto [padded_loss, padded_grads] = run(BatchLayout::kPadded, &a, &b);
  CHECK(auto_padded >= 1);  // the test covers both kinds of micro in one mini-batch
  CHECK(auto_packed >= 1);
  CHECK(auto_loss != 0);
  for (double other : {packed_loss, padded_loss}) CHECK(std::abs(auto_loss - other) <= 1e-12 * std::abs(other));
  double worst = 0;
  for (size_t i = 0; i < auto_grads.size(); ++i)
    worst = std::max(
        {worst, test::rel_to_max(auto_grads[i], packed_grads[i]), test::rel_to_max(auto_grads[i], padded_grads[i])});
  CHECK(worst < 1e-12);
}

TEST_CASE("tis_cap: each token's policy loss times min(exp(old - rollout), cap), detached (float64 1e-12)",
          "[llama][policy][tis]") {
  std::vector<ArSample> samples{sample({1, 5, 9, 12, 40, 3}, 2, 0.7, 0), sample({8, 8, 2, 4, 4}, 1, -1.2, 1)};
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  LossDenominators den{8, 2, 8};
  LlamaPolicy policy(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
  const PackedBatch b = collate_packed(ptrs, den, torch::kFloat64);
  const int64_t n = b.num_tokens();
  // old - rollout spans [-1, 1]: weights exp(.) in [0.37, 2.7], the larger ones capped at 1.5.
  const torch::Tensor old = b.rollout_logp + torch::linspace(-1, 1, n, torch::kFloat64) * b.loss_mask;  // (N)
  const double cap = 1.5;
  const auto grads_of = [&] {
    std::vector<torch::Tensor> g;
    for (auto& p : policy.parameters()) g.push_back(p.grad().clone()), p.mutable_grad() = torch::Tensor();
    return g;
  };
  for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
  UpdateOptions o;
  o.dtype = torch::kFloat64;
  o.tis_cap = cap;
  const MicroOutcome got = train_micro(policy, ptrs, den, o, old);
  const auto got_grads = grads_of();

  // Reference: the same loss pieces with the weight applied by hand.
  const torch::Tensor logp = policy.forward_packed(b, false).logp;  // (N)
  const PolicyLoss pl = policy_loss(logp, old, b.advantages, b.loss_mask, b.seq_index, o.policy);
  const torch::Tensor w = torch::exp(old - b.rollout_logp).clamp_max(cap) * b.loss_mask + (1 - b.loss_mask);
  const AggregatedLoss ref = aggregate_loss(pl.loss * w, b.loss_mask, b.seq_index, o.loss_agg_mode, den);
  ref.loss.backward();
  const auto ref_grads = grads_of();
  CHECK(std::abs(got.loss - ref.loss.item<double>()) <= 1e-12 * std::abs(ref.loss.item<double>()));
  double worst = 0;
  for (size_t i = 0; i < ref_grads.size(); ++i) worst = std::max(worst, test::rel_to_max(got_grads[i], ref_grads[i]));
  CHECK(worst < 1e-12);
  const torch::Tensor m = b.loss_mask != 0;
  CHECK(got.tis_weight_sum == Approx(w.masked_select(m).sum().item<double>()).epsilon(1e-12));
  const double capped = (m & (torch::exp(old - b.rollout_logp) > cap)).sum().item<double>();
  CHECK(capped >= 1);  // the cap binds on some tokens, and is counted
  CHECK(got.tis_capped == capped);

  // Control: without TIS the same inputs give another loss.
  o.tis_cap.reset();
  const MicroOutcome plain = train_micro(policy, ptrs, den, o, old);
  grads_of();
  CHECK(std::abs(plain.loss - got.loss) > 1e-6);
}

TEST_CASE(
    "the loss fused into the lm head: train_micro's loss, stats and gradients equal the recomputing head "
    "(float64 1e-12)",
    "[llama][policy][fused]") {
  std::vector<ArSample> samples{sample({1, 5, 9, 12, 40, 3, 7}, 2, 0.7, 0), sample({8, 8, 2, 4}, 1, -1.2, 1),
                                sample({60, 61, 62, 63, 64, 65, 66, 67, 1}, 4, 0.3, 2)};
  samples[2].response_mask[1] = 0;
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  const LossDenominators den{13, 3, 9};
  LlamaPolicy policy(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
  REQUIRE(policy.fuses_token_loss());
  struct Run {
    MicroOutcome out;
    std::vector<torch::Tensor> grads;
  };
  const auto run = [&](UpdateOptions o, bool fuse) {
    for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
    o.dtype = torch::kFloat64;
    o.fuse_head = fuse;
    // Per-token old and reference log-probs on the batch's axis, off the sampler's by a ramp.
    const torch::Tensor rollout =
        o.packed ? collate_packed(ptrs, den, o.dtype).rollout_logp : collate_padded(ptrs, den, o.dtype).rollout_logp;
    const torch::Tensor ramp = torch::linspace(-0.6, 0.6, rollout.numel(), torch::kFloat64).view(rollout.sizes());
    Run r;
    r.out = train_micro(policy, ptrs, den, o, rollout + ramp, rollout - 0.5 * ramp);
    for (auto& p : policy.parameters()) r.grads.push_back(p.grad().clone());
    return r;
  };
  const auto worst = [](const Run& a, const Run& b) {
    double w = 0;
    for (size_t i = 0; i < a.grads.size(); ++i) w = std::max(w, test::rel_to_max(a.grads[i], b.grads[i]));
    return w;
  };
  std::vector<UpdateOptions> cases(4);
  cases[0].kl_coef = 0.05, cases[0].kl_estimator = KlEstimator::kK3, cases[0].entropy_coef = 0.01,
  cases[0].tis_cap = 1.3;
  cases[1].loss_agg_mode = LossAggMode::kSeqMeanTokenMean, cases[1].reuse_old_logp = true,
  cases[1].report_entropy = true;
  cases[2].loss_agg_mode = LossAggMode::kSeqMeanTokenSumNorm, cases[2].policy.clip_c.reset(),
  cases[2].loss_weight = 0.4;
  cases[2].kl_coef = 0.1, cases[2].kl_estimator = KlEstimator::kK2;
  cases[3].policy.ratio = RatioKind::kSequence;  // GSPO: not token-separable, so never fused
  for (size_t c = 0; c < cases.size(); ++c)
    for (const bool packed : {true, false}) {
      INFO("case " << c << (packed ? " packed" : " padded"));
      cases[c].packed = packed;
      const Run fused = run(cases[c], true), plain = run(cases[c], false);
      CHECK(plain.out.loss != 0);
      CHECK(std::abs(fused.out.loss - plain.out.loss) <= 1e-12 * std::abs(plain.out.loss));
      CHECK(fused.out.stats.clipped == plain.out.stats.clipped);
      CHECK(fused.out.stats.approx_kl_sum == Approx(plain.out.stats.approx_kl_sum).epsilon(1e-12));
      CHECK(fused.out.kl_sum == Approx(plain.out.kl_sum).epsilon(1e-12));
      CHECK(fused.out.entropy_sum == Approx(plain.out.entropy_sum).epsilon(1e-12));
      CHECK(fused.out.tis_weight_sum == Approx(plain.out.tis_weight_sum).epsilon(1e-12));
      CHECK(worst(fused, plain) < 1e-12);
      if (c == 0) {
        CHECK(plain.out.stats.clipped > 0);  // both branches of the clip are exercised
        CHECK(plain.out.entropy_sum > 0);
        // Control: a KL coefficient 1% off moves the gradient far past the tolerance.
        UpdateOptions other = cases[c];
        other.kl_coef *= 1.01;
        CHECK(worst(run(other, true), plain) > 1e-9);
      }
    }
}

namespace {

// A micro's samples with a perturbed copy of the policy as the reference: its log-probs on the
// micro's own layout, as the AR track computes old / reference log-probs over the same micros.
torch::Tensor layout_logp(LlamaPolicy& policy, const std::vector<const ArSample*>& ptrs, bool packed, bool share) {
  torch::NoGradGuard no_grad;
  if (!packed) return policy.forward_padded(collate_padded(ptrs, {}, torch::kFloat64), false).logp;
  return policy.forward_packed(collate_packed(ptrs, {}, torch::kFloat64, share), false).logp;
}

}  // namespace

TEST_CASE("shared prompts: log-probs, loss and every gradient equal the unshared micro (float64 1e-12)",
          "[llama][policy][share]") {
  // Two groups sharing their prompts (3 and 2 responses, one response empty of actions) and a lone
  // sample; one micro holds every sample, another only part of group 0 (a group split over micros).
  const std::vector<int64_t> p0{3, 17, 5, 40, 22}, p1{8, 9, 60, 2};
  const auto with = [](std::vector<int64_t> prompt, const std::vector<int64_t>& response) {
    prompt.insert(prompt.end(), response.begin(), response.end());
    return prompt;
  };
  std::vector<ArSample> samples{
      sample(with(p0, {7, 7, 1}), 5, 0.9, 0),     sample(with(p0, {12, 4, 4, 4, 30}), 5, -1.3, 1),
      sample(with(p0, {2}), 5, 0.4, 2),           sample(with(p1, {5, 5}), 4, -0.6, 3),
      sample(with(p1, {19, 1, 2, 3}), 4, 1.0, 4), sample({44, 45, 46, 47}, 2, 0.2, 5)};
  for (int64_t i : {0, 1, 2}) samples[i].group_id = 0;
  for (int64_t i : {3, 4}) samples[i].group_id = 1;
  samples[5].group_id = 2;
  samples[1].response_mask[2] = 0;
  LlamaPolicy policy(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
  LlamaPolicy reference(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : reference.parameters()) p.add_(torch::randn(p.sizes(), torch::kFloat64) * 0.01);
  }
  for (const auto& subset : std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4, 5}, {1, 2}}) {
    std::vector<const ArSample*> ptrs;
    double n_tok = 0, n_seq = 0;
    for (int64_t i : subset) {
      ptrs.push_back(&samples[static_cast<size_t>(i)]);
      n_tok += static_cast<double>(samples[i].action_tokens()), n_seq += samples[i].action_tokens() > 0 ? 1 : 0;
    }
    const PackedBatch shared = collate_packed(ptrs, {}, torch::kFloat64, true);
    REQUIRE(shared.prefix_of.defined());
    CHECK(shared.num_tokens() < collate_packed(ptrs, {}, torch::kFloat64, false).num_tokens());
    for (const LossAggMode mode : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                                   LossAggMode::kSeqMeanTokenSum, LossAggMode::kSeqMeanTokenSumNorm}) {
      INFO("samples " << subset.size() << ", mode " << to_string(mode));
      UpdateOptions o;
      o.dtype = torch::kFloat64;
      o.loss_agg_mode = mode;
      o.kl_coef = 0.05, o.kl_estimator = KlEstimator::kK3;
      o.entropy_coef = 0.01;
      o.tis_cap = 1.5;
      const LossDenominators den{n_tok, n_seq, 6};
      // old = the policy's own log-probs (recompute), ref = the perturbed copy's, each on the layout.
      const auto run = [&](bool packed, bool share) {
        for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
        o.packed = packed, o.share_prompts = share;
        const MicroOutcome out = train_micro(policy, ptrs, den, o, layout_logp(policy, ptrs, packed, share),
                                             layout_logp(reference, ptrs, packed, share));
        std::vector<torch::Tensor> grads;
        for (auto& p : policy.parameters()) grads.push_back(p.grad().clone());
        return std::make_pair(out, grads);
      };
      const auto [s, s_grads] = run(true, true);
      const auto [u, u_grads] = run(true, false);
      const auto [d, d_grads] = run(false, false);
      CHECK(s.loss != 0);
      for (const MicroOutcome& ref : {u, d}) {
        CHECK(std::abs(s.loss - ref.loss) <= 1e-12 * std::abs(ref.loss));
        CHECK(std::abs(s.kl_sum - ref.kl_sum) <= 1e-12 * std::abs(ref.kl_sum));
        CHECK(std::abs(s.entropy_sum - ref.entropy_sum) <= 1e-12 * std::abs(ref.entropy_sum));
        CHECK(std::abs(s.tis_weight_sum - ref.tis_weight_sum) <= 1e-12 * std::abs(ref.tis_weight_sum));
        CHECK(s.stats.tokens == ref.stats.tokens);
      }
      double worst = 0, largest = 0;
      for (size_t i = 0; i < s_grads.size(); ++i) {
        worst = std::max({worst, test::rel_to_max(s_grads[i], u_grads[i]), test::rel_to_max(s_grads[i], d_grads[i])});
        largest = std::max(largest, u_grads[i].abs().max().item<double>());
      }
      CHECK(largest > 0);
      CHECK(worst < 1e-12);
    }
  }
  // Control: one response pointed at the wrong prompt (the lone sample's) gives other log-probs.
  std::vector<const ArSample*> all;
  for (const auto& s : samples) all.push_back(&s);
  PackedBatch b = collate_packed(all, {}, torch::kFloat64, true);
  torch::NoGradGuard no_grad;
  const torch::Tensor good = policy.forward_packed(b, false).logp;
  const int64_t lone = b.num_seqs() - 1;
  REQUIRE(b.prefix_of[lone].item<int64_t>() == -1);
  b.prefix_of[2] = lone;  // response 2 of group 0 now continues the lone sequence
  const torch::Tensor bad = policy.forward_packed(b, false).logp;
  CHECK((good - bad).abs().max().item<double>() > 1e-3);
}

TEST_CASE("shared prompts: two AdamW updates leave the weights and optimizer state of unshared ones (float64 1e-12)",
          "[llama][policy][share]") {
  const std::vector<int64_t> prompt{3, 17, 5, 40, 22, 9};
  std::vector<ArSample> samples;
  for (int64_t k = 0; k < 4; ++k) {
    std::vector<int64_t> t = prompt;
    for (int64_t j = 0; j <= k; ++j) t.push_back(10 + 7 * k + j);
    samples.push_back(sample(t, 6, k % 2 ? 0.7 : -0.8, k));
    samples.back().group_id = 0;
  }
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  const LossDenominators den{10, 4, 6};
  std::vector<std::vector<torch::Tensor>> params, exp_avg, exp_avg_sq;
  for (const bool share : {true, false}) {
    LlamaPolicy policy(models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64), {false, true, 4});
    // One optimizer per parameter (AdamW is elementwise: the same updates), so each state map holds
    // one entry and is read without the library's private key format.
    std::vector<std::unique_ptr<torch::optim::AdamW>> adam;
    for (const auto& p : policy.parameters())
      adam.push_back(std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{p},
                                                           torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
    UpdateOptions o;
    o.dtype = torch::kFloat64;
    o.packed = true, o.share_prompts = share;
    o.entropy_coef = 0.01;
    for (int step = 0; step < 2; ++step) {
      for (auto& a : adam) a->zero_grad();
      const torch::Tensor old = layout_logp(policy, ptrs, true, share);
      train_micro(policy, ptrs, den, o, old);
      for (auto& a : adam) a->step();
    }
    params.emplace_back(), exp_avg.emplace_back(), exp_avg_sq.emplace_back();
    const std::vector<torch::Tensor> ps = policy.parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      params.back().push_back(ps[i].detach().clone());
      REQUIRE(adam[i]->state().size() == 1);
      const auto& st = static_cast<torch::optim::AdamWParamState&>(*adam[i]->state().begin()->second);
      exp_avg.back().push_back(st.exp_avg().clone());
      exp_avg_sq.back().push_back(st.exp_avg_sq().clone());
    }
  }
  double worst = 0, moved = 0;
  for (size_t i = 0; i < params[0].size(); ++i) {
    worst =
        std::max({worst, test::rel_to_max(params[0][i], params[1][i]), test::rel_to_max(exp_avg[0][i], exp_avg[1][i]),
                  test::rel_to_max(exp_avg_sq[0][i], exp_avg_sq[1][i])});
    moved = std::max(moved, exp_avg[1][i].abs().max().item<double>());
  }
  CHECK(moved > 0);  // the updates did something
  CHECK(worst < 1e-12);
}
