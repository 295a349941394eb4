// The gated MLP: down(silu(gate(x)) * up(x)) (SwiGLU; Gemma 3: GeLU-tanh in place of silu), gate/up column parallel,
// down row parallel.
#pragma once

#include <torch/torch.h>

#include "models/llama/config.h"
#include "parallel/tp_layers.h"

namespace tandem::models {

class LlamaMLPImpl : public torch::nn::Module {
 public:
  LlamaMLPImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx);
  torch::Tensor forward(const torch::Tensor& x);  // (N, hidden) -> (N, hidden)

  parallel::ColumnParallelLinear gate_proj{nullptr}, up_proj{nullptr};
  parallel::RowParallelLinear down_proj{nullptr};

 private:
  bool gelu_tanh_ = false;
};
TORCH_MODULE(LlamaMLP);

}  // namespace tandem::models
