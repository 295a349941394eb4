// One pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(x)).
#pragma once

#include <torch/torch.h>

#include "models/layers/rms_norm.h"
#include "models/llama/attention.h"
#include "models/llama/mlp.h"

namespace tandem::models {

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx);
  // (N, hidden) -> (N, hidden); `kv`: this layer's KV cache when decoding.
  torch::Tensor forward(const torch::Tensor& x, const AttentionLayout& layout, LayerKv* kv = nullptr);

  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

}  // namespace tandem::models
