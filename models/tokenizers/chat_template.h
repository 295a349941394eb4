// A model's chat template: the Jinja template of a tokenizer directory (chat_template.jinja or
// tokenizer_config.json's), or a plain Jinja file,
// rendered into a prompt exactly as transformers' apply_chat_template(..., tokenize=False) does.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/jinja/jinja.h"

namespace tandem::models {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // tokenizer_config.json: "chat_template" is a string, or a list of {"name", "template"} of which
  // the one named "default" is used; "bos_token" / "eos_token" are each a string, an AddedToken
  // object {"content": ...}, null or absent. Throws UserError naming the file when it cannot be
  // read, has no chat template, or the template does not parse.
  static ChatTemplate from_tokenizer_config(const std::string& path);
  // A tokenizer directory's template as transformers 5 loads it: chat_template.jinja, which its
  // save_pretrained writes instead of tokenizer_config.json's "chat_template" (and which wins when
  // both are there), else tokenizer_config.json's; bos / eos from tokenizer_config.json. nullopt
  // when there is neither (a base model). `origin` (non-null) gets the file the template came from.
  static std::optional<ChatTemplate> from_tokenizer_dir(const std::string& dir, std::string* origin);
  // A plain Jinja file (what `data.chat_template: FILE` names); bos / eos come from the caller.
  static ChatTemplate from_file(const std::string& path, std::string bos_token, std::string eos_token);
  // `origin` names the template in error messages.
  static ChatTemplate from_source(std::string source, std::string origin, std::string bos_token, std::string eos_token);

  // The context transformers passes: messages (a list of {"role", "content"} dicts, in that key
  // order), add_generation_prompt, tools=None, documents=None, bos_token / eos_token when the
  // tokenizer has them (an empty string means it has none: the name stays undefined), then every
  // key of `extra` (e.g. {"enable_thinking": false}), which may override any of those.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;
  // The same with messages as JSON objects passed through as they are (a tool message's "name",
  // an assistant's "tool_calls") and `tools` (a list of JSON schemas, or null) as the template's
  // `tools`, as apply_chat_template(messages, tools=...) does.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools, const nlohmann::json& extra) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, jinja::Template compiled, std::string bos, std::string eos)
      : source_(std::move(source)),
        compiled_(std::move(compiled)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)) {}

  std::string source_;
  jinja::Template compiled_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace tandem::models
