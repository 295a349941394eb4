// Decoder layer: pre-norm residual attention and MLP (Gemma 3: also post-norms).
#include "models/llama/decoder_layer.h"

namespace tandem::models {

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& c, const parallel::ParallelContext& ctx, int64_t index)
    : sliding_(c.layer_sliding(index)) {
  const bool gemma = c.block == DecoderBlock::kGemma3;
  self_attn = register_module("self_attn", LlamaAttention(c, ctx));
  mlp = register_module("mlp", LlamaMLP(c, ctx));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_eps, gemma));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_eps, gemma));
  if (gemma) {
    pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", RMSNorm(c.hidden_size, c.rms_eps, true));
    post_feedforward_layernorm = register_module("post_feedforward_layernorm", RMSNorm(c.hidden_size, c.rms_eps, true));
  }
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const AttentionLayout& layout, LayerKv* kv) {
  const AttentionLayout& view = sliding_ && layout.sliding ? *layout.sliding : layout;
  if (pre_feedforward_layernorm) {
    const torch::Tensor h = x + post_attention_layernorm(self_attn(input_layernorm(x), view, kv));  // (N, hidden)
    return h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
  }
  const torch::Tensor h = x + self_attn(input_layernorm(x), view, kv);  // (N, hidden)
  return h + mlp(post_attention_layernorm(h));
}

}  // namespace tandem::models
