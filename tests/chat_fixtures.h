// A real tokenizer with its chat template (scripts/fixtures/fetch_tokenizers.sh) for the
// multi-turn tests; Llama-3.1's template comes from its fixture, as the transformers oracle uses it.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "fixtures.h"
#include "models/tokenizers/chat_template.h"
#include "models/tokenizers/tokenizer.h"

namespace tandem::test {

struct RealChat {
  std::unique_ptr<models::Tokenizer> tokenizer;
  std::unique_ptr<models::ChatTemplate> chat_template;
  int64_t end_of_turn = -1;  // the id a model turn stops on
};

// False when the tokenizer's files are not there (the caller skips, loudly).
inline bool load_real_chat(const std::string& name, RealChat& out) {
  const std::string dir = real_tokenizer_dir(name);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return false;
  out.tokenizer = models::load_hf_tokenizer(dir);
  if (name == "llama3_1") {
    const auto fixture =
        nlohmann::json::parse(std::ifstream(std::string(TANDEM_FIXTURES_DIR) + "/chat_templates/llama3_1.json"));
    out.chat_template = std::make_unique<models::ChatTemplate>(
        models::ChatTemplate::from_source(fixture["template"], "llama3_1", fixture["bos_token"], fixture["eos_token"]));
  } else {
    out.chat_template = std::make_unique<models::ChatTemplate>(
        models::ChatTemplate::from_tokenizer_config(dir + "/tokenizer_config.json"));
  }
  out.end_of_turn = *out.tokenizer->token_to_id(name == "llama3_1" ? "<|eot_id|>" : "<|im_end|>");
  return true;
}

}  // namespace tandem::test
