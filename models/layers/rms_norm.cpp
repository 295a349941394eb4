// RMSNorm: w * (x * rsqrt(mean(x^2) + eps)), or Gemma's (1 + w) * (...).
#include "models/layers/rms_norm.h"

namespace tandem::models {

torch::ScalarType compute_dtype(torch::ScalarType dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, bool plus_one) : eps_(eps), plus_one_(plus_one) {
  weight = register_parameter("weight", plus_one ? torch::zeros({dim}) : torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return apply(x, weight); }

torch::Tensor RMSNormImpl::apply(const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::Tensor xc = x.to(compute_dtype(x.scalar_type()));                // (..., dim)
  const torch::Tensor inv_rms = torch::rsqrt(xc.pow(2).mean(-1, true) + eps_);  // (..., 1)
  if (plus_one_)  // Gemma: the scale (1 + w) applies before the cast back, in the compute dtype
    return (xc * inv_rms * (weight.to(xc.scalar_type()) + 1)).to(x.scalar_type());
  return weight * (xc * inv_rms).to(x.scalar_type());
}

}  // namespace tandem::models
