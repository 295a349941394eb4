// The DiT samplers: per-sample noise streams, SDE rollouts with log-probs, the Euler ODE, and the
// recomputed transition log-prob training relies on (ratio exactly 1 under the rollout weights).
#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>

#include "dit_test_model.h"
#include "models/dit/sampler.h"

using namespace tandem::models;
using tandem::test::perturbed_dit;

namespace {

std::vector<NoiseKey> keys_for(const std::vector<int64_t>& samples) {
  std::vector<NoiseKey> keys;
  for (const int64_t s : samples) keys.push_back({7, 3, s / 4, s % 4});
  return keys;
}

torch::Tensor labels_for(const std::vector<int64_t>& samples) {
  std::vector<int64_t> y;
  for (const int64_t s : samples) y.push_back((s / 4) % 3);
  return torch::tensor(y, torch::kInt64);
}

}  // namespace

TEST_CASE("noise_seed separates every key field", "[flow_sde]") {
  const NoiseKey base{1, 2, 3, 4};
  const uint64_t s = noise_seed(base);
  CHECK(noise_seed(base) == s);
  CHECK(noise_seed({2, 2, 3, 4}) != s);
  CHECK(noise_seed({1, 3, 3, 4}) != s);
  CHECK(noise_seed({1, 2, 4, 4}) != s);
  CHECK(noise_seed({1, 2, 3, 5}) != s);
  CHECK(noise_seed({1, 2, 4, 3}) != noise_seed({1, 2, 3, 4}));  // fields are not interchangeable
}

TEST_CASE("NoiseStreams: a row depends on its key only", "[flow_sde]") {
  NoiseStreams all(keys_for({0, 1, 2, 3}));
  NoiseStreams one(keys_for({2}));
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  for (int draw = 0; draw < 3; ++draw) {
    const torch::Tensor a = all.draw({3, 8, 8}, opts), b = one.draw({3, 8, 8}, opts);
    CHECK(a.sizes() == std::vector<int64_t>{4, 3, 8, 8});
    CHECK(torch::equal(a[2], b[0]));
  }
  CHECK(NoiseStreams({}).draw({3, 8, 8}, opts).size(0) == 0);
}

TEST_CASE("sample_sde: trajectory, log-prob and sigma shapes", "[flow_sde]") {
  Dit model = perturbed_dit(torch::kFloat32, 11);
  const SdeSamplerOptions o{6, 0.7, 3.0, 1.0};
  const auto samples = std::vector<int64_t>{0, 1, 5};
  const SdeRollout r = sample_sde(*model, labels_for(samples), keys_for(samples), o);
  CHECK(r.latents.sizes() == std::vector<int64_t>{3, 7, 3, 8, 8});
  CHECK(r.log_probs.sizes() == std::vector<int64_t>{3, 6});
  CHECK(torch::equal(r.sigmas, sigma_schedule(6, 3.0)));
  CHECK(r.latents.scalar_type() == torch::kFloat32);
  CHECK(torch::isfinite(r.latents).all().item<bool>());
  CHECK(torch::isfinite(r.log_probs).all().item<bool>());
  CHECK_FALSE(r.latents.requires_grad());
  // x_0 is each stream's first draw.
  NoiseStreams noise(keys_for(samples));
  CHECK(torch::equal(r.latents.select(1, 0), noise.draw({3, 8, 8}, torch::kFloat32)));
}

TEST_CASE("sample_sde: a sample's trajectory does not depend on its batch", "[flow_sde]") {
  Dit model = perturbed_dit(torch::kFloat64, 12);
  const SdeSamplerOptions o{5, 0.7, 3.0, 2.0};
  const std::vector<int64_t> full{0, 1, 2, 3, 4, 5}, sub{4, 1};
  const SdeRollout a = sample_sde(*model, labels_for(full), keys_for(full), o);
  const SdeRollout b = sample_sde(*model, labels_for(sub), keys_for(sub), o);
  for (size_t i = 0; i < sub.size(); ++i) {
    const int64_t row = sub[i], sub_row = static_cast<int64_t>(i);
    // Noise is identical by construction; the model's batched matmuls may reassociate.
    CHECK(torch::equal(a.latents[row][0], b.latents[sub_row][0]));
    CHECK(torch::allclose(a.latents[row], b.latents[sub_row], 1e-12, 1e-12));
    CHECK(torch::allclose(a.log_probs[row], b.log_probs[sub_row], 1e-12, 1e-12));
  }
  // Same call, same batch: bitwise (the same shapes through the same kernels, single-threaded per
  // call here).
  const SdeRollout c = sample_sde(*model, labels_for(full), keys_for(full), o);
  CHECK(torch::equal(a.latents, c.latents));
  CHECK(torch::equal(a.log_probs, c.log_probs));
}

