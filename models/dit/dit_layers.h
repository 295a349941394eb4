// The pieces of the diffusion transformer (Peebles & Xie 2023): timestep embedding, fixed 2-D
// sin-cos positions, the adaLN-Zero block and the final layer. Timesteps are flow sigmas in [0, 1].
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/layers/lora_linear.h"

namespace tandem::models {

// The model sees sigma * kTimestepScale, so the sinusoid frequencies cover the same range as the
// DiT / SD3 timesteps in [0, 1000] they were designed for.
inline constexpr double kTimestepScale = 1000.0;
inline constexpr int64_t kTimestepFrequencyDim = 256;

// What LoRA's `all-linear` adapts in the DiT: each block's attention projections (attn.qkv,
// attn.proj) and MLP (mlp_fc1, mlp_fc2), as flow_grpo adapts SD3's attention projections. The
// adaLN modulations, the timestep MLP, the patch embedding and the final layer stay frozen: they
// are the conditioning and the output map, which peft's all-linear also leaves (its output layer).
const std::vector<std::string>& lora_dit_names();

// Sinusoidal features of `t` (B) -> (B, dim): [cos(t f_k), sin(t f_k)], f_k = 10000^(-k/half),
// computed in float32 or wider (bfloat16 cannot resolve t * f_k for t near 1000).
torch::Tensor timestep_features(const torch::Tensor& t, int64_t dim);

// Fixed 2-D sin-cos positions for a grid_h x grid_w token grid -> (grid_h * grid_w, dim), row-major
// like the patch tokens. The first half of the channels encodes the row, the rest the column;
// works for any dim (an odd leftover channel stays zero).
torch::Tensor sincos_positions_2d(int64_t grid_h, int64_t grid_w, int64_t dim);

// sigma (B) -> (B, hidden): sinusoidal features of sigma * kTimestepScale through a 2-layer MLP.
class TimestepEmbedderImpl : public torch::nn::Module {
 public:
  explicit TimestepEmbedderImpl(int64_t hidden_size);
  torch::Tensor forward(const torch::Tensor& sigma);

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TimestepEmbedder);

// Multi-head self-attention over all tokens (no mask: every patch sees every patch).
class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t hidden_size, int64_t num_heads);
  torch::Tensor forward(const torch::Tensor& x);  // (B, N, D) -> (B, N, D)

  int64_t num_heads_;
  LoraLinear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(SelfAttention);

// A transformer block whose LayerNorms are modulated by the conditioning vector c:
// shift / scale / gate for attention and MLP come from one linear layer, zero-initialised so the
// block starts as the identity (adaLN-Zero).
class DitBlockImpl : public torch::nn::Module {
 public:
  DitBlockImpl(int64_t hidden_size, int64_t num_heads, int64_t mlp_ratio = 4);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& c);  // x (B, N, D), c (B, D)

  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  SelfAttention attn{nullptr};
  LoraLinear mlp_fc1{nullptr}, mlp_fc2{nullptr};
  torch::nn::Linear ada_ln{nullptr};  // D -> 6 D
};
TORCH_MODULE(DitBlock);

// Modulated LayerNorm then a linear map to patch_size^2 * channels values per token; both linear
// layers start at zero, so an untrained model predicts v = 0.
class FinalLayerImpl : public torch::nn::Module {
 public:
  FinalLayerImpl(int64_t hidden_size, int64_t patch_size, int64_t channels);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& c);  // (B, N, D) -> (B, N, p*p*C)

  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear ada_ln{nullptr};  // D -> 2 D
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(FinalLayer);

}  // namespace tandem::models
