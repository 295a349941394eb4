// DiT building blocks; initialisation follows the DiT reference (xavier-uniform linears, zero
// adaLN and output layers, N(0, 0.02) for the timestep MLP).
#include "models/dit/dit_layers.h"

#include "models/layers/fused_attention.h"

#include <cmath>

namespace tandem::models {

namespace {

// Float dtype wide enough for sinusoid arguments and softmax: float32 unless already wider.
torch::Dtype at_least_float32(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  // x (B, N, D); shift, scale (B, D)
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

// The layers LoRA may adapt (lora_dit_names()): the attention and MLP projections.
LoraLinear xavier_linear(int64_t in, int64_t out) {
  LoraLinear l(in, out);
  torch::nn::init::xavier_uniform_(l->weight);
  torch::nn::init::zeros_(l->bias);
  return l;
}

torch::nn::Linear zero_linear(int64_t in, int64_t out) {
  torch::nn::Linear l(in, out);
  torch::nn::init::zeros_(l->weight);
  torch::nn::init::zeros_(l->bias);
  return l;
}

torch::nn::LayerNorm plain_layer_norm(int64_t dim) {
  // No affine parameters: adaLN supplies scale and shift.
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).elementwise_affine(false).eps(1e-6));
}

// 1-D sin-cos of positions (L) -> (L, dim): [sin(p w_k), cos(p w_k)], w_k = 10000^(-k/half).
torch::Tensor sincos_1d(const torch::Tensor& pos, int64_t dim) {
  const int64_t half = dim / 2;
  torch::Tensor out = torch::zeros({pos.size(0), dim}, torch::kFloat64);  // (L, dim)
  if (half == 0) return out;
  const torch::Tensor omega =
      torch::pow(10000.0, -torch::arange(half, torch::kFloat64) / static_cast<double>(half));  // (half)
  const torch::Tensor args = pos.unsqueeze(1) * omega.unsqueeze(0);                            // (L, half)
  out.slice(1, 0, half).copy_(torch::sin(args));
  out.slice(1, half, 2 * half).copy_(torch::cos(args));
  return out;
}

}  // namespace

const std::vector<std::string>& lora_dit_names() {
  static const std::vector<std::string> kNames{"qkv", "proj", "mlp_fc1", "mlp_fc2"};
  return kNames;
}

torch::Tensor timestep_features(const torch::Tensor& t, int64_t dim) {
  const torch::Dtype dtype = at_least_float32(t.scalar_type());
  const int64_t half = dim / 2;
  const auto opts = torch::TensorOptions().dtype(dtype).device(t.device());
  const torch::Tensor freqs = torch::exp(-std::log(10000.0) * torch::arange(half, opts) / static_cast<double>(half));
  const torch::Tensor args = t.to(dtype).unsqueeze(1) * freqs.unsqueeze(0);  // (B, half)
  torch::Tensor emb = torch::cat({torch::cos(args), torch::sin(args)}, 1);   // (B, 2 half)
  if (dim % 2 == 1) emb = torch::cat({emb, torch::zeros({t.size(0), 1}, opts)}, 1);
  return emb;  // (B, dim)
}

torch::Tensor sincos_positions_2d(int64_t grid_h, int64_t grid_w, int64_t dim) {
  const int64_t dim_h = dim / 2;
  const torch::Tensor rows = torch::arange(grid_h, torch::kFloat64).repeat_interleave(grid_w);  // (N)
  const torch::Tensor cols = torch::arange(grid_w, torch::kFloat64).repeat({grid_h});           // (N)
  return torch::cat({sincos_1d(rows, dim_h), sincos_1d(cols, dim - dim_h)}, 1);                 // (N, dim)
}

TimestepEmbedderImpl::TimestepEmbedderImpl(int64_t hidden_size) {
  fc1 = register_module("fc1", torch::nn::Linear(kTimestepFrequencyDim, hidden_size));
  fc2 = register_module("fc2", torch::nn::Linear(hidden_size, hidden_size));
  for (auto* l : {&fc1, &fc2}) {
    torch::nn::init::normal_((*l)->weight, 0.0, 0.02);
    torch::nn::init::zeros_((*l)->bias);
  }
}

