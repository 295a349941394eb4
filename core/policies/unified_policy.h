// The unified text + image model (models/unified) in the engine: its config from the recipe
// (tracks.ar.model with arch unified, the image side from tracks.image.model), the text side as
// the AR track's TextPolicy, and the class prompts the image track draws from.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/policies/text_policy.h"
#include "models/layers/lora_linear.h"
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
// The base only: a model with adapters is referenced with them off instead (no copy).
models::UnifiedModel frozen_copy(models::UnifiedModelImpl& model);

// The AR track's policy on the unified model. Packed batches run as padded rows (the unified
// attention takes an explicit mask) and their log-probs are put back on the packed axis.
class UnifiedTextPolicy final : public TextPolicy {
 public:
  explicit UnifiedTextPolicy(models::UnifiedModel model);
  // A model with adapters attached (models::attach_lora) by `lora`; adapter_info: extra keys of
  // the saved adapter_config.json (base_model_name_or_path).
  UnifiedTextPolicy(models::UnifiedModel model, models::LoraSpec lora, nlohmann::json adapter_info);

  Output forward_packed(const PackedBatch& batch, bool with_entropy) override;  // (N)
  Output forward_padded(const PaddedBatch& batch, bool with_entropy) override;  // (B, T)
  std::vector<torch::Tensor> parameters() override;
  std::vector<models::Generation> generate(const std::vector<models::GenerationRequest>& requests,
                                           const models::SamplingParams& params) override;
  void save(const std::string& dir, bool write) override;
  void load(const std::string& dir) override;
  std::unique_ptr<TextPolicy> frozen_copy() override;
  int64_t max_seq_len() const override { return model_->config().max_text_len; }
  bool has_adapters() const override { return lora_.has_value(); }
  std::vector<torch::Tensor> base_parameters() override { return models::base_parameters(*model_); }
  void save_base(const std::string& dir, bool write) override;
  void load_base(const std::string& dir) override;

  models::UnifiedModel& model() { return model_; }

 private:
  // ids (B, T), lengths (B), targets (B, T) -> log-probs (and entropy) (B, T).
  Output rows(const torch::Tensor& ids, const torch::Tensor& lengths, const torch::Tensor& targets, bool with_entropy);
  models::UnifiedModel model_;
  std::optional<models::LoraSpec> lora_;  // the policy trains these adapters
  nlohmann::json adapter_info_;
  bool adapters_off_ = false;  // the KL reference of a LoRA policy: the same model, adapters off
};

}  // namespace tandem
