// RMSNorm: w * (x * rsqrt(mean(x^2) + eps)).
#include "models/layers/rms_norm.h"

namespace tandem::models {

torch::ScalarType compute_dtype(torch::ScalarType dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return apply(x, weight); }

torch::Tensor RMSNormImpl::apply(const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::Tensor xc = x.to(compute_dtype(x.scalar_type()));                // (..., dim)
  const torch::Tensor inv_rms = torch::rsqrt(xc.pow(2).mean(-1, true) + eps_);  // (..., 1)
  return weight * (xc * inv_rms).to(x.scalar_type());
}

}  // namespace tandem::models