TEST_CASE("sample_sde with noise_level 0 follows the Euler ODE path", "[flow_sde]") {
  for (const torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
    Dit model = perturbed_dit(dtype, 13);
    const std::vector<int64_t> s{0, 1, 2};
    const SdeRollout sde = sample_sde(*model, labels_for(s), keys_for(s), {8, 0.0, 3.0, 1.5});
    const torch::Tensor ode = sample_ode(*model, labels_for(s), keys_for(s), {8, 3.0, 1.5});
    // Bitwise: both run the same batch through the same forwards, and with noise 0 the SDE step
    // is the Euler step exactly (test_flow_sde.cpp).
    CHECK(torch::equal(sde.latents.select(1, 8), ode));
    // With noise the endpoint moves away from the ODE's.
    const SdeRollout noisy = sample_sde(*model, labels_for(s), keys_for(s), {8, 0.7, 3.0, 1.5});
    CHECK((noisy.latents.select(1, 8) - ode).abs().max().item<double>() > 1e-2);
  }
}

TEST_CASE("transition_log_prob recomputes the rollout's log-probs bitwise (ratio exactly 1)", "[flow_sde]") {
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kFloat64}) {
    for (const double cfg : {1.0, 3.0}) {
      INFO("dtype " << dtype << " cfg " << cfg);
      Dit model = perturbed_dit(dtype, 14);
      const std::vector<int64_t> s{0, 1, 2, 3, 6};
      const SdeSamplerOptions o{4, 0.8, 3.0, cfg};
      const SdeRollout r = sample_sde(*model, labels_for(s), keys_for(s), o);
      const int64_t b = static_cast<int64_t>(s.size());
      const double sigma_max = r.sigmas[1].item<double>();
      for (int64_t j = 0; j < o.steps; ++j) {
        for (const bool uncond_grad : {true, false}) {
          const SdeStepResult st = transition_log_prob(*model, r.latents.select(1, j), r.latents.select(1, j + 1),
                                                       r.sigmas[j].expand({b}), r.sigmas[j + 1].expand({b}),
                                                       labels_for(s), o.noise_level, sigma_max, cfg, uncond_grad);
          CHECK(st.log_prob.requires_grad());
          // Bitwise by construction: the recompute feeds the same (B) rows through the same
          // guided_velocity (one 2B-row forward under cfg) and the same sde_step as the sampler.
          CHECK(torch::equal(st.log_prob.detach(), r.log_probs.select(1, j)));
          CHECK(torch::exp(st.log_prob.detach() - r.log_probs.select(1, j)).eq(1).all().item<bool>());
        }
      }
    }
  }
}

TEST_CASE("transition_log_prob: per-sample timesteps and gradients into the model", "[flow_sde]") {
  Dit model = perturbed_dit(torch::kFloat64, 15);
  const std::vector<int64_t> s{0, 1, 2};
  const SdeSamplerOptions o{5, 0.7, 3.0, 1.0};
  const SdeRollout r = sample_sde(*model, labels_for(s), keys_for(s), o);
  // Each sample at its own step, as training picks timesteps per sample.
  const std::vector<int64_t> steps{4, 0, 2};
  std::vector<torch::Tensor> x, x_next;
  for (size_t i = 0; i < s.size(); ++i) {
    x.push_back(r.latents[static_cast<int64_t>(i)][steps[i]]);
    x_next.push_back(r.latents[static_cast<int64_t>(i)][steps[i] + 1]);
  }
  const torch::Tensor idx = torch::tensor(steps, torch::kInt64);
  const SdeStepResult st =
      transition_log_prob(*model, torch::stack(x), torch::stack(x_next), r.sigmas.index({idx}),
                          r.sigmas.index({idx + 1}), labels_for(s), o.noise_level, r.sigmas[1].item<double>(), 1.0);
  for (size_t i = 0; i < s.size(); ++i)
    CHECK(st.log_prob[static_cast<int64_t>(i)].item<double>() ==
          Approx(r.log_probs[static_cast<int64_t>(i)][steps[i]].item<double>()).epsilon(1e-12));
  st.log_prob.sum().backward();
  CHECK(model->final_layer->linear->weight.grad().abs().sum().item<double>() > 0);
}

