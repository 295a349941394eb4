// Policy loss, KL, entropy and loss aggregation against the independent reference
// (tests/fixtures/{policy_loss,kl,entropy}.json), plus the micro-split invariance.
#include <catch2/catch.hpp>

#include "core/grpo/loss.h"
#include "fixtures.h"

using namespace tandem;

namespace {

PolicyLossOptions options_of(const nlohmann::json& c) {
  PolicyLossOptions o;
  o.clip_low = c["clip_low"].get<double>();
  o.clip_high = c["clip_high"].get<double>();
  o.clip_c = c["clip_c"].is_null() ? std::nullopt : std::optional<double>(c["clip_c"].get<double>());
  o.ratio = *parse_enum<RatioKind>(c["ratio"].get<std::string>());
  return o;
}

struct Inputs {
  torch::Tensor logp, old_logp, adv, mask, seq_index;
};

Inputs inputs_of(const nlohmann::json& c, torch::Dtype dtype) {
  Inputs in;
  in.logp = test::to_tensor(c["logp"], dtype).requires_grad_(true);
  in.old_logp = test::to_tensor(c["old_logp"], dtype);
  in.adv = test::to_tensor(c["adv"], dtype);
  in.mask = test::to_tensor(c["mask"], dtype);
  in.seq_index = test::to_index(c["seq_index"]);
  return in;
}

LossDenominators denominators_of(const nlohmann::json& c) {
  return {c["expected"]["n_tok"].get<double>(), c["expected"]["n_seq"].get<double>(), c["l_norm"].get<double>()};
}

// Token spans [begin, end) of each sequence (sequences are contiguous in the fixtures).
std::vector<std::pair<int64_t, int64_t>> sequence_spans(const torch::Tensor& seq_index) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  auto acc = seq_index.accessor<int64_t, 1>();
  for (int64_t t = 0; t < seq_index.size(0); ++t) {
    if (t == 0 || acc[t] != acc[t - 1]) spans.push_back({t, t});
    spans.back().second = t + 1;
  }
  return spans;
}

// Sum of micro losses over micros of `micro_seqs` sequences each, with either the whole-batch
// denominators (correct) or per-micro ones (the classic bug, used as the control).
torch::Tensor split_loss(const Inputs& in, const PolicyLossOptions& o, LossAggMode mode, const LossDenominators& whole,
                         int64_t micro_seqs, bool per_micro_denominators) {
  const auto spans = sequence_spans(in.seq_index);
  torch::Tensor total = torch::zeros({}, in.logp.options());
  for (size_t s = 0; s < spans.size(); s += micro_seqs) {
    const size_t e = std::min(spans.size(), s + micro_seqs);
    const int64_t begin = spans[s].first, end = spans[e - 1].second;
    auto cut = [&](const torch::Tensor& x) { return x.slice(0, begin, end); };
    const torch::Tensor idx = cut(in.seq_index) - static_cast<int64_t>(s);  // re-based (T_micro)
    const PolicyLoss pl = policy_loss(cut(in.logp), cut(in.old_logp), cut(in.adv), cut(in.mask), idx, o);
    LossDenominators d = whole;
    if (per_micro_denominators) {
      const torch::Tensor m = cut(in.mask) != 0;
      d.n_tok = m.sum().item<double>();
      d.n_seq = (torch::zeros({int64_t(e - s)}, torch::kFloat64).index_add(0, idx, m.to(torch::kFloat64)) > 0)
                    .sum()
                    .item<double>();
    }
    total = total + aggregate_loss(pl.loss, cut(in.mask), idx, mode, d).loss;
  }
  return total;
}

const std::vector<std::string> kModes{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                      "seq-mean-token-sum-norm"};

}  // namespace

TEST_CASE("policy_loss matches the reference: per-token loss, ratio, stats (float64 1e-12)", "[loss]") {
  for (const auto& c : test::load_fixture("policy_loss.json")["cases"]) {
    SECTION(c["name"].get<std::string>()) {
      const Inputs in = inputs_of(c, torch::kFloat64);
      const PolicyLoss pl = policy_loss(in.logp, in.old_logp, in.adv, in.mask, in.seq_index, options_of(c));
      const auto& ex = c["expected"];
      CHECK(test::max_rel_error(pl.loss, test::to_tensor(ex["loss_tok"], torch::kFloat64), 1e-12) < 1e-12);
      CHECK(test::max_rel_error(pl.ratio, test::to_tensor(ex["ratio"], torch::kFloat64), 1e-12) < 1e-12);
      const PolicyStats st = policy_stats(pl, in.logp, in.old_logp, in.mask);
      CHECK(st.clipfrac() == Approx(ex["clipfrac"].get<double>()).epsilon(1e-12));
      CHECK(st.dual_clipfrac() == Approx(ex["dual_clipfrac"].get<double>()).epsilon(1e-12));
      CHECK(test::rel_error(st.approx_kl(), ex["approx_kl"].get<double>(), 1e-12) < 1e-12);
    }
  }
}

