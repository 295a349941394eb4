// What the flow samplers and FlowGRPO need of an image policy: a label-conditional velocity field.
// The class-conditional DiT implements it directly; the unified model implements it by writing
// each label as its text prompt (models/unified/flow.h). Label null_label() is the null
// condition (no class / an empty prompt) that classifier-free guidance contrasts against.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::models {

class FlowModel {
 public:
  virtual ~FlowModel() = default;
  // x (B, C, H, W) at flow time sigma (B), labels (B) int64 in [0, null_label()] -> v (B, C, H, W).
  virtual torch::Tensor velocity(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& labels) = 0;
  virtual int64_t null_label() const = 0;
  virtual int64_t channels() const = 0;
  virtual int64_t image_size() const = 0;
  virtual torch::Dtype dtype() const = 0;
  virtual torch::Device device() const = 0;
  // Every trainable tensor of the model behind it (for a shared model: text side too).
  virtual std::vector<torch::Tensor> parameters() = 0;
  // The tensors by their safetensors names, and the inverse (throws UserError naming `source`).
  virtual std::map<std::string, torch::Tensor> named_tensors() = 0;
  virtual void load_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& source) = 0;
};

}  // namespace tandem::models
