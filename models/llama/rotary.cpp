// RoPE tables and rotation.
#include "models/llama/rotary.h"

#include "models/llama/rms_norm.h"

namespace tandem::models {

RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double theta, torch::ScalarType dtype) {
  const auto opts = torch::TensorOptions().dtype(compute_dtype(dtype)).device(positions.device());
  const torch::Tensor exponents = torch::arange(0, head_dim, 2, opts) / static_cast<double>(head_dim);  // (D/2)
  const torch::Tensor inv_freq = 1.0 / torch::pow(theta, exponents);                                      // (D/2)
  const torch::Tensor freqs = positions.to(opts.dtype()).unsqueeze(1) * inv_freq.unsqueeze(0);             // (N, D/2)
  const torch::Tensor angles = torch::cat({freqs, freqs}, 1).unsqueeze(1);                                 // (N, 1, D)
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& t) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);  // (N, H, D)
  return x * t.cos + rotated * t.sin;
}

}  // namespace tandem::models
