// Trunk blocks. Masked keys get probability exactly 0, so they add exactly 0 to outputs and
// gradients (the mask tests rely on exact zeros, not small numbers).
#include "models/unified/layers.h"

#include "models/layers/fused_attention.h"
#include "models/layers/gated_activation.h"

#include <cmath>
#include <limits>

namespace tandem::models {

namespace {

// A LoraLinear without adapters is a torch::nn::Linear (same parameters, same init draws).
LoraLinear plain_linear(int64_t in, int64_t out) { return LoraLinear(torch::nn::LinearOptions(in, out).bias(false)); }

}  // namespace

const std::vector<std::string>& lora_unified_names() {
  static const std::vector<std::string> kNames{"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                               "gate_proj", "up_proj", "down_proj"};
  return kNames;
}

UnifiedAttentionImpl::UnifiedAttentionImpl(const UnifiedConfig& c) : num_heads_(c.num_heads), head_dim_(c.head_dim()) {
  q_proj = register_module("q_proj", plain_linear(c.hidden_size, c.hidden_size));
  k_proj = register_module("k_proj", plain_linear(c.hidden_size, c.hidden_size));
  v_proj = register_module("v_proj", plain_linear(c.hidden_size, c.hidden_size));
  o_proj = register_module("o_proj", plain_linear(c.hidden_size, c.hidden_size));
}

torch::Tensor UnifiedAttentionImpl::forward(const torch::Tensor& x, const RotaryTables& rotary,
                                            const torch::Tensor& allowed) {
  const int64_t b = x.size(0), t = x.size(1), h = num_heads_, d = head_dim_;
  const auto heads = [&](const torch::Tensor& y) {  // (B, T, D) -> (B*T, H, d)
    return y.reshape({b * t, h, d});
  };
  const auto batched = [&](const torch::Tensor& y) {  // (B*T, H, d) -> (B, H, T, d)
    return y.view({b, t, h, d}).transpose(1, 2);
  };
  const torch::Tensor q = batched(apply_rotary(heads(q_proj(x)), rotary));  // (B, H, T, d)
  const torch::Tensor k = batched(apply_rotary(heads(k_proj(x)), rotary));  // (B, H, T, d)
  const torch::Tensor v = batched(heads(v_proj(x)));                        // (B, H, T, d)
  if (use_fused_attention(AttentionKernel::kAuto, x.scalar_type()))         // float64 keeps the reference below
    return o_proj(fused_attention(q, k, v, false, allowed).transpose(1, 2).reshape({b, t, h * d}));  // (B, T, D)
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const torch::Tensor scores =  // (B, H, T, T), in the compute dtype
      torch::matmul(q, k.transpose(2, 3)).mul(scale).to(compute_dtype(x.scalar_type()));
  const torch::Tensor probs =  // (B, H, T, T)
      torch::softmax(scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity()), -1)
          .to(x.scalar_type());
  const torch::Tensor out = torch::matmul(probs, v);          // (B, H, T, d)
  return o_proj(out.transpose(1, 2).reshape({b, t, h * d}));  // (B, T, D)
}

UnifiedMlpImpl::UnifiedMlpImpl(const UnifiedConfig& c) {
  gate_proj = register_module("gate_proj", plain_linear(c.hidden_size, c.intermediate_size));
  up_proj = register_module("up_proj", plain_linear(c.hidden_size, c.intermediate_size));
  down_proj = register_module("down_proj", plain_linear(c.intermediate_size, c.hidden_size));
}

torch::Tensor UnifiedMlpImpl::forward(const torch::Tensor& x) {
  return down_proj(gated_activation(gate_proj(x), up_proj(x), GateActivation::kSilu));  // (..., D)
}

UnifiedBlockImpl::UnifiedBlockImpl(const UnifiedConfig& c) {
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_eps));
  self_attn = register_module("self_attn", UnifiedAttention(c));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_eps));
  mlp = register_module("mlp", UnifiedMlp(c));
}

torch::Tensor UnifiedBlockImpl::forward(const torch::Tensor& x, const RotaryTables& rotary,
                                        const torch::Tensor& allowed) {
  const torch::Tensor h = x + self_attn(input_layernorm(x), rotary, allowed);  // (B, T, D)
  return h + mlp(post_attention_layernorm(h));                                 // (B, T, D)
}

}  // namespace tandem::models
