// RoPE tables and rotation. The rotation is one autograd Function over the two halves (its
// backward is the same rotation by -theta), so neither direction materialises cat(-x2, x1) nor
// the narrow/cat gradients' zero-filled copies.
#include "models/layers/rotary.h"

#include "models/layers/rms_norm.h"

namespace tandem::models {

namespace {

// [x1 c - x2 s, x2 c + x1 s] for x (N, H, D) and c, s (N, 1, D/2), into a fresh contiguous tensor.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& c, const torch::Tensor& s) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);  // (N, H, D/2)
  torch::Tensor out = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
  torch::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);  // (N, H, D/2)
  torch::mul_out(o1, x1, c).addcmul_(x2, s, -1);
  torch::mul_out(o2, x2, c).addcmul_(x1, s, 1);
  return out;
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& c,
                               const torch::Tensor& s) {
    ctx->save_for_backward({c, s});
    return rotate(x, c, s);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    // The rotation is orthogonal: its transpose rotates by -theta.
    return {rotate(grads[0], saved[0], -saved[1]), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

namespace {

// HF's _compute_llama3_parameters: long wavelengths (past original / low_freq_factor) are divided
// by the factor, short ones (below original / high_freq_factor) kept, the band between blended.
torch::Tensor llama3_inv_freq(const torch::Tensor& inv_freq, const RopeScaling& s) {  // (D/2)
  const double old_len = static_cast<double>(s.original_max_seq_len);
  const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  const torch::Tensor wavelen = 2 * M_PI / inv_freq;
  torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
  const torch::Tensor smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const torch::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, blended, scaled);
}

}  // namespace

RotaryTables rotary_tables(const torch::Tensor& positions, int64_t head_dim, double theta, torch::ScalarType dtype,
                           const RopeScaling& scaling) {
  const auto opts = torch::TensorOptions().dtype(compute_dtype(dtype)).device(positions.device());
  const torch::Tensor exponents = torch::arange(0, head_dim, 2, opts) / static_cast<double>(head_dim);  // (D/2)
  torch::Tensor inv_freq = 1.0 / torch::pow(theta, exponents);                                          // (D/2)
  if (scaling.kind == RopeScalingKind::kLinear) inv_freq = inv_freq / scaling.factor;
  if (scaling.kind == RopeScalingKind::kLlama3) inv_freq = llama3_inv_freq(inv_freq, scaling);
  const torch::Tensor freqs = positions.to(opts.dtype()).unsqueeze(1) * inv_freq.unsqueeze(0);  // (N, D/2)
  const torch::Tensor angles = freqs.unsqueeze(1);                                              // (N, 1, D/2)
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& t) {
  return RotaryFunction::apply(x, t.cos, t.sin);
}

}  // namespace tandem::models
