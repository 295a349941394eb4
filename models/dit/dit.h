// A small class-conditional diffusion transformer (DiT, Peebles & Xie 2023) that predicts the
// rectified-flow velocity. Convention: x_t = (1 - sigma) x0 + sigma noise, input sigma in [0, 1],
// output v = noise - x0. Departure from DiT: no learned-sigma output channels (flow matching has no
// variance head); class index num_classes is the null class for classifier-free guidance.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "models/dit/dit_layers.h"

namespace tandem::models {

struct DitConfig {
  int64_t image_size = 16;  // square images, image_size % patch_size == 0
  int64_t channels = 3;
  int64_t patch_size = 4;
  int64_t hidden_size = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;  // divides hidden_size
  int64_t num_classes = 4;

  int64_t null_class() const { return num_classes; }
  int64_t grid() const { return image_size / patch_size; }
  int64_t num_patches() const { return grid() * grid(); }
};

// Throws std::invalid_argument naming the field when the config cannot build a model.
void check_dit_config(const DitConfig& config);

class DitImpl : public torch::nn::Module {
 public:
  explicit DitImpl(const DitConfig& config);

  // x (B, C, H, W), sigma (B) in [0, 1], labels (B) int64 in [0, num_classes] -> v (B, C, H, W).
  // Works in whatever float dtype the module was moved to; sigma is cast as needed.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& labels);

  const DitConfig& config() const { return config_; }
  torch::Dtype dtype() const { return patch_embed->weight.scalar_type(); }
  torch::Device device() const { return patch_embed->weight.device(); }

  torch::nn::Conv2d patch_embed{nullptr};  // C -> D, kernel = stride = patch_size
  TimestepEmbedder t_embed{nullptr};
  torch::nn::Embedding y_embed{nullptr};  // num_classes + 1 rows (the last is the null class)
  torch::nn::ModuleList blocks{nullptr};
  FinalLayer final_layer{nullptr};
  torch::Tensor pos_embed;  // (1, N, D) fixed sin-cos buffer

 private:
  torch::Tensor unpatchify(const torch::Tensor& tokens) const;  // (B, N, p*p*C) -> (B, C, H, W)

  DitConfig config_;
};
TORCH_MODULE(Dit);

}  // namespace tandem::models
