// The FlowGRPO SDE transition and sigma schedule against the independent float64 reference
// (tests/fixtures/flow_sde.json from scripts/fixtures/make_flow_sde.py).
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>

#include "fixtures.h"
#include "models/dit/flow_sde.h"

using namespace tandem;
using namespace tandem::models;

namespace {

struct Case {
  torch::Tensor x, v, eps, given, sigma, sigma_next;  // latents (B, C, H, W); sigmas (B)
  double noise_level = 0, sigma_max = 0;
};

Case case_of(const nlohmann::json& c, torch::Dtype dtype) {
  std::vector<int64_t> shape{c["batch"].get<int64_t>()};
  for (const auto& d : c["shape"]) shape.push_back(d.get<int64_t>());
  auto latent = [&](const char* key) { return test::to_tensor(c[key], dtype).view(shape); };
  Case k;
  k.x = latent("x");
  k.v = latent("v");
  k.eps = latent("eps");
  k.given = latent("x_next_given");
  k.sigma = test::to_tensor(c["sigma"], dtype);
  k.sigma_next = test::to_tensor(c["sigma_next"], dtype);
  k.noise_level = c["noise_level"].get<double>();
  k.sigma_max = c["sigma_max"].get<double>();
  return k;
}

torch::Tensor expected(const nlohmann::json& c, const char* key) {
  return test::to_tensor(c["expected"][key], torch::kFloat64);
}

torch::Tensor flat(const torch::Tensor& t) { return t.reshape({-1}); }

// The fixture's cases, parsed once. Held here because load_fixture returns a temporary, and a
// range-for over `load_fixture(...)["cases"]` would iterate a destroyed object (zero cases).
const nlohmann::json& fixture_cases() {
  static const nlohmann::json fixture = test::load_fixture("flow_sde.json");
  REQUIRE(fixture["cases"].size() == 9);
  return fixture["cases"];
}

}  // namespace

TEST_CASE("sigma_schedule matches the reference (float64 1e-15 absolute)", "[flow_sde]") {
  for (const auto& c : fixture_cases()) {
    INFO(c["name"].get<std::string>());
    const torch::Tensor s = sigma_schedule(c["steps"].get<int64_t>(), c["shift"].get<double>());
    const torch::Tensor ref = test::to_tensor(c["sigmas"], torch::kFloat64);
    REQUIRE(s.sizes() == ref.sizes());
    CHECK((s - ref).abs().max().item<double>() < 1e-15);
    CHECK(s[0].item<double>() == 1.0);  // exactly: the sigma == 1 guard depends on it
    CHECK(s[-1].item<double>() == 0.0);
  }
  // A shift whose formula rounds at t = 1 (0.3 / (1 + (0.3 - 1)) = 1 - 2^-52 in float64).
  CHECK(sigma_schedule(10, 0.3)[0].item<double>() == 1.0);
}

TEST_CASE("sde_step matches the reference in float64 (1e-12 relative, floor 1)", "[flow_sde]") {
  for (const auto& c : fixture_cases()) {
    SECTION(c["name"].get<std::string>()) {
      const Case k = case_of(c, torch::kFloat64);
      const SdeStepResult st = sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, k.eps);
      CHECK(st.prev.scalar_type() == torch::kFloat64);
      CHECK(test::max_rel_error(flat(st.mean), expected(c, "mean"), 1.0) < 1e-12);
      CHECK(test::max_rel_error(st.std_dev_t, expected(c, "std_dev_t"), 1.0) < 1e-12);
      CHECK(test::max_rel_error(st.step_std, expected(c, "step_std"), 1.0) < 1e-12);
      CHECK(test::max_rel_error(flat(st.prev), expected(c, "prev"), 1.0) < 1e-12);
      CHECK(test::max_rel_error(st.log_prob, expected(c, "log_prob"), 1.0) < 1e-12);
      // Evaluating a given x_next (what training recomputes): same mean, its own log-prob.
      const SdeStepResult ev =
          sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, k.given, SdeGiven::kPrev);
      CHECK(torch::equal(ev.prev, k.given));
      CHECK(torch::equal(ev.mean, st.mean));
      CHECK(test::max_rel_error(ev.log_prob, expected(c, "log_prob_given"), 1.0) < 1e-12);
      CHECK(test::max_rel_error(flat(euler_step(k.x, k.v, k.sigma, k.sigma_next)), expected(c, "euler"), 1.0) < 1e-12);
    }
  }
}

TEST_CASE("sde_step matches the reference in float32 (1e-5 relative, floor 1)", "[flow_sde]") {
  for (const auto& c : fixture_cases()) {
    SECTION(c["name"].get<std::string>()) {
      const Case k = case_of(c, torch::kFloat32);
      const SdeStepResult st = sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, k.eps);
      CHECK(st.prev.scalar_type() == torch::kFloat32);
      CHECK(test::max_rel_error(flat(st.mean), expected(c, "mean"), 1.0) < 1e-5);
      CHECK(test::max_rel_error(st.std_dev_t, expected(c, "std_dev_t"), 1.0) < 1e-5);
      CHECK(test::max_rel_error(flat(st.prev), expected(c, "prev"), 1.0) < 1e-5);
      CHECK(test::max_rel_error(st.log_prob, expected(c, "log_prob"), 1.0) < 1e-5);
      const SdeStepResult ev =
          sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, k.given, SdeGiven::kPrev);
      CHECK(test::max_rel_error(ev.log_prob, expected(c, "log_prob_given"), 1.0) < 1e-5);
    }
  }
}