TEST_CASE("aggregated loss and its gradient match the reference for every mode", "[loss]") {
  for (const auto& c : test::load_fixture("policy_loss.json")["cases"]) {
    for (const std::string& mode_name : kModes) {
      SECTION(c["name"].get<std::string>() + " / " + mode_name) {
        const LossAggMode mode = *parse_enum<LossAggMode>(mode_name);
        const auto& ex = c["expected"]["agg"][mode_name];
        const torch::Tensor grad_ref = test::to_tensor(ex["grad_logp"], torch::kFloat64);
        // float64: 1e-12 relative on the loss; gradients relative to the largest entry.
        const Inputs in = inputs_of(c, torch::kFloat64);
        const PolicyLoss pl = policy_loss(in.logp, in.old_logp, in.adv, in.mask, in.seq_index, options_of(c));
        const AggregatedLoss agg = aggregate_loss(pl.loss, in.mask, in.seq_index, mode, denominators_of(c));
        CHECK_FALSE(agg.zero_denominator);
        CHECK(test::rel_error(agg.loss.item<double>(), ex["loss"].get<double>(), 1e-12) < 1e-12);
        agg.loss.backward();
        const double gscale = grad_ref.abs().max().item<double>();
        CHECK(test::max_rel_error(in.logp.grad(), grad_ref, gscale) < 1e-12);
        // float32: 1e-6 relative on the loss, except where rounding the inputs to float32 alone
        // moves the exact answer further: the 20-clamp case (ratios ~5e8) and the GSPO case whose
        // 3e-4 clip band makes the loss a near-cancelling sum of ratios ~1 (both 1e-5).
        const Inputs in32 = inputs_of(c, torch::kFloat32);
        const PolicyLoss pl32 =
            policy_loss(in32.logp, in32.old_logp, in32.adv, in32.mask, in32.seq_index, options_of(c));
        const double l32 =
            aggregate_loss(pl32.loss, in32.mask, in32.seq_index, mode, denominators_of(c)).loss.item<double>();
        const std::string name = c["name"].get<std::string>();
        const bool loose = name.find("huge") != std::string::npos || name.find("gspo") != std::string::npos;
        const double tol32 = loose ? 1e-5 : 1e-6;
        CHECK(test::rel_error(l32, ex["loss"].get<double>(), 1e-6) < tol32);
      }
    }
  }
}

TEST_CASE("kl estimators match the reference (float64 1e-12 relative, float32 2e-6 absolute)", "[loss]") {
  for (const auto& c : test::load_fixture("kl.json")["cases"]) {
    SECTION(c["name"].get<std::string>()) {
      const KlEstimator est = *parse_enum<KlEstimator>(c["estimator"].get<std::string>());
      const torch::Tensor expected = test::to_tensor(c["expected"], torch::kFloat64);
      const torch::Tensor k64 =
          kl_penalty(test::to_tensor(c["logp"], torch::kFloat64), test::to_tensor(c["ref"], torch::kFloat64), est);
      CHECK(test::max_rel_error(k64, expected, 1e-12) < 1e-12);
      // k3 = exp(d) - d - 1 cancels for small d, so float32 is held to an absolute bound.
      const torch::Tensor k32 =
          kl_penalty(test::to_tensor(c["logp"], torch::kFloat32), test::to_tensor(c["ref"], torch::kFloat32), est);
      CHECK((k32.to(torch::kFloat64) - expected).abs().max().item<double>() <
            2e-6 * std::max(1.0, expected.abs().max().item<double>()));
    }
  }
}

TEST_CASE("entropy from logits matches the reference (absolute 1e-12 / 1e-5)", "[loss]") {
  for (const auto& c : test::load_fixture("entropy.json")["cases"]) {
    SECTION(c["name"].get<std::string>()) {
      const int64_t rows = c["rows"].get<int64_t>(), vocab = c["vocab"].get<int64_t>();
      const torch::Tensor expected = test::to_tensor(c["expected"], torch::kFloat64);
      const torch::Tensor logits = test::to_tensor(c["logits"], torch::kFloat64).view({rows, vocab});
      // Absolute: peaked rows have entropy ~0 computed as a difference of numbers near 50.
      CHECK((entropy_from_logits(logits) - expected).abs().max().item<double>() < 1e-12);
      CHECK(
          (entropy_from_logits(logits.to(torch::kFloat32)).to(torch::kFloat64) - expected).abs().max().item<double>() <
          1e-5);
    }
  }
}

