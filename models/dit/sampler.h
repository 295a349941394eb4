// Sampling the DiT: FlowGRPO SDE rollouts with per-step log-probs, Euler ODE sampling for
// evaluation, classifier-free guidance, and per-sample noise streams so that a sample's noise
// depends only on its key, never on which other samples share its batch.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/dit/dit.h"
#include "models/dit/flow_sde.h"
#include "models/layers/flow_model.h"

namespace tandem::models {

// The DiT as a FlowModel (labels are its classes). Holds the module, not a copy of it.
class DitFlow final : public FlowModel {
 public:
  explicit DitFlow(Dit model) : model_(std::move(model)) {}
  torch::Tensor velocity(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& labels) override {
    return model_->forward(x, sigma, labels);
  }
  int64_t null_label() const override { return model_->config().null_class(); }
  int64_t channels() const override { return model_->config().channels; }
  int64_t image_size() const override { return model_->config().image_size; }
  torch::Dtype dtype() const override { return model_->dtype(); }
  torch::Device device() const override { return model_->device(); }
  std::vector<torch::Tensor> parameters() override { return model_->parameters(); }
  // The base's tensors: adapter factors (LoRA) are not among them.
  std::map<std::string, torch::Tensor> named_tensors() override;
  void load_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& source) override;
  Dit& module() { return model_; }

 private:
  Dit model_;
};

// Names one sample's random stream.
struct NoiseKey {
  uint64_t run_seed = 0;
  int64_t step = 0;          // training step (or evaluation round)
  int64_t prompt_index = 0;  // the prompt's (group's) index in the step's global rollout
  int64_t sample_index = 0;  // the sample's index inside its group
};

// SplitMix64 chain over the key's fields: the seed of the sample's generator.
uint64_t noise_seed(const NoiseKey& key);

// One CPU generator per sample. Noise is drawn on the CPU in float32 and then moved / cast, so a
// key gives the same noise on every device and in every model dtype.
class NoiseStreams {
 public:
  explicit NoiseStreams(const std::vector<NoiseKey>& keys);

  // (B, sample_shape...): row b is the next draw of stream b.
  torch::Tensor draw(at::IntArrayRef sample_shape, const torch::TensorOptions& options);
  int64_t size() const { return static_cast<int64_t>(generators_.size()); }

 private:
  std::vector<at::Generator> generators_;
};

struct SdeSamplerOptions {
  int64_t steps = 10;
  double noise_level = 0.7;  // FlowGRPO's a
  double shift = 3.0;
  double cfg = 1.0;  // 1: no classifier-free guidance (no unconditional pass)
};

struct OdeSamplerOptions {
  int64_t steps = 20;
  double shift = 3.0;
  double cfg = 1.0;
};

struct SdeRollout {
  torch::Tensor latents;    // (B, S+1, C, H, W) x_0 (noise) .. x_S (image), in the step dtype
  torch::Tensor log_probs;  // (B, S) each transition's log-prob (mean over latent elements)
  torch::Tensor sigmas;     // (S+1) float64, shared by all samples
};

// v = v_uncond + cfg (v_cond - v_uncond) from one forward over 2B rows (conditional rows first);
// cfg == 1 runs the conditional rows only. x (B, C, H, W), sigma (B), labels (B) -> (B, C, H, W).
// uncond_grad false detaches v_uncond: the gradient reaches the conditional pass only (cfg times
// its share), while the values stay bitwise those of uncond_grad true.
torch::Tensor guided_velocity(FlowModel& model, const torch::Tensor& x, const torch::Tensor& sigma,
                              const torch::Tensor& labels, double cfg, bool uncond_grad = true);

// SDE rollout of labels (B) with noise keys (B), batched over samples, without gradients. The
// initial noise is each stream's first draw, step i's eps its (i + 2)-th.
SdeRollout sample_sde(FlowModel& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                      const SdeSamplerOptions& options);

// Euler ODE samples (B, C, H, W) from the same initial noise as sample_sde for the same keys.
torch::Tensor sample_ode(FlowModel& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                         const OdeSamplerOptions& options);

// What training recomputes: the transition x (sigma) -> x_next (sigma_next) of stored trajectory
// points under the current weights, with gradients through the mean. x, x_next (B, C, H, W);
// sigma, sigma_next, labels (B); sigma_max = the schedule's sigma_1. With the sampler's weights and
// batch layout its log_prob equals the sampler's bitwise, whatever uncond_grad (guided_velocity).
SdeStepResult transition_log_prob(FlowModel& model, const torch::Tensor& x, const torch::Tensor& x_next,
                                  const torch::Tensor& sigma, const torch::Tensor& sigma_next,
                                  const torch::Tensor& labels, double noise_level, double sigma_max, double cfg,
                                  bool uncond_grad = true);

// The same on a DiT module (wrapped in a DitFlow).
SdeRollout sample_sde(DitImpl& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                      const SdeSamplerOptions& options);
torch::Tensor sample_ode(DitImpl& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                         const OdeSamplerOptions& options);
torch::Tensor guided_velocity(DitImpl& model, const torch::Tensor& x, const torch::Tensor& sigma,
                              const torch::Tensor& labels, double cfg, bool uncond_grad = true);
SdeStepResult transition_log_prob(DitImpl& model, const torch::Tensor& x, const torch::Tensor& x_next,
                                  const torch::Tensor& sigma, const torch::Tensor& sigma_next,
                                  const torch::Tensor& labels, double noise_level, double sigma_max, double cfg,
                                  bool uncond_grad = true);

}  // namespace tandem::models
