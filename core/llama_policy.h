// PolicyModel on top of the Llama model: builds the model's input structs from the collated
// PackedBatch / PaddedBatch and returns per-token log-probs (and entropy) on the batch's axis.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "core/config.h"
#include "core/policy_update.h"
#include "models/llama/model.h"

namespace tandem {

class LlamaPolicy final : public PolicyModel {
 public:
  explicit LlamaPolicy(models::LlamaForCausalLM model, models::LogProbOptions options = {});

  Output forward_packed(const PackedBatch& batch, bool with_entropy) override;   // (N)
  Output forward_padded(const PaddedBatch& batch, bool with_entropy) override;   // (B, T)
  std::vector<torch::Tensor> parameters() override;

  models::LlamaForCausalLM& model() { return model_; }

 private:
  models::LlamaForCausalLM model_;
  models::LogProbOptions options_;
};

models::PackedInput to_model_input(const PackedBatch& batch);
models::PaddedInput to_model_input(const PaddedBatch& batch);

// The recipe's tracks.ar.model block as the model's config (hf_dir is the loader's business).
models::LlamaConfig llama_config(const ArModelConfig& model);

}  // namespace tandem
