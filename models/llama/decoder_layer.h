// One decoder layer: x + attn(norm(x)), then + mlp(norm(x)); Gemma 3's adds a norm after each:
// x + norm(attn(norm(x))), then + norm(mlp(norm(x))). A layer with the sliding window attends
// through the layout's sliding view when it has one.
#pragma once

#include <torch/torch.h>

#include "models/layers/rms_norm.h"
#include "models/llama/attention.h"
#include "models/llama/mlp.h"

namespace tandem::models {

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx, int64_t index);
  // (N, hidden) -> (N, hidden); `kv`: this layer's KV cache when decoding.
  torch::Tensor forward(const torch::Tensor& x, const AttentionLayout& layout, LayerKv* kv = nullptr);

  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  // Llama: post_attention_layernorm is the MLP's input norm. Gemma 3: it normalises the attention's
  // output, and pre_ / post_feedforward_layernorm surround the MLP.
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};

 private:
  bool sliding_ = false;  // this layer attends through the window (config.layer_sliding)
};
TORCH_MODULE(LlamaDecoderLayer);

}  // namespace tandem::models
