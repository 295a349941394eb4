// SwiGLU MLP.
#include "models/llama/mlp.h"

namespace tandem::models {

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& c, const parallel::ParallelContext& ctx) {
  gate_proj =
      register_module("gate_proj", parallel::ColumnParallelLinear(c.hidden_size, c.intermediate_size, false, ctx));
  up_proj = register_module("up_proj", parallel::ColumnParallelLinear(c.hidden_size, c.intermediate_size, false, ctx));
  down_proj = register_module("down_proj", parallel::RowParallelLinear(c.intermediate_size, c.hidden_size, false, ctx));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));  // (N, I_l) inside, (N, hidden) out
}

}  // namespace tandem::models
