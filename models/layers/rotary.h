// Rotary position embedding (RoPE) with HF's rotate_half convention: the two halves of each head
// are the (real, imaginary) parts, frequencies theta^(-2i/d); positions come from position_ids.
#pragma once

#include <torch/torch.h>

#include "models/layers/rope_scaling.h"

namespace tandem::models {

// Both halves of a head share one angle per frequency, so the tables hold one half.
struct RotaryTables {
  torch::Tensor cos;  // (N, 1, D/2) in the activation dtype
  torch::Tensor sin;  // (N, 1, D/2)
};

// positions (N) int64. Angles in float32 (float64 when dtype is float64), as HF computes them;
// `scaling` rescales the inverse frequencies as HF's rope_scaling does (linear, llama3).
RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double theta, torch::ScalarType dtype,
                           const RopeScaling& scaling = {});

// x (N, H, D) -> x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1); differentiable in x.
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables);

}  // namespace tandem::models
