// FlowGRPO SDE transition and sigma schedule; see flow_sde.h for the formulas.
#include "models/dit/flow_sde.h"

#include <cmath>
#include <vector>

namespace tandem::models {

namespace {

// log(sqrt(2 pi)), the Gaussian normaliser per element.
const double kLogSqrt2Pi = 0.5 * std::log(2.0 * M_PI);

// (B) -> (B, 1, ..., 1) so a per-sample scalar broadcasts over a (B, ...) latent.
torch::Tensor per_sample(const torch::Tensor& s, int64_t dim, torch::Dtype dtype) {
  TORCH_CHECK(s.dim() == 1, "sigma must be (B), got ", s.sizes());
  std::vector<int64_t> shape(static_cast<size_t>(dim), 1);
  shape[0] = s.size(0);
  return s.to(dtype).view(shape);
}

std::vector<int64_t> element_dims(int64_t dim) {
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < dim; ++d) dims.push_back(d);
  return dims;
}

}  // namespace

torch::Tensor sigma_schedule(int64_t steps, double shift) {
  TORCH_CHECK(steps >= 1, "sigma_schedule: steps must be >= 1, got ", steps);
  TORCH_CHECK(shift > 0, "sigma_schedule: shift must be > 0, got ", shift);
  std::vector<double> sigmas(static_cast<size_t>(steps + 1));
  for (int64_t i = 0; i <= steps; ++i) {
    const double t = 1.0 - static_cast<double>(i) / static_cast<double>(steps);
    sigmas[static_cast<size_t>(i)] = shift * t / (1.0 + (shift - 1.0) * t);
  }
  // The ends exactly: at shift 0.3 the formula gives sigma_0 = 1 - 2^-52, and the step's
  // sigma == 1 guard would miss it (std sqrt(sigma / (1 - sigma)) ~ 7e7).
  sigmas.front() = 1.0;
  sigmas.back() = 0.0;
  return torch::tensor(sigmas, torch::kFloat64);  // (steps + 1)
}

torch::Dtype sde_compute_dtype(const torch::Tensor& x, const torch::Tensor& v) {
  return x.scalar_type() == torch::kFloat64 || v.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

SdeStepResult sde_step(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& sigma,
                       const torch::Tensor& sigma_next, double noise_level, double sigma_max,
                       const torch::Tensor& noise_or_prev, SdeGiven given) {
  TORCH_CHECK(x.sizes() == v.sizes() && x.sizes() == noise_or_prev.sizes(),
              "sde_step: x, v and noise_or_prev must share a shape, got ", x.sizes(), ", ", v.sizes(), ", ",
              noise_or_prev.sizes());
  TORCH_CHECK(x.dim() >= 2, "sde_step: x must be (B, ...) with at least one element dim, got ", x.sizes());
  const torch::Dtype dtype = sde_compute_dtype(x, v);
  const int64_t dim = x.dim();
  const torch::Tensor xs = x.to(dtype), vs = v.to(dtype);   // (B, ...)
  const torch::Tensor sig = per_sample(sigma, dim, dtype);  // (B, 1, ...)
  const torch::Tensor sig_next = per_sample(sigma_next, dim, dtype);
  const torch::Tensor dt = sig_next - sig;  // (B, 1, ...) < 0
  const torch::Tensor guarded = torch::where(sig == 1, torch::full_like(sig, sigma_max), sig);
  const torch::Tensor std_dev_t = torch::sqrt(sig / (1 - guarded)) * noise_level;  // (B, 1, ...)
  const torch::Tensor var_t = std_dev_t.pow(2);
  const torch::Tensor mean =
      xs * (1 + var_t / (2 * sig) * dt) + vs * (1 + var_t * (1 - sig) / (2 * sig)) * dt;  // (B, ...)
  const torch::Tensor step_std = std_dev_t * torch::sqrt(-dt);                            // (B, 1, ...)
  const torch::Tensor prev =
      given == SdeGiven::kNoise ? mean + step_std * noise_or_prev.to(dtype) : noise_or_prev.to(dtype);
  // The reference detaches prev: the gradient flows through the mean only.
  const torch::Tensor elem =
      -(prev.detach() - mean).pow(2) / (2 * step_std.pow(2)) - torch::log(step_std) - kLogSqrt2Pi;  // (B, ...)
  const int64_t b = x.size(0);
  return {prev, mean, std_dev_t.view({b}), step_std.view({b}), elem.mean(element_dims(dim))};
}

torch::Tensor euler_step(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& sigma,
                         const torch::Tensor& sigma_next) {
  const torch::Dtype dtype = sde_compute_dtype(x, v);
  const int64_t dim = x.dim();
  const torch::Tensor dt = per_sample(sigma_next, dim, dtype) - per_sample(sigma, dim, dtype);  // (B, 1, ...)
  return x.to(dtype) + v.to(dtype) * dt;                                                        // (B, ...)
}

}  // namespace tandem::models
