// Shared by the DiT and sampler tests: a tiny DiT config, and models moved off their adaLN-Zero
// start (a fresh DiT predicts exactly v = 0, which would make most checks vacuous).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "models/dit/dit.h"

namespace tandem::test {

inline models::DitConfig tiny_dit_config() {
  models::DitConfig c;
  c.image_size = 8;
  c.channels = 3;
  c.patch_size = 2;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_classes = 3;
  return c;
}

// Every parameter moved by N(0, 0.2^2) noise drawn from `seed` (in float32), then cast to dtype.
inline models::Dit perturbed_dit(torch::Dtype dtype, uint64_t seed,
                                 const models::DitConfig& config = tiny_dit_config()) {
  models::Dit model(config);
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& p : model->parameters()) p.add_(torch::randn(p.sizes(), gen, torch::kFloat32) * 0.2);
  model->to(dtype);
  return model;
}

}  // namespace tandem::test
