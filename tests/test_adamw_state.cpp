// allocate_optimizer_state (core/grpo/adamw_state.h): the moments it allocates up front are the
// ones the first step would create, so AdamW and AdamW8bit step bitwise as without it; a state
// that exists is kept.
#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>
#include <catch2/catch.hpp>

#include <functional>
#include <sstream>
#include <vector>

#include "core/grpo/adamw_8bit.h"
#include "core/grpo/adamw_state.h"

using namespace tandem;

namespace {

// Five steps of fixed gradients on copies of the same weights; at step `at` (-1: never) `hook`
// runs on the optimizer (allocate_optimizer_state, or a control's change).
template <typename Optimizer>
std::vector<torch::Tensor> run(int at, const std::function<void(Optimizer&, std::vector<torch::Tensor>&)>& hook = {}) {
  torch::Generator gen = at::detail::createCPUGenerator(21);
  std::vector<torch::Tensor> ps{torch::randn({64, 128}, gen).requires_grad_(),
                                torch::randn({300}, gen).requires_grad_()};
  Optimizer opt(ps, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  for (int step = 0; step < 5; ++step) {
    if (step == at) hook ? hook(opt, ps) : allocate_optimizer_state(opt);
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
  CHECK_FALSE(same(run<torch::optim::AdamW>(0,
                                            [](torch::optim::AdamW& opt, std::vector<torch::Tensor>& ps) {
                                              allocate_optimizer_state(opt);
                                              auto& s = static_cast<torch::optim::AdamWParamState&>(
                                                  *opt.state().at(ps[1].unsafeGetTensorImpl()));
                                              s.exp_avg().add_(1e-3);
                                            }),
                   lazy));
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
  // Control: moments that are not zeros (another optimizer's after 3 steps, loaded at step 3) change the steps.
  std::vector<torch::Tensor> others{torch::randn({64, 128}).requires_grad_(), torch::randn({300}).requires_grad_()};
  AdamW8bit other(others, torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 3; ++step) {
    for (auto& p : others) p.mutable_grad() = torch::randn(p.sizes());
    other.step();
  }
  torch::serialize::OutputArchive saved;
  other.save(saved);
  std::ostringstream bytes;
  saved.save_to(bytes);
  CHECK_FALSE(same(run<AdamW8bit>(3,
                                  [&](AdamW8bit& opt, std::vector<torch::Tensor>&) {
                                    torch::serialize::InputArchive in;
                                    std::istringstream back(bytes.str());
                                    in.load_from(back);
                                    opt.load(in);
                                  }),
                   lazy));
}
