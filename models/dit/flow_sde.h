// The FlowGRPO transition (Liu et al. 2025, the reference's sde_step_with_logprob): shifted sigma
// schedule, the SDE step's Gaussian mean / std / log-prob, and the Euler ODE step used for
// evaluation. Pure tensor functions, no model. Like the reference, reduced-precision inputs are
// computed in float32; float64 stays float64.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tandem::models {

// sigma_i = shift t_i / (1 + (shift - 1) t_i), t = linspace(1, 0, steps + 1) -> (steps + 1) float64,
// sigma_0 = 1 (pure noise), sigma_steps = 0 (image).
torch::Tensor sigma_schedule(int64_t steps, double shift);

// What sde_step's last argument holds.
enum class SdeGiven {
  kNoise,  // eps ~ N(0, I): sample x_next = mean + std * eps (rollout)
  kPrev,   // x_next itself: only evaluate its log-prob (training recomputes this)
};

struct SdeStepResult {
  torch::Tensor prev;       // (B, ...) x_next
  torch::Tensor mean;       // (B, ...) the transition mean
  torch::Tensor std_dev_t;  // (B) the reference's std_dev_t = a sqrt(sigma / (1 - sigma'))
  torch::Tensor step_std;   // (B) the transition's standard deviation std_dev_t sqrt(-dt)
  torch::Tensor log_prob;   // (B) Gaussian log-density of prev, averaged over its elements
};

// One SDE transition from x at sigma to sigma_next < sigma with velocity v:
//   dt = sigma_next - sigma,  std_dev_t = a sqrt(sigma / (1 - sigma')),  sigma' = sigma_max if sigma == 1
//   mean = x (1 + std_dev_t^2 dt / (2 sigma)) + v (1 + std_dev_t^2 (1 - sigma) / (2 sigma)) dt
//   log_prob = mean_elements[ -(prev - mean)^2 / (2 s^2) - log s - log sqrt(2 pi) ],  s = std_dev_t sqrt(-dt)
// x, v, noise_or_prev (B, ...); sigma, sigma_next (B) (a sample's own timestep). sigma_max is the
// schedule's sigma_1 (the reference's guard against 1 / (1 - 1)). The log-prob of a sampled prev is
// computed from prev itself, so evaluating that prev again with kPrev reproduces it bitwise.
// noise_level 0 gives the Euler step (prev == mean) with a degenerate (non-finite) log-prob.
SdeStepResult sde_step(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& sigma,
                       const torch::Tensor& sigma_next, double noise_level, double sigma_max,
                       const torch::Tensor& noise_or_prev, SdeGiven given = SdeGiven::kNoise);

// Euler ODE step x + (sigma_next - sigma) v; sigma, sigma_next (B).
torch::Tensor euler_step(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& sigma,
                         const torch::Tensor& sigma_next);

// The dtype the step math runs in for these inputs: float64 if any is float64, else float32.
torch::Dtype sde_compute_dtype(const torch::Tensor& x, const torch::Tensor& v);

}  // namespace tandem::models
