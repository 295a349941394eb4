// The AR policy's architectures, registered once: for each tracks.ar.model.arch, the recipe rules
// it adds, how a run builds or loads it, how a checkpoint's ar_model/ is read back, and whether it
// exports to Hugging Face. The AR track, `generate`, `ckpt` and the recipe validation all go
// through this table instead of comparing the arch themselves.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "core/config/config.h"
#include "core/config/model_dir.h"
#include "core/policies/prompt_format.h"
#include "core/policies/text_policy.h"
#include "models/unified/model.h"
#include "parallel/parallel_context.h"

namespace tandem {

// The recipe's chat template, system prompt, tokenizer and model stop ids as PromptFormat options.
PromptFormatOptions prompt_format_options(const ArTrackConfig& ar);

// What a Hugging Face directory of this run's policy carries beside the weights (complete_hf_dir):
// the run's tokenizer files, the recipe's template file folded into tokenizer_config.json, and the
// ids that ended a response in training as eos_token_id, so transformers stops where the run did.
// `source`: the model directory training started from (or its copy in a checkpoint), or null.
HfDirCompanions hf_dir_companions(const ArTrackConfig& ar, const PromptFormat& format,
                                  const models::Tokenizer& tokenizer, const ModelDir* source);

struct BuiltTextPolicy {
  std::unique_ptr<TextPolicy> policy;
  models::UnifiedModel unified{nullptr};  // the shared text + image model (arch unified), else empty
};

struct TextPolicySpec {
  ArArch arch;
  // The cross-field recipe rules of this arch (beyond the schema's per-key ranges); throws
  // UserError naming the key. Called by validate() for an enabled AR track.
  void (*validate)(const Config& config);
  // The policy a run trains: tracks.ar.model.hf_dir loaded, or a fresh init from run.seed; sharded
  // for ctx, parameters in `dtype` on `device`.
  BuiltTextPolicy (*build)(const Config& config, const parallel::ParallelContext& ctx, torch::Device device,
                           torch::Dtype dtype);
  // The policy a checkpoint's ar_model/ directory holds, on one process (tp 1), in `dtype`.
  BuiltTextPolicy (*load)(const std::string& ar_model_dir, torch::Dtype dtype);
  // Why this arch does not export as a Hugging Face directory; nullptr when it does.
  const char* no_hf_export;
};

// The spec of `arch`; every ArArch value has one.
const TextPolicySpec& text_policy_spec(ArArch arch);

}  // namespace tandem
