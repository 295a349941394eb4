// The shared trunk's pieces: self-attention under an explicit (B, 1, T, T) mask with RoPE, the
// SwiGLU MLP and the pre-norm block. Llama's RMSNorm and rotary are reused; attention is its own
// because models/llama's kernels only know causal masks, and the unified mask is not causal.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/layers/lora_linear.h"
#include "models/layers/rms_norm.h"
#include "models/layers/rotary.h"
#include "models/unified/config.h"

namespace tandem::models {

// The layers LoRA may adapt (tracks.ar.lora on arch unified; all-linear is all of them): each
// block's attention and MLP projections, which text and image tokens share. The embeddings, the
// patch embedding, the timestep MLP and both heads stay frozen.
const std::vector<std::string>& lora_unified_names();

// Multi-head attention (no biases, as Llama): q, k rotated by the positions' RoPE tables, scores
// masked to -inf where not allowed, softmax in float32 (float64 for float64).
class UnifiedAttentionImpl : public torch::nn::Module {
 public:
  explicit UnifiedAttentionImpl(const UnifiedConfig& config);
  // x (B, T, D); rotary for the (B*T) rows in row-major order; allowed (B, 1, T, T) bool.
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rotary, const torch::Tensor& allowed);

  LoraLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t num_heads_, head_dim_;
};
TORCH_MODULE(UnifiedAttention);

// down(silu(gate(x)) * up(x)), no biases.
class UnifiedMlpImpl : public torch::nn::Module {
 public:
  explicit UnifiedMlpImpl(const UnifiedConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // (..., D) -> (..., D)

  LoraLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(UnifiedMlp);

// x + attn(norm(x)), then + mlp(norm(x)); the same block for text and image tokens.
class UnifiedBlockImpl : public torch::nn::Module {
 public:
  explicit UnifiedBlockImpl(const UnifiedConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rotary, const torch::Tensor& allowed);

  RMSNorm input_layernorm{nullptr};
  UnifiedAttention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  UnifiedMlp mlp{nullptr};
};
TORCH_MODULE(UnifiedBlock);

}  // namespace tandem::models
