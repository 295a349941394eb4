// act(gate) * up with a backward that recomputes act(gate) (see the header for why).
#include "models/layers/gated_activation.h"

namespace tandem::models {

namespace {

torch::Tensor activate(const torch::Tensor& gate, GateActivation act) {
  return act == GateActivation::kGeluTanh ? torch::gelu(gate, "tanh") : torch::silu(gate);
}

class GatedActivation : public torch::autograd::Function<GatedActivation> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up, int64_t act) {
    ctx->save_for_backward({gate, up});
    ctx->saved_data["act"] = act;
    return activate(gate, static_cast<GateActivation>(act)) * up;  // (..., I)
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &gate = saved[0], &up = saved[1], &grad = grads[0];  // (..., I) each
    const auto act = static_cast<GateActivation>(ctx->saved_data["act"].toInt());
    // mul's backward (grad * other for each side), then the activation's own backward op.
    const torch::Tensor grad_act = grad * up;
    const torch::Tensor grad_up = ctx->needs_input_grad(1) ? grad * activate(gate, act) : torch::Tensor();
    const torch::Tensor grad_gate = act == GateActivation::kGeluTanh ? at::gelu_backward(grad_act, gate, "tanh")
                                                                     : at::silu_backward(grad_act, gate);
    return {grad_gate, grad_up, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gated_activation(const torch::Tensor& gate, const torch::Tensor& up, GateActivation act) {
  // Without a gradient for gate, autograd through the plain ops keeps act(gate) alone (or nothing),
  // no more than the node would.
  if (!torch::GradMode::is_enabled() || !gate.requires_grad()) return activate(gate, act) * up;
  return GatedActivation::apply(gate, up, static_cast<int64_t>(act));
}

}  // namespace tandem::models
