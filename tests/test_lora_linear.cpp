// LoRA on the plain linear layers of the image models (models/layers/lora_linear.h), on the DiT:
// the forward against the plain DiT with W + scale B A written into its weights by the test (float64
// 1e-12), the adapters' gradients against that model's weight gradients by the chain rule
// (dA = s B^T dW, dB = s dW A^T), a frozen base, step 0 and adapters-off equal to the base bit for
// bit (the KL reference of an image LoRA policy), what `all-linear` covers, and the state's checks.
#include <catch2/catch.hpp>

#include <limits>

#include "common/error.h"
#include "dit_test_model.h"
#include "llama_test_util.h"
#include "models/dit/flow_sde.h"
#include "models/dit/sampler.h"
#include "models/layers/lora_linear.h"

using namespace tandem;

namespace {

models::LoraSpec dit_spec(std::vector<std::string> targets = models::lora_dit_names(), int64_t rank = 3) {
  return {rank, 6.0, std::move(targets)};
}

// The adapted layers' (module path, layer) in module order.
std::vector<std::pair<std::string, models::LoraLinearImpl*>> adapted_layers(models::DitImpl& dit) {
  std::vector<std::pair<std::string, models::LoraLinearImpl*>> out;
  for (const auto& m : dit.named_modules("", false))
    if (auto* l = dynamic_cast<models::LoraLinearImpl*>(m.value().get()); l && l->lora().defined())
      out.emplace_back(m.key(), l);
  return out;
}

// A perturbed float64 DiT with adapters whose B is random too (peft's zero B would hide its role).
models::Dit adapted_dit(uint64_t seed, const models::LoraSpec& spec) {
  models::Dit dit = test::perturbed_dit(torch::kFloat64, seed);
  models::attach_lora(*dit, spec, 7);
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed + 1);
  for (auto& [name, l] : adapted_layers(*dit))
    l->lora().b.copy_(torch::randn(l->lora().b.sizes(), gen, torch::kFloat64));
  return dit;
}

// A plain DiT (no adapters) holding `dit`'s base weights (a DiT's init draws from the global
// generator, so building one with the same seed is not enough).
models::Dit base_copy(models::Dit& dit) {
  models::Dit plain = test::perturbed_dit(torch::kFloat64, 1);
  models::DitFlow(plain).load_tensors(models::DitFlow(dit).named_tensors(), "the adapted DiT");
  return plain;
}

struct Inputs {
  torch::Tensor x, sigma, labels;
};
Inputs inputs() {
  at::Generator gen = at::detail::createCPUGenerator(3);
  return {torch::randn({4, 3, 8, 8}, gen, torch::kFloat64), torch::tensor({0.1, 0.4, 0.7, 0.95}, torch::kFloat64),
          torch::tensor({0, 1, 2, 3}, torch::kInt64)};
}

}  // namespace

