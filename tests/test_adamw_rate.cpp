// Setting an AdamW's rate reaches every parameter group and the update it makes.
#include <catch2/catch.hpp>

#include "core/grpo/adamw_rate.h"

using namespace tandem;

TEST_CASE("set_learning_rate sets every group; the step runs at it", "[adamw_rate]") {
  torch::Tensor a = torch::ones({2}, torch::kFloat64).requires_grad_(),
                b = torch::ones({3}, torch::kFloat64).requires_grad_();
  torch::optim::AdamW opt({a}, torch::optim::AdamWOptions(1.0).weight_decay(0));
  opt.add_param_group(torch::optim::OptimizerParamGroup(
      {b}, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(2.0).weight_decay(0))));
  set_learning_rate(opt, 0.25);
  CHECK(learning_rate_of(opt) == 0.25);
  for (auto& g : opt.param_groups()) CHECK(static_cast<torch::optim::AdamWOptions&>(g.options()).lr() == 0.25);
  (a.sum() + b.sum()).backward();
  opt.step();
  // Adam's first step moves each weight by lr (the normalised gradient is 1), decay 0.
  CHECK(std::abs(a[0].item<double>() - 0.75) < 1e-6);
  CHECK(std::abs(b[0].item<double>() - 0.75) < 1e-6);
}
