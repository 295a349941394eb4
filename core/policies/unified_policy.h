// The unified text + image model (models/unified) in the engine: its config from the recipe
// (tracks.ar.model with arch unified, the image side from tracks.image.model), the text side as
// the AR track's TextPolicy, and the class prompts the image track draws from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/policies/text_policy.h"
#include "models/tokenizers/tokenizer.h"
#include "models/unified/model.h"

namespace tandem {

// tracks.ar.model (trunk and text) + tracks.image.model (image_size, channels, patch_size).
models::UnifiedConfig unified_config(const ArModelConfig& ar, const ImageModelConfig& image);

// What image label k asks for, written as text: "draw " + the shapes task's class name
// ("draw circle"), tokenized with the AR tokenizer (its BOS first when it has one). Throws
// UserError naming tracks.ar.tokenizer when the tokenizer cannot write a class name.
std::vector<std::vector<int64_t>> class_prompts(const models::Tokenizer& tokenizer, int64_t num_classes);
std::string class_prompt_text(int64_t label);

// A copy of `model`'s current weights (same device and dtype) that takes no gradients: a KL reference.
models::UnifiedModel frozen_copy(models::UnifiedModelImpl& model);

// The AR track's policy on the unified model. Packed batches run as padded rows (the unified
// attention takes an explicit mask) and their log-probs are put back on the packed axis.
class UnifiedTextPolicy final : public TextPolicy {
 public:
  explicit UnifiedTextPolicy(models::UnifiedModel model);

  Output forward_packed(const PackedBatch& batch, bool with_entropy) override;  // (N)
  Output forward_padded(const PaddedBatch& batch, bool with_entropy) override;  // (B, T)
  std::vector<torch::Tensor> parameters() override { return model_->parameters(); }
  std::vector<models::Generation> generate(const std::vector<models::GenerationRequest>& requests,
                                           const models::SamplingParams& params) override;
  void save(const std::string& dir, bool write) override;
  void load(const std::string& dir) override;
  std::unique_ptr<TextPolicy> frozen_copy() override;
  int64_t max_seq_len() const override { return model_->config().max_text_len; }

  models::UnifiedModel& model() { return model_; }

 private:
  // ids (B, T), lengths (B), targets (B, T) -> log-probs (and entropy) (B, T).
  Output rows(const torch::Tensor& ids, const torch::Tensor& lengths, const torch::Tensor& targets, bool with_entropy);
  models::UnifiedModel model_;
};

}  // namespace tandem
