// allocate_optimizer_state (core/grpo/adamw_state.h): the moments it allocates up front are the
// ones the first step would create, so AdamW and AdamW8bit step bitwise as without it; a state
// that exists is kept.
#include <torch/optim/adamw.h>
#include <catch2/catch.hpp>

#include <type_traits>
#include <vector>

#include "core/grpo/adamw_8bit.h"
#include "core/grpo/adamw_state.h"

using namespace tandem;

namespace {

// Five steps of fixed gradients on copies of the same weights; allocate_at: the step before which
// the state is allocated (-1: never), perturb: add to the first moment once allocated (a control).
template <typename Optimizer>
std::vector<torch::Tensor> run(int allocate_at, double perturb = 0) {
  torch::Generator gen = at::detail::createCPUGenerator(21);
  std::vector<torch::Tensor> ps{torch::randn({64, 128}, gen).requires_grad_(),
                                torch::randn({300}, gen).requires_grad_()};
  Optimizer opt(ps, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  for (int step = 0; step < 5; ++step) {
    if (step == allocate_at) {
      allocate_optimizer_state(opt);
      if (perturb != 0) {
        if constexpr (std::is_same_v<Optimizer, torch::optim::AdamW>) {
          auto& s = static_cast<torch::optim::AdamWParamState&>(*opt.state().at(ps[1].unsafeGetTensorImpl()));
          s.exp_avg().add_(perturb);
        }
      }
    }
    for (auto& p : ps) p.mutable_grad() = torch::randn(p.sizes(), gen);
    opt.step();
  }
  return ps;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("allocate_optimizer_state: AdamW steps bitwise as with its lazy state", "[adamw_state]") {
  torch::Generator gen = at::detail::createCPUGenerator(1);
  std::vector<torch::Tensor> ps{torch::randn({8, 4}, gen).requires_grad_()};
  torch::optim::AdamW opt(ps, torch::optim::AdamWOptions(1e-2));
  CHECK(opt.state().empty());
  allocate_optimizer_state(opt);
  REQUIRE(opt.state().size() == 1);
  const auto& s = static_cast<torch::optim::AdamWParamState&>(*opt.state().begin()->second);
  CHECK(s.step() == 0);
  CHECK(torch::equal(s.exp_avg(), torch::zeros({8, 4})));

  const auto lazy = run<torch::optim::AdamW>(-1);
  CHECK(same(run<torch::optim::AdamW>(0), lazy));
  CHECK(same(run<torch::optim::AdamW>(3), lazy));  // after steps: the state is kept, not reset
  // Control: a first moment changed after allocation changes the steps.
  CHECK_FALSE(same(run<torch::optim::AdamW>(0, 1e-3), lazy));
}

TEST_CASE("allocate_optimizer_state: AdamW8bit's zero codes and moments, the same steps", "[adamw_state]") {
  std::vector<torch::Tensor> ps{torch::zeros({64, 128}).requires_grad_(), torch::zeros({300}).requires_grad_()};
  AdamW8bit opt(ps, torch::optim::AdamWOptions(1e-2));
  CHECK(opt.state_bytes() == 0);
  allocate_optimizer_state(opt);
  CHECK(opt.state_bytes() == 2 * (8192 + 32 * 4) + 2 * 300 * 4);  // codes and scales; float32 for the small one
  const auto lazy = run<AdamW8bit>(-1);
  CHECK(same(run<AdamW8bit>(0), lazy));
  CHECK(same(run<AdamW8bit>(3), lazy));
  CHECK_FALSE(same(run<AdamW8bit>(-1), run<torch::optim::AdamW>(-1)));  // control: the comparison sees a change
}
