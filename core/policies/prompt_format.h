// How a prompt's text becomes the token ids the policy sees, and which ids end a response: the
// model's chat template (data.chat_template), an optional system turn, BOS, and the stop set
// (the tokenizer's EOS, the template's eos_token, the model's eos ids). One object serves the
// sampler, the warm-start, `generate` and evaluation, so they all see the same prompt.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/tokenizers/tokenizer.h"

namespace tandem {

namespace models {
class ChatTemplate;
struct SamplingParams;
}  // namespace models

struct PromptFormatOptions {
  // "auto": the template beside the tokenizer file (chat_template.jinja, else tokenizer_config.json's
  // chat_template, as transformers 5 reads them), else raw text; "none": raw text; anything else: a
  // Jinja template file.
  std::string chat_template = "auto";
  std::optional<std::string> system_prompt;
  std::map<std::string, std::string> template_kwargs;  // extra template variables, values as JSON text
  std::optional<std::string> tokenizer_path;           // the tokenizer.json (or its directory); unset: char
  std::vector<int64_t> model_eos_ids;                  // config.json / generation_config.json
  // The model's vocabulary (0: no model): a prompt that encodes to an id past it is refused.
  int64_t model_vocab = 0;
  // Where the options came from, for messages ("tracks.ar.data.chat_template", "--chat-template").
  std::string origin = "tracks.ar.data.chat_template";
};

class PromptFormat {
 public:
  // Throws UserError naming the key and file: a template file that is missing or does not parse,
  // a system prompt without a template, a template eos_token the tokenizer does not know.
  PromptFormat(const PromptFormatOptions& options, const models::Tokenizer& tokenizer);
  ~PromptFormat();
  PromptFormat(const PromptFormat&) = delete;
  PromptFormat& operator=(const PromptFormat&) = delete;

  // The text the policy is prompted with: the rendered conversation [system], user, then the
  // assistant's opening; or the raw prompt without a template.
  std::string render(const std::string& prompt) const;
  // render() tokenized; without a template the tokenizer's BOS goes first (a template writes its
  // own bos_token where it wants one).
  std::vector<int64_t> encode(const std::string& prompt) const;

  bool templated() const { return chat_template_ != nullptr; }
  // The template came from a file of the recipe's (not the tokenizer's own configuration).
  bool template_from_file() const { return templated() && from_file_; }
  const models::ChatTemplate* chat_template() const { return chat_template_.get(); }  // null without one
  const std::string& template_kwargs() const { return template_kwargs_; }             // a JSON object
  const std::optional<std::string>& system_prompt() const { return system_prompt_; }
  const std::string& template_source() const;                              // "" without a template
  const std::string& template_origin() const { return template_origin_; }  // the file it came from
  // Every id that ends a response, without repeats: tokenizer EOS, template eos_token, model ids,
  // and the special token the template closes an assistant turn with.
  const std::vector<int64_t>& stop_ids() const { return stop_ids_; }
  // The id a model turn ends with: the special token the template closes an assistant turn with
  // (<|im_end|>, <|eot_id|>), else the first stop id. A base tokenizer's EOS (<|endoftext|>,
  // <|end_of_text|>) ends documents, not turns.
  int64_t end_of_turn_id() const { return turn_end_ ? *turn_end_ : stop_ids_.front(); }
  // "chat template <file>, system prompt: yes, stop: <|im_end|> <|endoftext|>" for the start-up log.
  std::string describe() const;

 private:
  // The special token right after an assistant turn's content in the template's rendering, if any.
  std::optional<int64_t> turn_end_id() const;

  const models::Tokenizer& tokenizer_;
  std::unique_ptr<models::ChatTemplate> chat_template_;
  std::string template_kwargs_;  // a JSON object of the extra variables
  std::string template_origin_;
  bool from_file_ = false;
  std::optional<std::string> system_prompt_;
  int64_t model_vocab_ = 0;
  std::vector<int64_t> stop_ids_;
  std::optional<int64_t> turn_end_;
};

// Throws UserError (naming `what`) when the model's vocabulary cannot hold the tokenizer's: a
// tokenizer may run past it only with special tokens a prompt would have to spell out (Gemma 3 1B's
// <image_soft_token>, id 262144 of a 262144-id model), which encode() then refuses.
void check_tokenizer_fits(const models::Tokenizer& tokenizer, int64_t model_vocab, const std::string& what);

// Adds `stops` (rollout.stop, an environment's stop strings) to `sp` as stop strings matched on the
// text `tokenizer` decodes (SamplingParams::stop_strings); one that is a single id alone also
// stops on that id at once. The tokenizer must outlive the generation.
void add_stop_strings(const std::vector<std::string>& stops, const models::Tokenizer& tokenizer,
                      models::SamplingParams& sp);

}  // namespace tandem
