// Decoder layer: pre-norm residual attention and MLP.
#include "models/llama/decoder_layer.h"

namespace tandem::models {

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& c, const parallel::ParallelContext& ctx) {
  self_attn = register_module("self_attn", LlamaAttention(c, ctx));
  mlp = register_module("mlp", LlamaMLP(c, ctx));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_eps));
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const AttentionLayout& layout, LayerKv* kv) {
  const torch::Tensor h = x + self_attn(input_layernorm(x), layout, kv);  // (N, hidden)
  return h + mlp(post_attention_layernorm(h));
}

}  // namespace tandem::models
