// DESIGN section 3's invariance promise under real mpirun: loss, gradients and parameters do
// not depend on dp size, micro size, token budget or packed vs padded (or auto, per micro), for every loss_agg_mode
// (float64, 1e-10 relative). A control with per-micro denominators must fail the same check.
#include <catch2/catch.hpp>

#include <random>

#include "core/batch/exchange.h"
#include "core/batch/schedule.h"
#include "core/grpo/advantage.h"
#include "mpi_test_util.h"
#include "parallel/gradient_reduction.h"
#include "toy_policy.h"

using namespace tandem;

namespace {

constexpr int64_t kVocab = 16, kHidden = 8, kGroups = 6, kGroupSize = 4, kSteps = 3, kMinis = 2;
constexpr double kTol = 1e-10;

// The step's global rollout; sample ids are layout-independent (group * G + j).
std::vector<ArSample> synthetic_rollout(int64_t step) {
  std::mt19937_64 rng(1000 + step);
  std::uniform_int_distribution<int64_t> tok(1, kVocab - 1), len(0, 9), plen(1, 3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<ArSample> out;
  for (int64_t g = 0; g < kGroups; ++g)
    for (int64_t j = 0; j < kGroupSize; ++j) {
      ArSample s;
      s.prompt_len = plen(rng);
      const int64_t resp = (g + j) % 7 == 0 ? 0 : len(rng);  // some empty responses
      for (int64_t k = 0; k < s.prompt_len + resp; ++k) s.tokens.push_back(tok(rng));
      for (int64_t k = 0; k < resp; ++k) {
        s.response_mask.push_back(u(rng) < 0.85 ? 1 : 0);
        s.rollout_logp.push_back(-std::log(double(kVocab)) + 0.6 * (u(rng) - 0.5));
      }
      s.reward = std::floor(u(rng) * 3);
      s.group_id = g;
      s.index = g * kGroupSize + j;
      out.push_back(std::move(s));
    }
  return out;
}

struct Geometry {
  std::string name;
  std::optional<int64_t> mbs, budget;
  BatchLayout layout = BatchLayout::kPacked;
};

struct RunResult {
  std::vector<double> losses;        // per (step, mini)
  std::vector<torch::Tensor> grads;  // per (step, mini), flattened
  torch::Tensor params;              // after the last step, flattened
};

torch::Tensor flat(const std::vector<torch::Tensor>& ts, bool grads) {
  std::vector<torch::Tensor> parts;
  for (const auto& t : ts) parts.push_back((grads ? t.grad() : t).detach().reshape({-1}).clone());
  return torch::cat(parts);
}

RunResult run(int dp, const Geometry& g, LossAggMode mode, bool per_micro_denominators) {
  auto comm = test::block_communicator(dp);
  test::ToyPolicy model(kVocab, kHidden, 7);
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  UpdateOptions uo;
  uo.loss_agg_mode = mode;
  uo.dtype = torch::kFloat64;
  uo.policy.clip_low = 0.2, uo.policy.clip_high = 0.28, uo.policy.clip_c = 3.0;
  RunResult res;
  for (int64_t step = 0; step < kSteps; ++step) {
    // Each dp rank produces whole groups (group % dp == rank) and computes their advantages.
    std::vector<ArSample> local;
    for (auto& s : synthetic_rollout(step))
      if (s.group_id % dp == comm->rank()) local.push_back(std::move(s));
    std::vector<double> rewards;
    std::vector<int64_t> gids;
    for (const auto& s : local) rewards.push_back(s.reward), gids.push_back(s.group_id);
    const torch::Tensor adv = grpo_advantages(torch::tensor(rewards, torch::kFloat64), torch::tensor(gids), {});
    for (size_t i = 0; i < local.size(); ++i) local[i].advantage = adv[i].item<double>();

    const RolloutDirectory dir = gather_directory(local, *comm);
    ScheduleOptions so;
    so.dp = dp, so.num_mini_batches = kMinis, so.micro_batch_size = g.mbs, so.max_tokens_per_micro = g.budget;
    so.l_norm = 9;
    so.layout = g.layout;
    const Schedule sched = build_schedule(dir.costs, so);
    const std::vector<ArSample> mine = exchange_samples(local, dir, destinations(sched, dir.ids.size()), *comm);
    auto sample_at = [&](int64_t position) {
      const int64_t id = dir.ids[position];
      auto it =
          std::lower_bound(mine.begin(), mine.end(), id, [](const ArSample& s, int64_t v) { return s.index < v; });
      REQUIRE((it != mine.end() && it->index == id));
      return &*it;
    };
    for (const auto& mini : sched.minis) {
      double loss = 0;
      for (const auto& micro : mini.ranks[comm->rank()].micros) {
        std::vector<const ArSample*> ptrs;
        for (int64_t p : micro.samples) ptrs.push_back(sample_at(p));
        LossDenominators d = micro.denominators;
        if (per_micro_denominators) d.n_tok = micro.action_tokens, d.n_seq = micro.action_seqs;  // the bug
        uo.packed = !micro.padded;
        loss += train_micro(model, ptrs, d, uo).loss;
      }
      torch::Tensor l = torch::tensor({loss}, torch::kFloat64);
      comm->all_reduce(l);
      res.losses.push_back(l.item<double>());
      parallel::all_reduce_gradients(model.parameters(), *comm);
      res.grads.push_back(flat(model.parameters(), true));
      opt.step();
      opt.zero_grad();
    }
  }
  res.params = flat(model.parameters(), false);
  return res;
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-300);
}

// Largest relative difference between two runs over losses, gradients and final parameters.
double discrepancy(const RunResult& a, const RunResult& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.losses.size(); ++i)
    worst = std::max(worst, std::abs(a.losses[i] - ref.losses[i]) / std::max(std::abs(ref.losses[i]), 1e-300));
  for (size_t i = 0; i < ref.grads.size(); ++i) worst = std::max(worst, rel(a.grads[i], ref.grads[i]));
  return std::max(worst, rel(a.params, ref.params));
}