namespace {

// Every parameter's gradient of `loss`, flattened into one vector.
torch::Tensor gradient_of(Dit& model, const torch::Tensor& loss) {
  model->zero_grad();
  loss.backward();
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters())
    flat.push_back(p.grad().defined() ? p.grad().flatten().clone() : torch::zeros({p.numel()}, p.options()));
  return torch::cat(flat);
}

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

}  // namespace

TEST_CASE("guided velocity gradient: full is the formula's, cond_only the formula's with v_uncond detached",
          "[flow_sde]") {
  Dit model = perturbed_dit(torch::kFloat64, 21);
  const torch::Tensor x = torch::randn({3, 3, 8, 8}, torch::kFloat64);  // (B, C, H, W)
  const torch::Tensor w = torch::randn({3, 3, 8, 8}, torch::kFloat64);  // (B, C, H, W) upstream gradient
  const torch::Tensor s = torch::rand({3}, torch::kFloat64);            // (B)
  const torch::Tensor y = torch::tensor({0, 2, 1}), null = torch::full({3}, model->config().null_class());  // (B)
  const double g = 4.0;
  // The reference: two separate forwards and the formula written out.
  auto reference = [&](bool detach_uncond) {
    const torch::Tensor cond = model->forward(x, s, y);  // (B, C, H, W)
    torch::Tensor uncond;
    if (detach_uncond) {
      torch::NoGradGuard no_grad;
      uncond = model->forward(x, s, null);
    } else {
      uncond = model->forward(x, s, null);
    }
    return gradient_of(model, ((uncond + g * (cond - uncond)) * w).sum());
  };
  const torch::Tensor want_full = reference(false), want_cond_only = reference(true);
  const torch::Tensor v_full = guided_velocity(*model, x, s, y, g, /*uncond_grad=*/true);
  const torch::Tensor full = gradient_of(model, (v_full * w).sum());
  const torch::Tensor v_cond_only = guided_velocity(*model, x, s, y, g, /*uncond_grad=*/false);
  const torch::Tensor cond_only = gradient_of(model, (v_cond_only * w).sum());
  CHECK(torch::equal(v_full.detach(), v_cond_only.detach()));  // the choice changes gradients, never values
  CHECK(rel_diff(full, want_full) < 1e-12);
  CHECK(rel_diff(cond_only, want_cond_only) < 1e-12);
  // cond_only is g times the conditional pass's own gradient.
  CHECK(rel_diff(cond_only, gradient_of(model, (g * model->forward(x, s, y) * w).sum())) < 1e-12);
  // Control: the unconditional pass's (1 - g) share is far from nothing, so the two differ.
  CHECK(rel_diff(cond_only, want_full) > 1e-2);
  // The default is the full gradient (the previous behaviour).
  CHECK(rel_diff(gradient_of(model, (guided_velocity(*model, x, s, y, g) * w).sum()), want_full) < 1e-12);
}

TEST_CASE("bfloat16 model: latents and log-probs stay float32", "[flow_sde]") {
  Dit model = perturbed_dit(torch::kBFloat16, 16);
  const std::vector<int64_t> s{0, 1};
  const SdeRollout r = sample_sde(*model, labels_for(s), keys_for(s), {3, 0.7, 3.0, 2.0});
  CHECK(r.latents.scalar_type() == torch::kFloat32);
  CHECK(r.log_probs.scalar_type() == torch::kFloat32);
  CHECK(torch::isfinite(r.log_probs).all().item<bool>());
}

TEST_CASE("sampler speed on the image recipe's model (informational)", "[.][bench]") {
  DitConfig c;  // configs/image.yaml: 16x16x3, patch 4, hidden 64, 2 layers, 4 heads, 4 classes
  Dit model(c);
  std::vector<int64_t> s;
  for (int64_t i = 0; i < 32; ++i) s.push_back(i);
  std::vector<int64_t> y;
  for (const int64_t i : s) y.push_back(i % 4);
  const auto start = std::chrono::steady_clock::now();
  const SdeRollout r = sample_sde(*model, torch::tensor(y), keys_for(s), {10, 0.7, 3.0, 1.0});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "sample_sde: 32 samples x 10 steps in " << secs << " s (" << 32 * 10 / secs << " sample-steps/s)\n";
  CHECK(r.latents.size(0) == 32);
}
