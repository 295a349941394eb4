// The AR track's policy: log-probs for the update (PolicyModel) plus what a rollout and a
// checkpoint need. LlamaPolicy (a Llama / Qwen2 LM) and UnifiedTextPolicy (the text side of the
// unified text + image model) implement it, so the GRPO step does not know which model it trains.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/env/turn_generator.h"
#include "core/grpo/policy_update.h"
#include "models/llama/sampler.h"

namespace tandem {

class TextPolicy : public PolicyModel {
 public:
  // One response per request (models/llama/sampler.h's contract). Collective over tp.
  virtual std::vector<models::Generation> generate(const std::vector<models::GenerationRequest>& requests,
                                                   const models::SamplingParams& params) = 0;
  // Multi-turn episodes (tracks.ar.env): turns sampled on a KV cache of `slots` sequences of up
  // to `capacity` tokens that survives between turns. Throws UserError for a policy without one.
  virtual std::unique_ptr<env::TurnGenerator> turn_generator(const models::SamplingParams& params, int64_t slots,
                                                             int64_t capacity) {
    (void)params, (void)slots, (void)capacity;
    throw UserError("this policy samples one response per prompt: multi-turn episodes need the llama architecture");
  }
  // The model's directory format under `dir` (written by the ranks that `write`), and back.
  virtual void save(const std::string& dir, bool write) = 0;
  virtual void load(const std::string& dir) = 0;
  // A frozen copy of the current weights (the KL reference).
  virtual std::unique_ptr<TextPolicy> frozen_copy() = 0;
  virtual int64_t max_seq_len() const = 0;
  // Per entry of `params` (this policy's tensors): split over tp (its gradient's square adds up across
  // tp ranks)?
  virtual std::vector<bool> tp_sharded(const std::vector<torch::Tensor>& params) {
    return std::vector<bool>(params.size(), false);
  }

  // LoRA (tracks.ar.lora): adapters trained on a frozen base. parameters() then names the adapters
  // only, save / load use the adapter directory (peft's), frozen_copy is the base with the
  // adapters off (no copy), and these reach the base itself.
  virtual bool has_adapters() const { return false; }
  virtual std::vector<torch::Tensor> base_parameters() { return parameters(); }
  virtual void save_base(const std::string& dir, bool write) { save(dir, write); }
  virtual void load_base(const std::string& dir) { load(dir); }

  // Runs the lm head on the loss-mask rows only in the training forwards of this policy and of its
  // frozen copies (their log-probs are 0 elsewhere). On for multi-turn episodes, which are mostly
  // prompt and observations; single-turn recipes keep the full head, which the measured figures
  // assume. A no-op where a policy has no such mode.
  virtual void set_head_on_trained_rows(bool) {}
};

}  // namespace tandem
