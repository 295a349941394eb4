// gated_activation (models/layers/gated_activation.h): the one-node SwiGLU / GeGLU gives the
// unfused ops' outputs and gradients bitwise, in float32, bf16 and float64, and holds one (N, I)
// tensor fewer for the backward.
#include <catch2/catch.hpp>

#include "models/layers/gated_activation.h"

using namespace tandem::models;

namespace {

struct Result {
  torch::Tensor y, grad_gate, grad_up;
};

// gate and up as the MLP has them: two halves of one GEMM's output.
Result run(torch::ScalarType dtype, GateActivation act, bool fused) {
  torch::Generator gen = at::detail::createCPUGenerator(3);
  const torch::Tensor gate_up = (torch::randn({37, 2, 96}, gen) * 3).to(dtype).requires_grad_();  // (N, 2, I)
  const torch::Tensor gate = gate_up.select(1, 0), up = gate_up.select(1, 1);                     // (N, I) each
  const torch::Tensor w = torch::randn({37, 96}, gen).to(dtype);                                  // (N, I)
  torch::Tensor y;
  if (fused) {
    y = gated_activation(gate, up, act);
  } else {
    y = (act == GateActivation::kGeluTanh ? torch::gelu(gate, "tanh") : torch::silu(gate)) * up;
  }
  (y * w).sum().backward();
  return {y.detach(), gate_up.grad().select(1, 0), gate_up.grad().select(1, 1)};
}

}  // namespace

TEST_CASE("gated_activation: outputs and gradients bitwise those of the unfused ops", "[gated_activation]") {
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16, torch::kFloat64);
  const auto act = GENERATE(GateActivation::kSilu, GateActivation::kGeluTanh);
  INFO("dtype " << dtype << ", gelu " << (act == GateActivation::kGeluTanh));
  const Result f = run(dtype, act, true), u = run(dtype, act, false);
  CHECK(torch::equal(f.y, u.y));
  CHECK(torch::equal(f.grad_gate, u.grad_gate));
  CHECK(torch::equal(f.grad_up, u.grad_up));
  // Control: the other activation's gradients differ, so equality is not vacuous.
  const Result other =
      run(dtype, act == GateActivation::kSilu ? GateActivation::kGeluTanh : GateActivation::kSilu, true);
  CHECK_FALSE(torch::equal(other.grad_gate, u.grad_gate));
}

TEST_CASE("gated_activation: the node saves gate and up only; without autograd the plain ops", "[gated_activation]") {
  const torch::Tensor gate = torch::randn({8, 16}).requires_grad_(), up = torch::randn({8, 16}).requires_grad_();
  const torch::Tensor y = gated_activation(gate, up, GateActivation::kSilu);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name().find("GatedActivation") != std::string::npos);
  // The unfused form's graph: a mul whose saved inputs include silu(gate), a third (N, I) tensor.
  const torch::Tensor unfused = torch::silu(gate) * up;
  CHECK(unfused.grad_fn()->name().find("Mul") != std::string::npos);
  torch::NoGradGuard no_grad;
  const torch::Tensor plain = gated_activation(gate, up, GateActivation::kSilu);
  CHECK_FALSE(plain.requires_grad());
  CHECK(torch::equal(plain, torch::silu(gate) * up));
}
