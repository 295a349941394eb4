// PolicyModel on top of the Llama model: builds the model's input structs from the collated
// PackedBatch / PaddedBatch and returns per-token log-probs (and entropy) on the batch's axis.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/policies/text_policy.h"
#include "models/llama/lora.h"
#include "models/llama/model.h"
#include "models/llama/weights.h"

namespace tandem {

class LlamaPolicy final : public TextPolicy {
 public:
  explicit LlamaPolicy(models::LlamaForCausalLM model, models::LogProbOptions options = {});
  // A model with adapters attached (models/llama/lora.h) by `lora`; adapter_info: extra keys of
  // the saved adapter_config.json (base_model_name_or_path).
  LlamaPolicy(models::LlamaForCausalLM model, models::LogProbOptions options, models::LoraSpec lora,
              nlohmann::json adapter_info);

  Output forward_packed(const PackedBatch& batch, bool with_entropy) override;  // (N)
  Output forward_padded(const PaddedBatch& batch, bool with_entropy) override;  // (B, T)
  bool fuses_token_loss() const override { return options_.chunked; }
  Output forward_packed_fused(const PackedBatch& batch, bool with_entropy,
                              const parallel::TokenLossFn& loss) override;  // logp (N) detached, loss ()
  Output forward_padded_fused(const PaddedBatch& batch, bool with_entropy,
                              const parallel::TokenLossFn& loss) override;  // logp (B, T) detached, loss ()
  std::vector<torch::Tensor> parameters() override;
  std::vector<models::Generation> generate(const std::vector<models::GenerationRequest>& requests,
                                           const models::SamplingParams& params) override;
  std::unique_ptr<env::TurnGenerator> turn_generator(const models::SamplingParams& params, int64_t slots,
                                                     int64_t capacity) override;
  void save(const std::string& dir, bool write) override;
  void load(const std::string& dir) override;
  std::unique_ptr<TextPolicy> frozen_copy() override;
  int64_t max_seq_len() const override { return model_->config().max_seq_len; }
  std::vector<bool> tp_sharded(const std::vector<torch::Tensor>& params) override {
    return models::tp_sharded(*model_, params);
  }
  bool has_adapters() const override { return lora_.has_value(); }
  std::vector<torch::Tensor> base_parameters() override;
  void save_base(const std::string& dir, bool write) override;
  void load_base(const std::string& dir) override;

  models::LlamaForCausalLM& model() { return model_; }
  void set_head_on_trained_rows(bool on) override { head_on_trained_rows_ = on; }

 private:
  template <class Batch>
  Output run(const Batch& batch, bool with_entropy, const parallel::TokenLossFn* loss);
  models::LlamaForCausalLM model_;
  models::LogProbOptions options_;
  std::optional<models::LoraSpec> lora_;  // the policy trains these adapters
  nlohmann::json adapter_info_;
  bool adapters_off_ = false;  // the KL reference of a LoRA policy: the same model, adapters off
  bool head_on_trained_rows_ = false;
};

models::PackedInput to_model_input(const PackedBatch& batch);
models::PaddedInput to_model_input(const PaddedBatch& batch);

// The recipe's tracks.ar.model block as the model's config (hf_dir is the loader's business).
models::LlamaConfig llama_config(const ArModelConfig& model);

// tracks.ar.lora as the adapters' spec (all-linear resolved to the module names).
models::LoraSpec lora_spec(const LoraConfig& lora);
// The adapters' init seed is run.seed + this.
inline constexpr uint64_t kLoraSeedOffset = 0x4c6f5241;  // "LoRA"

}  // namespace tandem
