// gated_activation (models/layers/gated_activation.h): the one-node SwiGLU / GeGLU gives the
// unfused ops' outputs and gradients bitwise, in float32, bf16 and float64, and is used only when
// gate needs a gradient.
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

TEST_CASE("gated_activation: the node when gate needs a gradient, else the plain ops, the same gradients",
          "[gated_activation]") {
  torch::Generator gen = at::detail::createCPUGenerator(5);
  const torch::Tensor g0 = torch::randn({8, 16}, gen), u0 = torch::randn({8, 16}, gen), w = torch::randn({8, 16}, gen);
  // (gate needs a gradient, up needs one): which graph node, and each gradient against the unfused ops'.
  for (const auto& [gate_grad, up_grad] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    INFO("gate grad " << gate_grad << ", up grad " << up_grad);
    const torch::Tensor g = g0.clone().requires_grad_(gate_grad), u = u0.clone().requires_grad_(up_grad);
    const torch::Tensor gr = g0.clone().requires_grad_(gate_grad), ur = u0.clone().requires_grad_(up_grad);
    const torch::Tensor y = gated_activation(g, u, GateActivation::kSilu);
    const bool node = y.grad_fn()->name().find("GatedActivation") != std::string::npos;
    CHECK(node == gate_grad);  // without gate's gradient the plain mul saves act(gate) alone
    (y * w).sum().backward();
    (torch::silu(gr) * ur * w).sum().backward();
    if (gate_grad) CHECK(torch::equal(g.grad(), gr.grad()));
    if (up_grad) CHECK(torch::equal(u.grad(), ur.grad()));
    if (!up_grad) CHECK_FALSE(u.grad().defined());
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor plain = gated_activation(g0.requires_grad_(), u0, GateActivation::kSilu);
  CHECK_FALSE(plain.requires_grad());
}