torch::Tensor TimestepEmbedderImpl::forward(const torch::Tensor& sigma) {
  const torch::Tensor f = timestep_features(sigma * kTimestepScale, kTimestepFrequencyDim);  // (B, 256)
  return fc2(torch::silu(fc1(f.to(fc1->weight.scalar_type()))));                             // (B, D)
}

SelfAttentionImpl::SelfAttentionImpl(int64_t hidden_size, int64_t num_heads) : num_heads_(num_heads) {
  TORCH_CHECK(hidden_size % num_heads == 0, "num_heads ", num_heads, " does not divide hidden_size ", hidden_size);
  qkv = register_module("qkv", xavier_linear(hidden_size, 3 * hidden_size));
  proj = register_module("proj", xavier_linear(hidden_size, hidden_size));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2), hd = d / num_heads_;
  const torch::Tensor qkv_heads = qkv(x).view({b, n, 3, num_heads_, hd}).permute({2, 0, 3, 1, 4});  // (3, B, H, N, hd)
  const torch::Tensor q = qkv_heads[0], k = qkv_heads[1], v = qkv_heads[2];                         // (B, H, N, hd)
  if (use_fused_attention(AttentionKernel::kAuto, x.scalar_type()))  // float64 keeps the reference below
    return proj(fused_attention(q, k, v, false).transpose(1, 2).reshape({b, n, d}));  // (B, N, D)
  const torch::Tensor scores =
      torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));  // (B, H, N, N)
  // bfloat16 / half softmax loses the small weights; normalise in float32 and come back.
  const torch::Tensor weights = torch::softmax(scores, -1, at_least_float32(scores.scalar_type())).to(v.scalar_type());
  const torch::Tensor out = torch::matmul(weights, v);  // (B, H, N, hd)
  return proj(out.transpose(1, 2).reshape({b, n, d}));  // (B, N, D)
}

DitBlockImpl::DitBlockImpl(int64_t hidden_size, int64_t num_heads, int64_t mlp_ratio) {
  norm1 = register_module("norm1", plain_layer_norm(hidden_size));
  attn = register_module("attn", SelfAttention(hidden_size, num_heads));
  norm2 = register_module("norm2", plain_layer_norm(hidden_size));
  mlp_fc1 = register_module("mlp_fc1", xavier_linear(hidden_size, mlp_ratio * hidden_size));
  mlp_fc2 = register_module("mlp_fc2", xavier_linear(mlp_ratio * hidden_size, hidden_size));
  ada_ln = register_module("ada_ln", zero_linear(hidden_size, 6 * hidden_size));
}

torch::Tensor DitBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& c) {
  const auto mod = ada_ln(torch::silu(c)).chunk(6, 1);  // 6 x (B, D)
  const torch::Tensor &shift_msa = mod[0], &scale_msa = mod[1], &gate_msa = mod[2];
  const torch::Tensor &shift_mlp = mod[3], &scale_mlp = mod[4], &gate_mlp = mod[5];
  torch::Tensor h = x + gate_msa.unsqueeze(1) * attn(modulate(norm1(x), shift_msa, scale_msa));  // (B, N, D)
  const torch::Tensor m = mlp_fc2(torch::gelu(mlp_fc1(modulate(norm2(h), shift_mlp, scale_mlp)), "tanh"));
  return h + gate_mlp.unsqueeze(1) * m;  // (B, N, D)
}

FinalLayerImpl::FinalLayerImpl(int64_t hidden_size, int64_t patch_size, int64_t channels) {
  norm = register_module("norm", plain_layer_norm(hidden_size));
  ada_ln = register_module("ada_ln", zero_linear(hidden_size, 2 * hidden_size));
  linear = register_module("linear", zero_linear(hidden_size, patch_size * patch_size * channels));
}

torch::Tensor FinalLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& c) {
  const auto mod = ada_ln(torch::silu(c)).chunk(2, 1);  // 2 x (B, D)
  return linear(modulate(norm(x), mod[0], mod[1]));     // (B, N, p*p*C)
}

}  // namespace tandem::models