TEST_CASE("sde_step runs bfloat16 inputs in float32, like the reference", "[flow_sde]") {
  const nlohmann::json c = fixture_cases()[0];
  const Case k = case_of(c, torch::kFloat32);
  const SdeStepResult st = sde_step(k.x.to(torch::kBFloat16), k.v.to(torch::kBFloat16), k.sigma, k.sigma_next,
                                    k.noise_level, k.sigma_max, k.eps);
  CHECK(st.mean.scalar_type() == torch::kFloat32);
  CHECK(st.log_prob.scalar_type() == torch::kFloat32);
  // Only the inputs were rounded to bfloat16 (8 bits of mantissa).
  CHECK(test::max_rel_error(flat(st.mean), expected(c, "mean"), 1.0) < 5e-2);
}

TEST_CASE("sde_step with noise_level 0 is the Euler step, bitwise", "[flow_sde]") {
  const nlohmann::json c = fixture_cases()[0];
  for (const torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
    const Case k = case_of(c, dtype);
    const SdeStepResult st = sde_step(k.x, k.v, k.sigma, k.sigma_next, 0.0, k.sigma_max, k.eps);
    // Bitwise on any host: with var_t = 0 the SDE mean is x * 1 + v * 1 * dt, elementwise ops whose
    // extra factors are exact (x * 1 = x), so it rounds as x + v * dt does.
    CHECK(torch::equal(st.mean, euler_step(k.x, k.v, k.sigma, k.sigma_next)));
    CHECK(torch::equal(st.prev, st.mean));
    CHECK(st.std_dev_t.abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("the log-prob of a sampled x_next evaluated again is bitwise the same", "[flow_sde]") {
  for (const auto& c : fixture_cases()) {
    INFO(c["name"].get<std::string>());
    for (const torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
      const Case k = case_of(c, dtype);
      const SdeStepResult st = sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, k.eps);
      const SdeStepResult ev =
          sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, st.prev, SdeGiven::kPrev);
      CHECK(torch::equal(ev.log_prob, st.log_prob));  // the same elementwise ops on the same tensors
    }
  }
}

TEST_CASE("the log-prob's gradient flows through the mean only", "[flow_sde]") {
  const nlohmann::json c = fixture_cases()[0];
  Case k = case_of(c, torch::kFloat64);
  k.v.requires_grad_(true);
  const torch::Tensor prev = k.given.clone().requires_grad_(true);
  const SdeStepResult st = sde_step(k.x, k.v, k.sigma, k.sigma_next, k.noise_level, k.sigma_max, prev, SdeGiven::kPrev);
  const auto grads = torch::autograd::grad({st.log_prob.sum()}, {k.v, prev}, {}, /*retain_graph=*/std::nullopt,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  CHECK(grads[0].defined());
  CHECK(grads[0].abs().sum().item<double>() > 0);
  CHECK_FALSE(grads[1].defined());
}

TEST_CASE("with the exact velocity of Gaussian data the SDE ends at the data distribution", "[flow_sde]") {
  // x0 ~ N(mu, s0^2) per element, x_t = (1 - sigma) x0 + sigma n: E[v | x_t] is linear in x_t.
  // FlowGRPO's SDE keeps the flow's marginals, so its samples end near N(mu, s0^2) (the shifted
  // 50-step discretisation is within a few percent); a wrong sign in either drift term is not.
  const double mu = 0.5, s0 = 0.3;
  auto v_exact = [&](const torch::Tensor& x, double s) {
    const double m = (1 - s) * mu, var = (1 - s) * (1 - s) * s0 * s0 + s * s;
    return s * (x - m) / var - mu - (1 - s) * s0 * s0 * (x - m) / var;
  };
  at::Generator gen = at::detail::createCPUGenerator(99);
  const int64_t n = 20000, steps = 50;
  const torch::Tensor sig = sigma_schedule(steps, 3.0);
  torch::Tensor x = torch::randn({n, 1}, gen, torch::kFloat64);  // (N, 1)
  for (int64_t i = 0; i < steps; ++i) {
    const double s = sig[i].item<double>(), s_next = sig[i + 1].item<double>();
    const torch::Tensor eps = torch::randn({n, 1}, gen, torch::kFloat64);
    x = sde_step(x, v_exact(x, s), torch::full({n}, s, torch::kFloat64), torch::full({n}, s_next, torch::kFloat64), 0.7,
                 sig[1].item<double>(), eps)
            .prev;
  }
  CHECK(x.mean().item<double>() == Approx(mu).margin(0.01));
  CHECK(x.std().item<double>() == Approx(s0).epsilon(0.1));
}
