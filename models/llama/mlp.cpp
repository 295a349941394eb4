// SwiGLU (GeGLU for Gemma 3) MLP; gate and up run as one GEMM.
#include "models/llama/mlp.h"

#include "models/layers/gated_activation.h"

namespace tandem::models {

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& c, const parallel::ParallelContext& ctx)
    : gelu_tanh_(c.block == DecoderBlock::kGemma3) {
  gate_proj =
      register_module("gate_proj", parallel::ColumnParallelLinear(c.hidden_size, c.intermediate_size, false, ctx));
  up_proj = register_module("up_proj", parallel::ColumnParallelLinear(c.hidden_size, c.intermediate_size, false, ctx));
  down_proj = register_module("down_proj", parallel::RowParallelLinear(c.intermediate_size, c.hidden_size, false, ctx));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& x) {
  const auto gate_up = parallel::fused_column_parallel(x, {gate_proj.get(), up_proj.get()});  // (N, I_l) each
  // Gemma's gelu_pytorch_tanh is torch's tanh-approximated GELU.
  const torch::Tensor h =
      gated_activation(gate_up[0], gate_up[1], gelu_tanh_ ? GateActivation::kGeluTanh : GateActivation::kSilu);
  return down_proj(h);  // (N, hidden)
}

}  // namespace tandem::models
