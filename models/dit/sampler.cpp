// SDE / ODE sampling loops over the DiT with classifier-free guidance and per-sample noise.
#include "models/dit/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"

namespace tandem::models {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The dtype latents and the step math live in: the model's, widened to at least float32.
torch::TensorOptions step_options(const FlowModel& model) {
  const torch::Dtype dtype = model.dtype() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  return torch::TensorOptions().dtype(dtype).device(model.device());
}

// What both sampling loops share: the step dtype, the schedule, the labels on the model's device
// and the per-sample noise streams.
class SamplerRun {
 public:
  SamplerRun(FlowModel& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys, int64_t steps,
             double shift)
      : options_(step_options(model)),
        sigmas_(sigma_schedule(steps, shift)),
        labels_(labels.to(model.device())),
        noise_(keys),
        sample_shape_{model.channels(), model.image_size(), model.image_size()} {
    TORCH_CHECK(labels.dim() == 1 && labels.size(0) == static_cast<int64_t>(keys.size()),
                "sampler: labels must be (B) with one noise key per sample; got labels ", labels.sizes(), " and ",
                keys.size(), " keys");
  }

  torch::Tensor draw() { return noise_.draw(sample_shape_, options_); }  // (B, C, H, W)
  // sigma_i for every sample -> (B) in the step dtype.
  torch::Tensor sigma(int64_t i) const { return torch::full({labels_.size(0)}, sigmas_[i].item<double>(), options_); }
  double sigma_max() const { return sigmas_[1].item<double>(); }
  const torch::Tensor& sigmas() const { return sigmas_; }  // (S+1) float64
  const torch::Tensor& labels() const { return labels_; }  // (B)

 private:
  torch::TensorOptions options_;
  torch::Tensor sigmas_;
  torch::Tensor labels_;
  NoiseStreams noise_;
  std::vector<int64_t> sample_shape_;
};

}  // namespace

uint64_t noise_seed(const NoiseKey& key) {
  uint64_t h = splitmix64(key.run_seed);
  for (const int64_t field : {key.step, key.prompt_index, key.sample_index})
    h = splitmix64(h ^ splitmix64(static_cast<uint64_t>(field)));
  return h;
}

NoiseStreams::NoiseStreams(const std::vector<NoiseKey>& keys) {
  generators_.reserve(keys.size());
  for (const NoiseKey& k : keys) generators_.push_back(at::detail::createCPUGenerator(noise_seed(k)));
}

torch::Tensor NoiseStreams::draw(at::IntArrayRef shape, const torch::TensorOptions& options) {
  std::vector<int64_t> full{size()};
  full.insert(full.end(), shape.begin(), shape.end());
  torch::Tensor out = torch::empty(full, torch::kFloat32);  // (B, shape...)
  for (int64_t b = 0; b < size(); ++b)
    out[b].copy_(torch::randn(shape, generators_[static_cast<size_t>(b)], torch::kFloat32));
  return out.to(options);
}

torch::Tensor guided_velocity(FlowModel& model, const torch::Tensor& x, const torch::Tensor& sigma,
                              const torch::Tensor& labels, double cfg, bool uncond_grad) {
  if (cfg == 1.0) return model.velocity(x, sigma, labels);  // (B, C, H, W)
  const torch::Tensor null_labels = torch::full_like(labels, model.null_label());
  const torch::Tensor v = model.velocity(torch::cat({x, x}), torch::cat({sigma, sigma}),
                                         torch::cat({labels, null_labels}));  // (2B, C, H, W)
  // Combine in at least float32: the difference of two bfloat16 velocities is coarse.
  const torch::Dtype wide = model.dtype() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const auto parts = v.to(wide).chunk(2, 0);
  // Detaching the unconditional half of the same 2B-row forward (rather than a separate no-grad
  // pass) keeps the values, and so the recomputed log-probs, bitwise equal to the sampler's.
  const torch::Tensor uncond = uncond_grad ? parts[1] : parts[1].detach();  // (B, C, H, W)
  return uncond + cfg * (parts[0] - uncond);                                // (B, C, H, W)
}

