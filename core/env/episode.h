// One multi-turn episode as one token sequence, token in, token out: the model's sampled ids are
// kept as they are (never decoded and re-encoded), and everything else (the first prompt, the
// template's closing tokens a turn stopped before, the environment's observations) is rendered by
// the model's own chat template as the difference between the conversation with and without the
// new part, after checking that the template only appends (it rewrites nothing already rendered).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/tokenizers/chat_template.h"
#include "models/tokenizers/tokenizer.h"

namespace tandem::env {

// Where a token came from. Only kModel tokens are trained (loss mask 1).
enum class TokenSource : uint8_t { kPrompt = 0, kModel = 1, kTemplate = 2, kEnv = 3 };

// The chat template with what every render of a run shares: the environment's tools and the
// recipe's extra template variables (enable_thinking, ...).
struct ConversationFormat {
  const models::ChatTemplate* chat_template = nullptr;
  const models::Tokenizer* tokenizer = nullptr;
  nlohmann::ordered_json tools = nullptr;           // the environment's tool schemas, or null
  nlohmann::json extra = nlohmann::json::object();  // extra template variables
  std::string origin;                               // names the template in errors

  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
};

// Thrown when the template is not append-only at a boundary (it re-renders earlier text once
// more messages follow: Qwen3 with enable_thinking false drops an earlier turn's empty think
// block). The message names the template, the boundary and the first differing text.
struct NotAppendOnly : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Episode {
 public:
  // Renders `first` (the environment's first messages, after an optional system message) with the
  // generation prompt: the prompt tokens. The sequence never grows past `max_tokens` after them.
  Episode(const ConversationFormat& format, nlohmann::ordered_json first,
          int64_t max_tokens = std::numeric_limits<int64_t>::max());

  // The model's turn: `sampled` are the sampler's ids, with the stop id it ended on when
  // `ended_by_stop_id`. They are appended as they are (kModel). Then the template's closing text
  // after an assistant message (e.g. "<|im_end|>\n"), less the stop token the model did emit, is
  // appended as kTemplate: after a stop string or a length cut the end-of-turn token is added
  // here (as much of it as max_tokens leaves room for: the episode cannot go on then anyway).
  // Returns the turn's text (the ids decoded, the final stop id left out), which is what the
  // environment and the conversation get.
  std::string add_model_turn(const std::vector<int64_t>& sampled, bool ended_by_stop_id);

  // The environment's messages, appended as the template renders them after the conversation so
  // far, with the next generation prompt (kEnv). Returns false, appending nothing, when they would
  // take the sequence past max_tokens. Throws NotAppendOnly.
  bool add_observation(const nlohmann::ordered_json& messages);

  const std::vector<int64_t>& tokens() const { return tokens_; }
  const std::vector<TokenSource>& sources() const { return sources_; }
  // [begin, end) of each model turn's sampled ids in tokens().
  const std::vector<std::pair<int64_t, int64_t>>& turn_spans() const { return turns_; }
  int turns() const { return static_cast<int>(turns_.size()); }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  const nlohmann::ordered_json& messages() const { return messages_; }

 private:
  void append(const std::vector<int64_t>& ids, TokenSource source);
  // `longer` must start with `shorter`; returns the rest. Throws NotAppendOnly naming `boundary`.
  std::string extension(const std::string& shorter, const std::string& longer, const std::string& boundary) const;

  const ConversationFormat& format_;
  nlohmann::ordered_json messages_;
  std::vector<int64_t> tokens_;
  std::vector<TokenSource> sources_;
  std::vector<std::pair<int64_t, int64_t>> turns_;
  int64_t prompt_tokens_ = 0;
  int64_t max_tokens_;
  // After a model turn: the text of every token so far (see add_observation).
  std::optional<std::string> seen_;
};

}  // namespace tandem::env