constexpr BatchLayout kPacked = BatchLayout::kPacked, kPadded = BatchLayout::kPadded, kAuto = BatchLayout::kAuto;
const std::vector<Geometry> kGeometries = {
    {"mbs1", 1, std::nullopt, kPacked},
    {"mbs2", 2, std::nullopt, kPacked},
    {"mbs-all", 1000, std::nullopt, kPacked},
    {"budget16", std::nullopt, 16, kPacked},
    {"mbs1-padded", 1, std::nullopt, kPadded},
    {"mbs2-padded", 2, std::nullopt, kPadded},
    {"mbs-all-padded", 1000, std::nullopt, kPadded},
    {"budget16-padded", std::nullopt, 16, kPadded},
    {"mbs2-auto", 2, std::nullopt, kAuto},
    {"budget16-auto", std::nullopt, 16, kAuto},
};
const std::vector<LossAggMode> kModes = {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                                         LossAggMode::kSeqMeanTokenSum, LossAggMode::kSeqMeanTokenSumNorm};

}  // namespace

TEST_CASE("loss, gradients and parameters are invariant to dp, micro geometry and layout", "[mpi][invariance]") {
  const int world = test::world_size();
  double worst = 0;
  for (LossAggMode mode : kModes) {
    const RunResult ref = run(1, {"ref", 1000, std::nullopt, kPacked}, mode, false);
    REQUIRE(ref.losses.size() == static_cast<size_t>(kSteps * kMinis));
    CHECK(ref.grads[0].abs().max().item<double>() > 0);
    for (int dp : {1, 2, 4}) {
      if (world % dp != 0) continue;
      for (const Geometry& g : kGeometries) {
        INFO(to_string(mode) << " dp=" << dp << " " << g.name);
        const double d = discrepancy(run(dp, g, mode, false), ref);
        worst = std::max(worst, d);
        CHECK(d < kTol);
      }
    }
  }
  if (test::world_rank() == 0) std::printf("invariance: world %d, max relative discrepancy %.3e\n", world, worst);
}

TEST_CASE("control: per-micro denominators break the same check", "[mpi][invariance]") {
  for (LossAggMode mode : kModes) {
    const RunResult ref = run(1, {"ref", 1000, std::nullopt, kPacked}, mode, false);
    INFO(to_string(mode));
    CHECK(discrepancy(run(1, {"mbs2", 2, std::nullopt, kPacked}, mode, true), ref) > 1e-3);
  }
}

TEST_CASE("a non-finite loss on one rank skips the step on every rank", "[mpi][invariance]") {
  auto comm = test::block_communicator(test::world_size());
  test::ToyPolicy model(kVocab, kHidden, 3);
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.1));
  const torch::Tensor before = flat(model.parameters(), false);
  for (auto& p : model.parameters()) p.mutable_grad() = torch::ones_like(p);
  const bool poisoned_rank = comm->rank() == comm->size() - 1;
  if (poisoned_rank) model.parameters()[1].mutable_grad()[0][0] = std::nan("");
  const StepOutcome skipped = reduce_and_step(model.parameters(), opt, *comm, 1.0, true);
  CHECK_FALSE(skipped.applied);
  CHECK(torch::equal(flat(model.parameters(), false), before));
  for (auto& p : model.parameters()) p.mutable_grad() = torch::ones_like(p);
  const StepOutcome bad_loss = reduce_and_step(model.parameters(), opt, *comm, 1.0, !poisoned_rank);
  CHECK_FALSE(bad_loss.applied);
  for (auto& p : model.parameters()) p.mutable_grad() = torch::ones_like(p);
  const StepOutcome ok = reduce_and_step(model.parameters(), opt, *comm, 0.0, true);
  CHECK(ok.applied);
  CHECK(ok.grad_norm == Approx(std::sqrt(double(kVocab * kHidden * 2 + kHidden * kHidden)) * comm->size()));
  CHECK_FALSE(torch::equal(flat(model.parameters(), false), before));
}

TEST_CASE("sample exchange: nothing lost or duplicated", "[mpi][exchange]") {
  const int world = test::world_size();
  auto comm = test::block_communicator(world);
  std::vector<ArSample> local;
  for (auto& s : synthetic_rollout(5))
    if (s.group_id % world == comm->rank()) local.push_back(std::move(s));
  const RolloutDirectory dir = gather_directory(local, *comm);
  REQUIRE(dir.ids.size() == static_cast<size_t>(kGroups * kGroupSize));
  ScheduleOptions so;
  so.dp = world, so.micro_batch_size = 3;
  const Schedule sched = build_schedule(dir.costs, so);
  const auto mine = exchange_samples(local, dir, destinations(sched, dir.ids.size()), *comm);
  // What arrived is exactly this rank's scheduled set, with content intact.
  std::vector<int64_t> got, want;
  for (const auto& s : mine) got.push_back(s.index);
  for (int64_t p : sched.rank_samples(0, comm->rank())) want.push_back(dir.ids[p]);
  std::sort(want.begin(), want.end());
  CHECK(got == want);
  const auto reference = synthetic_rollout(5);
  for (const auto& s : mine) {
    CHECK(s.tokens == reference[s.index].tokens);
    CHECK(s.rollout_logp == reference[s.index].rollout_logp);
  }
  torch::Tensor count = torch::tensor({static_cast<int64_t>(mine.size())});
  comm->all_reduce(count);
  CHECK(count.item<int64_t>() == kGroups * kGroupSize);
}