TEST_CASE("a LoRA DiT computes W x + s B A x: the plain DiT with W + s B A in its weights", "[lora_linear]") {
  const models::LoraSpec spec = dit_spec();
  models::Dit dit = adapted_dit(11, spec);
  models::Dit plain = base_copy(dit);  // the same base, no adapters
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, l] : adapted_layers(*dit)) {
      auto* p = dynamic_cast<torch::nn::LinearImpl*>(plain->named_modules()[name].get());
      p->weight.add_(torch::matmul(l->lora().b, l->lora().a) * spec.scale());
    }
  }
  const Inputs in = inputs();
  const torch::Tensor v = dit->forward(in.x, in.sigma, in.labels);      // (B, C, H, W)
  const torch::Tensor ref = plain->forward(in.x, in.sigma, in.labels);  // (B, C, H, W)
  CHECK(test::rel_to_max(v, ref) < 1e-12);
  {
    // Inside a sampler B's product accumulates into the layer's output in place (the unified
    // model's generate runs its LoraLinear layers so).
    torch::NoGradGuard no_grad;
    parallel::SamplingGuard sampling;
    CHECK(test::rel_to_max(dit->forward(in.x, in.sigma, in.labels), ref) < 1e-12);
  }
  // Control: the adapters move the output (the check above would see a forward that skipped them).
  const torch::Tensor base = base_copy(dit)->forward(in.x, in.sigma, in.labels);
  CHECK((v - base).abs().max().item<double>() > 1e-3);

  SECTION("the adapters' gradients follow the chain rule; the base gets none") {
    const torch::Tensor g = torch::randn(v.sizes(), at::detail::createCPUGenerator(5), torch::kFloat64);
    (v * g).sum().backward();
    (ref * g).sum().backward();
    for (auto& [name, l] : adapted_layers(*dit)) {
      const torch::Tensor dw = dynamic_cast<torch::nn::LinearImpl*>(plain->named_modules()[name].get())->weight.grad();
      const torch::Tensor da = spec.scale() * torch::matmul(l->lora().b.t(), dw);  // (r, in)
      const torch::Tensor db = spec.scale() * torch::matmul(dw, l->lora().a.t());  // (out, r)
      INFO(name);
      // Relative to the reference's largest entry (~1e2 here): each entry is a sum with cancellation,
      // so float64 rounding is relative to the terms, not to the result. The project's CI once saw
      // 3e-10 absolute (1e-12 relative) against an absolute 1e-10; a wrong gradient is off by O(1).
      CHECK(test::rel_to_max(l->lora().a.grad(), da) < 1e-10);
      CHECK(test::rel_to_max(l->lora().b.grad(), db) < 1e-10);
    }
    for (const auto& p : dit->named_parameters())
      if (!models::is_lora_parameter(p.key())) {
        INFO(p.key());
        CHECK(!p.value().grad().defined());
      }
  }
}

TEST_CASE("all-linear on the DiT: qkv, proj, mlp_fc1, mlp_fc2 of every block; A is peft's init, B zero",
          "[lora_linear]") {
  models::Dit dit = test::perturbed_dit(torch::kFloat64, 11);
  models::Dit base = base_copy(dit);
  models::attach_lora(*dit, dit_spec(), 7);
  std::vector<std::string> names;
  for (auto& [name, l] : adapted_layers(*dit)) {
    names.push_back(name);
    const double bound = 1.0 / std::sqrt(static_cast<double>(l->weight.size(1)));
    CHECK(l->lora().a.abs().max().item<double>() <= bound);
    CHECK(l->lora().a.abs().max().item<double>() > 0.5 * bound);
    CHECK(l->lora().b.abs().max().item<double>() == 0);
  }
  CHECK(names == std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp_fc1",
                                          "blocks.0.mlp_fc2", "blocks.1.attn.qkv", "blocks.1.attn.proj",
                                          "blocks.1.mlp_fc1", "blocks.1.mlp_fc2"});
  CHECK(models::lora_parameters(*dit).size() == 16);
  for (const auto& p : dit->named_parameters()) {
    INFO(p.key());
    CHECK(p.value().requires_grad() == models::is_lora_parameter(p.key()));
  }
  const Inputs in = inputs();
  // Step 0 (B = 0) equals the base bit for bit.
  CHECK(torch::equal(dit->forward(in.x, in.sigma, in.labels), base->forward(in.x, in.sigma, in.labels)));

  SECTION("the same seed draws the same A; a target with no layer is refused") {
    models::Dit again = test::perturbed_dit(torch::kFloat64, 11);
    models::attach_lora(*again, dit_spec(), 7);
    CHECK(torch::equal(models::lora_parameters(*again)[0], models::lora_parameters(*dit)[0]));
    models::Dit other = test::perturbed_dit(torch::kFloat64, 11);
    CHECK_THROWS_WITH(models::attach_lora(*other, dit_spec({"q_proj"}), 7), Catch::Contains("'q_proj'"));
    CHECK_THROWS(models::attach_lora(*dit, dit_spec(), 7));  // twice
  }
  SECTION("a subset of targets adapts only those layers") {
    models::Dit some = test::perturbed_dit(torch::kFloat64, 11);
    models::attach_lora(*some, dit_spec({"qkv", "mlp_fc2"}), 7);
    std::vector<std::string> got;
    for (auto& [name, l] : adapted_layers(*some)) got.push_back(name);
    CHECK(got ==
          std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.mlp_fc2", "blocks.1.attn.qkv", "blocks.1.mlp_fc2"});
  }
}

