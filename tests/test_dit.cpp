// The diffusion transformer: shapes and dtypes, the adaLN-Zero start, classifier-free guidance,
// gradients, and config checks.
#include <catch2/catch.hpp>

#include "dit_test_model.h"
#include "models/dit/dit.h"
#include "models/dit/sampler.h"

using namespace tandem::models;
using tandem::test::perturbed_dit;
using tandem::test::tiny_dit_config;

TEST_CASE("Dit: output has the input's shape and the model's dtype", "[dit]") {
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16}) {
    Dit model = perturbed_dit(dtype, 1);
    const torch::Tensor x = torch::randn({5, 3, 8, 8});
    const torch::Tensor sigma = torch::rand({5});
    const torch::Tensor labels = torch::tensor({0, 1, 2, 3, 1}, torch::kInt64);  // 3 = the null class
    const torch::Tensor v = model->forward(x, sigma, labels);
    CHECK(v.sizes() == x.sizes());
    CHECK(v.scalar_type() == dtype);
    CHECK(torch::isfinite(v).all().item<bool>());
    CHECK(v.abs().max().item<double>() > 0);
  }
}

TEST_CASE("Dit: patch sizes, channels and a batch of one", "[dit]") {
  for (const auto& [size, channels, patch] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{16, 3, 4}, {16, 1, 2}, {12, 3, 3}, {8, 3, 8}}) {
    DitConfig c = tiny_dit_config();
    c.image_size = size;
    c.channels = channels;
    c.patch_size = patch;
    Dit model = perturbed_dit(torch::kFloat32, 2, c);
    CHECK(model->pos_embed.sizes() == std::vector<int64_t>{1, c.num_patches(), c.hidden_size});
    const torch::Tensor x = torch::randn({1, channels, size, size});
    const torch::Tensor v = model->forward(x, torch::full({1}, 0.5), torch::zeros({1}, torch::kInt64));
    CHECK(v.sizes() == x.sizes());
  }
}

TEST_CASE("Dit: adaLN-Zero start predicts v = 0 exactly", "[dit]") {
  Dit model(tiny_dit_config());
  const torch::Tensor v =
      model->forward(torch::randn({4, 3, 8, 8}), torch::rand({4}), torch::zeros({4}, torch::kInt64));
  CHECK(v.abs().max().item<double>() == 0.0);
}

TEST_CASE("Dit: the output depends on the timestep, the class and every pixel patch", "[dit]") {
  Dit model = perturbed_dit(torch::kFloat64, 3);
  const torch::Tensor x = torch::randn({1, 3, 8, 8}, torch::kFloat64);
  const torch::Tensor s = torch::full({1}, 0.3, torch::kFloat64), y = torch::ones({1}, torch::kInt64);
  const torch::Tensor v = model->forward(x, s, y);
  CHECK_FALSE(torch::allclose(v, model->forward(x, torch::full({1}, 0.31, torch::kFloat64), y)));
  CHECK_FALSE(torch::allclose(v, model->forward(x, s, torch::full({1}, 2, torch::kInt64))));
  torch::Tensor x2 = x.clone();
  x2[0][0][7][7] += 1.0;  // the last patch
  CHECK_FALSE(torch::allclose(v, model->forward(x2, s, y)));
}

TEST_CASE("Dit: every parameter gets a finite gradient", "[dit]") {
  Dit model = perturbed_dit(torch::kFloat32, 4);
  const torch::Tensor v = model->forward(torch::randn({3, 3, 8, 8}), torch::rand({3}), torch::tensor({0, 1, 3}));
  v.pow(2).mean().backward();
  for (const auto& item : model->named_parameters()) {
    INFO(item.key());
    REQUIRE(item.value().grad().defined());
    CHECK(torch::isfinite(item.value().grad()).all().item<bool>());
    CHECK(item.value().grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("guided_velocity: cfg 1 is the conditional pass; other cfg combine both passes", "[dit]") {
  Dit model = perturbed_dit(torch::kFloat64, 5);
  const torch::Tensor x = torch::randn({4, 3, 8, 8}, torch::kFloat64);
  const torch::Tensor s = torch::rand({4}, torch::kFloat64), y = torch::tensor({0, 1, 2, 1});
  const torch::Tensor cond = model->forward(x, s, y);
  CHECK(torch::equal(guided_velocity(*model, x, s, y, 1.0), cond));  // bitwise: cfg 1 returns that very pass
  const torch::Tensor uncond = model->forward(x, s, torch::full({4}, model->config().null_class()));
  const torch::Tensor guided = guided_velocity(*model, x, s, y, 4.5);
  // One forward over 2B rows vs two over B: equal up to float reassociation.
  CHECK(torch::allclose(guided, uncond + 4.5 * (cond - uncond), 1e-12, 1e-12));
  CHECK_FALSE(torch::allclose(guided, cond));
  CHECK(torch::allclose(guided_velocity(*model, x, s, y, 0.0), uncond, 1e-12, 1e-12));
}

TEST_CASE("check_dit_config names the bad field", "[dit]") {
  DitConfig c = tiny_dit_config();
  c.patch_size = 3;
  CHECK_THROWS_WITH(check_dit_config(c), Catch::Contains("patch_size 3 does not divide image_size 8"));
  c = tiny_dit_config();
  c.num_heads = 5;
  CHECK_THROWS_WITH(check_dit_config(c), Catch::Contains("num_heads 5"));
  CHECK_NOTHROW(check_dit_config(tiny_dit_config()));
}