SdeRollout sample_sde(FlowModel& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                      const SdeSamplerOptions& o) {
  torch::NoGradGuard no_grad;
  SamplerRun run(model, labels, keys, o.steps, o.shift);
  torch::Tensor x = run.draw();  // (B, C, H, W)
  std::vector<torch::Tensor> latents{x}, log_probs;
  for (int64_t i = 0; i < o.steps; ++i) {
    const torch::Tensor s = run.sigma(i), s_next = run.sigma(i + 1);  // (B)
    const torch::Tensor v = guided_velocity(model, x, s, run.labels(), o.cfg);
    SdeStepResult st = sde_step(x, v, s, s_next, o.noise_level, run.sigma_max(), run.draw(), SdeGiven::kNoise);
    x = st.prev;
    latents.push_back(x);
    log_probs.push_back(st.log_prob);
  }
  return {torch::stack(latents, 1), torch::stack(log_probs, 1), run.sigmas()};
}

torch::Tensor sample_ode(FlowModel& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                         const OdeSamplerOptions& o) {
  torch::NoGradGuard no_grad;
  SamplerRun run(model, labels, keys, o.steps, o.shift);
  torch::Tensor x = run.draw();  // (B, C, H, W)
  for (int64_t i = 0; i < o.steps; ++i) {
    const torch::Tensor s = run.sigma(i), s_next = run.sigma(i + 1);  // (B)
    x = euler_step(x, guided_velocity(model, x, s, run.labels(), o.cfg), s, s_next);
  }
  return x;
}

SdeStepResult transition_log_prob(FlowModel& model, const torch::Tensor& x, const torch::Tensor& x_next,
                                  const torch::Tensor& sigma, const torch::Tensor& sigma_next,
                                  const torch::Tensor& labels, double noise_level, double sigma_max, double cfg,
                                  bool uncond_grad) {
  const torch::TensorOptions opts = step_options(model);
  const torch::Tensor s = sigma.to(opts), s_next = sigma_next.to(opts);  // (B)
  const torch::Tensor v = guided_velocity(model, x, s, labels.to(model.device()), cfg, uncond_grad);
  return sde_step(x, v, s, s_next, noise_level, sigma_max, x_next, SdeGiven::kPrev);
}

std::map<std::string, torch::Tensor> DitFlow::named_tensors() {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model_->named_parameters())
    if (!is_lora_parameter(p.key())) out[p.key()] = p.value().detach();
  return out;
}

void DitFlow::load_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& source) {
  torch::NoGradGuard no_grad;
  for (auto& p : model_->named_parameters()) {
    if (is_lora_parameter(p.key())) continue;  // the adapters have their own state (lora_linear.h)
    auto it = tensors.find(p.key());
    if (it == tensors.end()) throw UserError(source + ": missing tensor " + p.key());
    if (it->second.sizes() != p.value().sizes())
      throw UserError(source + ": " + p.key() + " has shape " + c10::str(it->second.sizes()) + ", the model wants " +
                      c10::str(p.value().sizes()));
    p.value().copy_(it->second);
  }
}

namespace {
// A DitFlow sharing ownership of a module the caller holds (in a Dit ModuleHolder).
DitFlow view(DitImpl& model) { return DitFlow(Dit(std::dynamic_pointer_cast<DitImpl>(model.shared_from_this()))); }
}  // namespace

SdeRollout sample_sde(DitImpl& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                      const SdeSamplerOptions& options) {
  DitFlow f = view(model);
  return sample_sde(f, labels, keys, options);
}

torch::Tensor sample_ode(DitImpl& model, const torch::Tensor& labels, const std::vector<NoiseKey>& keys,
                         const OdeSamplerOptions& options) {
  DitFlow f = view(model);
  return sample_ode(f, labels, keys, options);
}

torch::Tensor guided_velocity(DitImpl& model, const torch::Tensor& x, const torch::Tensor& sigma,
                              const torch::Tensor& labels, double cfg, bool uncond_grad) {
  DitFlow f = view(model);
  return guided_velocity(f, x, sigma, labels, cfg, uncond_grad);
}

SdeStepResult transition_log_prob(DitImpl& model, const torch::Tensor& x, const torch::Tensor& x_next,
                                  const torch::Tensor& sigma, const torch::Tensor& sigma_next,
                                  const torch::Tensor& labels, double noise_level, double sigma_max, double cfg,
                                  bool uncond_grad) {
  DitFlow f = view(model);
  return transition_log_prob(f, x, x_next, sigma, sigma_next, labels, noise_level, sigma_max, cfg, uncond_grad);
}

}  // namespace tandem::models
