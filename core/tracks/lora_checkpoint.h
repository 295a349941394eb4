// A LoRA run's checkpoint (tracks.ar.lora): ar_adapter/ is a peft adapter directory plus
// base_model.json, the frozen base's identity; ar_base/ holds the base itself only when no file
// does (a random init, warm-started), else ar_base_files/ the run's other Hugging Face files. Read back here for
// resume, `generate` and `ckpt export-hf`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/config/config.h"
#include "core/policies/text_policies.h"

namespace tandem {

inline constexpr const char* kAdapterDir = "ar_adapter";
inline constexpr const char* kBaseDir = "ar_base";
inline constexpr const char* kBaseIdentityFile = "base_model.json";
// With an hf_dir base: the Hugging Face files (no weights) of the run's policy as ar_model/ would
// hold them (config with the stop ids, tokenizer files, the recipe's template file), which a
// merged export lays over the base directory's own.
inline constexpr const char* kBaseFilesDir = "ar_base_files";

// A base model directory's identity: its path and the hash of every weight file's bytes (not
// only the headers: fine-tunes of one model have identical headers).
nlohmann::json hf_dir_identity(const std::string& hf_dir);
// The identity of the base a run with `ar` trains adapters on (reads hf_dir's weights).
nlohmann::json base_identity(const ArTrackConfig& ar);
// Throws UserError (what names the checkpoint) unless `saved` and `now` name the same weights.
void check_base_identity(const nlohmann::json& saved, const nlohmann::json& now, const std::string& what);
// checkpoint/ar_adapter/base_model.json, checked to be a JSON object.
nlohmann::json read_base_identity(const std::string& checkpoint);

// --base DIR: checkpoint `dir`'s LoRA base, a Hugging Face directory, read from `base` instead of
// where the run read it (moved, or the checkpoint copied to another machine); a tokenizer the run
// read from that directory moves with it. load_lora_checkpoint still checks the base's identity.
// Throws UserError when `dir` holds no adapters, holds its base itself (ar_base/), or `base` is not
// a directory.
void use_lora_base(Config& config, const std::string& dir, const std::string& base);
// The first of use_lora_base's refusals alone: throws UserError when `dir` holds no adapters.
void require_adapters_for_base(const std::string& dir, const std::string& base);

// Checkpoint `dir`'s policy on one process (tp 1) in `dtype`: its base (ar_base/, or the recipe's
// hf_dir after its identity is checked) with its adapters attached and loaded: a LlamaPolicy, or on
// arch unified a UnifiedTextPolicy with .unified its model. base_dir: where the base came from.
BuiltTextPolicy load_lora_checkpoint(const std::string& dir, const Config& config, torch::Dtype dtype,
                                     std::string* base_dir = nullptr);

}  // namespace tandem