TEST_CASE("micro-split invariance: summed micro losses and grads equal the whole batch", "[loss][invariance]") {
  for (const auto& c : test::load_fixture("policy_loss.json")["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const Inputs in = inputs_of(c, torch::kFloat64);
    const int64_t b = static_cast<int64_t>(sequence_spans(in.seq_index).size());
    for (const std::string& mode_name : kModes) {
      const LossAggMode mode = *parse_enum<LossAggMode>(mode_name);
      const LossDenominators whole = denominators_of(c);
      const torch::Tensor full = split_loss(in, options_of(c), mode, whole, b, false);
      const torch::Tensor full_grad = torch::autograd::grad({full}, {in.logp})[0];
      const double gscale = full_grad.abs().max().item<double>();
      for (int64_t micro = 1; micro < b; ++micro) {
        INFO(name << " / " << mode_name << " / micro " << micro);
        const torch::Tensor split = split_loss(in, options_of(c), mode, whole, micro, false);
        const torch::Tensor split_grad = torch::autograd::grad({split}, {in.logp})[0];
        CHECK(test::rel_error(split.item<double>(), full.item<double>(), 1e-300) < 1e-12);
        CHECK(test::max_rel_error(split_grad, full_grad, gscale) < 1e-12);
      }
    }
  }
}

TEST_CASE("control: per-micro denominators break the invariance the test checks", "[loss][invariance]") {
  // The bug other frameworks ship (loss scale changing with micro size) must fail the same check.
  for (const auto& c : test::load_fixture("policy_loss.json")["cases"]) {
    if (c["name"].get<std::string>() != "random_large_T200") continue;
    const Inputs in = inputs_of(c, torch::kFloat64);
    const int64_t b = static_cast<int64_t>(sequence_spans(in.seq_index).size());
    for (const std::string& mode_name : kModes) {
      const LossAggMode mode = *parse_enum<LossAggMode>(mode_name);
      const double full = split_loss(in, options_of(c), mode, denominators_of(c), b, false).item<double>();
      const double broken = split_loss(in, options_of(c), mode, denominators_of(c), 2, true).item<double>();
      INFO(mode_name);
      CHECK(test::rel_error(broken, full) > 1e-3);
    }
  }
}

TEST_CASE("zero denominators give a zero loss with zero gradient, flagged, no NaN", "[loss]") {
  const torch::Tensor logp = torch::randn({6}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor mask = torch::zeros({6}, torch::kFloat64);
  const torch::Tensor idx = torch::tensor({0, 0, 0, 1, 1, 1}, torch::kInt64);
  const PolicyLoss pl = policy_loss(logp, logp.detach(), torch::ones({6}, torch::kFloat64), mask, idx, {});
  for (const std::string& mode_name : kModes) {
    const AggregatedLoss agg = aggregate_loss(pl.loss, mask, idx, *parse_enum<LossAggMode>(mode_name), {0, 0, 16});
    CHECK(agg.zero_denominator);
    CHECK(agg.loss.item<double>() == 0.0);
    const torch::Tensor g = torch::autograd::grad({agg.loss}, {logp}, {}, /*retain_graph=*/true)[0];
    CHECK(g.abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("an empty micro contributes zero", "[loss]") {
  const torch::Tensor empty = torch::zeros({0}, torch::kFloat64);
  const torch::Tensor idx = torch::zeros({0}, torch::kInt64);
  const PolicyLoss pl = policy_loss(empty, empty, empty, empty, idx, {});
  const AggregatedLoss agg = aggregate_loss(pl.loss, empty, idx, LossAggMode::kSeqMeanTokenMean, {10, 3, 16});
  CHECK(agg.loss.item<double>() == 0.0);
}

TEST_CASE("first-update ratio is exactly one when old_logp equals logp", "[loss]") {
  const torch::Tensor logp = torch::randn({50}, torch::kFloat32);
  const torch::Tensor idx = torch::arange(50, torch::kInt64).div(10, "floor");
  for (RatioKind kind : {RatioKind::kToken, RatioKind::kSequence}) {
    PolicyLossOptions o;
    o.ratio = kind;
    const PolicyLoss pl = policy_loss(logp, logp.clone(), torch::randn({50}), torch::ones({50}), idx, o);
    CHECK((pl.ratio - 1).abs().max().item<float>() == 0.0f);
  }
}

TEST_CASE("every numerics fixture holds its cases (the loops above cannot pass vacuously)", "[loss]") {
  CHECK(test::load_fixture("policy_loss.json")["cases"].size() >= 7);
  CHECK(test::load_fixture("kl.json")["cases"].size() >= 6);
  CHECK(test::load_fixture("entropy.json")["cases"].size() >= 4);
  CHECK(test::load_fixture("advantage.json")["cases"].size() >= 8);
  CHECK(test::load_fixture("metrics.json")["cases"].size() >= 5);
}