TEST_CASE("adapters off is the base bit for bit: the KL reference with no reference copy", "[lora_linear]") {
  models::Dit dit = adapted_dit(11, dit_spec());
  models::DitFlow flow(dit);
  // An explicit reference copy of the base, as a full-fine-tuning run keeps it.
  models::DitFlow copy(test::perturbed_dit(torch::kFloat64, 12));
  copy.load_tensors(flow.named_tensors(), "the policy");
  const Inputs in = inputs();
  const torch::Tensor x_next =
      in.x + 0.05 * torch::randn(in.x.sizes(), at::detail::createCPUGenerator(9), torch::kFloat64);
  const torch::Tensor s_next = in.sigma - 0.05;
  const auto reference =
      models::transition_log_prob(copy, in.x, x_next, in.sigma, s_next, in.labels, 0.7, 0.95, 1.0, true);
  {
    parallel::LoraOffGuard off;
    const auto base =
        models::transition_log_prob(flow, in.x, x_next, in.sigma, s_next, in.labels, 0.7, 0.95, 1.0, true);
    CHECK(torch::equal(base.mean, reference.mean));
    CHECK(torch::equal(base.log_prob, reference.log_prob));
  }
  // Control: with the adapters on the same call differs.
  const auto policy =
      models::transition_log_prob(flow, in.x, x_next, in.sigma, s_next, in.labels, 0.7, 0.95, 1.0, true);
  CHECK((policy.mean - reference.mean).abs().max().item<double>() > 1e-3);
}

TEST_CASE("the DiT's named tensors are the base's; the adapters' state round-trips and is checked", "[lora_linear]") {
  models::Dit dit = adapted_dit(11, dit_spec());
  models::DitFlow flow(dit);
  for (const auto& [name, t] : flow.named_tensors()) {
    INFO(name);
    CHECK(!models::is_lora_parameter(name));
  }
  const auto state = models::lora_state(*dit);
  CHECK(state.size() == 16);
  REQUIRE(state.count("base_model.model.blocks.1.mlp_fc2.lora_B.weight"));
  CHECK(state.at("base_model.model.blocks.0.attn.qkv.lora_A.weight").sizes() == torch::IntArrayRef{3, 32});

  models::Dit other = base_copy(dit);
  models::attach_lora(*other, dit_spec(), 99);
  models::load_lora_state(*other, state, "state");
  const Inputs in = inputs();
  CHECK(torch::equal(other->forward(in.x, in.sigma, in.labels), dit->forward(in.x, in.sigma, in.labels)));

  auto missing = state;
  missing.erase("base_model.model.blocks.1.attn.proj.lora_A.weight");
  CHECK_THROWS_WITH(models::load_lora_state(*other, missing, "f"),
                    Catch::Contains("missing adapter tensor base_model.model.blocks.1.attn.proj.lora_A.weight"));
  auto misshapen = state;
  misshapen["base_model.model.blocks.0.mlp_fc1.lora_A.weight"] = torch::zeros({4, 32}, torch::kFloat64);
  CHECK_THROWS_WITH(models::load_lora_state(*other, misshapen, "f"), Catch::Contains("a different rank"));
  auto extra = state;
  extra["base_model.model.blocks.0.ada_ln.lora_A.weight"] = torch::zeros({3, 32}, torch::kFloat64);
  CHECK_THROWS_WITH(models::load_lora_state(*other, extra, "f"), Catch::Contains("unexpected tensor"));
  auto nan = state;
  nan["base_model.model.blocks.0.attn.qkv.lora_B.weight"] =
      torch::full({96, 3}, std::numeric_limits<double>::quiet_NaN(), torch::kFloat64);
  CHECK_THROWS_WITH(models::load_lora_state(*other, nan, "f"), Catch::Contains("non-finite"));
}
