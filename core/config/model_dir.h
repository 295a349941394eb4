// A Hugging Face model directory as the source of truth for tracks.ar.model: what its
// config.json and generation_config.json say, and the recipe resolved against them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace tandem {

struct ModelDir {
  std::string dir;
  nlohmann::json config;             // config.json as written (an export keeps every key of it)
  nlohmann::json generation_config;  // generation_config.json, or null when the directory has none
  ArModelConfig model;               // the architecture as recipe keys (hf_dir = dir)
};

// Reads dir/config.json (a llama or qwen2 model) and dir/generation_config.json when present.
// Throws UserError naming the directory or file: not a directory, no config.json, not JSON, an
// unsupported or out-of-range field. bos / eos ids: config.json's, then every id of
// generation_config.json's eos_token_id (an int or a list), in that order, without repeats.
ModelDir read_model_dir(const std::string& dir);

// With tracks.ar.model.hf_dir (arch llama, AR track on) fills every architecture key from the
// directory. A key in `given` (paths the recipe set, e.g. "tracks.ar.model.hidden_size") that
// differs is a UserError naming both values; max_seq_len may be lowered (it caps prompt +
// response), not raised. The tokenizer defaults to the directory's (kind hf, path hf_dir) unless
// the recipe names one.
void resolve_model_dir(Config& config, const std::set<std::string>& given);

// What makes a directory of weights (config.json + safetensors, as save_llama writes them) a
// complete Hugging Face model directory that other tools and `tandem generate --model` read
// the way training did.
struct HfDirCompanions {
  const ModelDir* source = nullptr;           // the hf_dir training started from, or null
  std::optional<std::string> tokenizer_path;  // tokenizer.json or its directory; unset: none (char)
  std::optional<std::string> chat_template;   // a template from the recipe's file (overrides the tokenizer's)
  std::vector<int64_t> stop_ids;              // every id that ended a response in training
  std::optional<int64_t> bos_id;
};

// config.json: every key of the source's kept, the architecture keys and torch_dtype as written,
// eos_token_id / bos_token_id set; tokenizer.json, tokenizer_config.json (with `chat_template`
// when given, and then no chat_template.jinja), special_tokens_map.json, added_tokens.json and
// chat_template.jinja copied from the tokenizer's directory; generation_config.json from the source with eos_token_id =
// stop_ids (written anew when the source has none). Throws UserError naming a file it cannot write.
void complete_hf_dir(const std::string& dir, const HfDirCompanions& companions);

}  // namespace tandem
