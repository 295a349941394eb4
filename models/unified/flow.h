// The unified model's image side as a FlowModel: label k is drawn from the text prompt
// prompts[k] (token ids), the null label from an empty prompt. Every batch's text part is padded
// to the widest prompt, so a sample's velocity never depends on which prompts share its batch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/layers/flow_model.h"
#include "models/unified/model.h"

namespace tandem::models {

class UnifiedFlow final : public FlowModel {
 public:
  // prompts: one token-id list per label (non-empty lists of ids in the vocabulary, each at most
  // max_text_len long); throws UserError otherwise.
  UnifiedFlow(UnifiedModel model, std::vector<std::vector<int64_t>> prompts);

  torch::Tensor velocity(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& labels) override;
  int64_t null_label() const override { return static_cast<int64_t>(prompts_.size()); }
  int64_t channels() const override { return model_->config().channels; }
  int64_t image_size() const override { return model_->config().image_size; }
  torch::Dtype dtype() const override { return model_->dtype(); }
  torch::Device device() const override { return model_->device(); }
  std::vector<torch::Tensor> parameters() override { return model_->parameters(); }
  std::map<std::string, torch::Tensor> named_tensors() override;
  void load_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& source) override;

  // labels (B) -> the prompts' ids (B, width) and lengths (B), the null label's length 0.
  std::pair<torch::Tensor, torch::Tensor> prompt_batch(const torch::Tensor& labels) const;
  const std::vector<std::vector<int64_t>>& prompts() const { return prompts_; }
  UnifiedModel& module() { return model_; }

 private:
  UnifiedModel model_;
  std::vector<std::vector<int64_t>> prompts_;
  int64_t width_ = 1;
};

}  // namespace tandem::models
