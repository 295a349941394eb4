// See prompt_format.h. Rendering follows transformers' apply_chat_template(add_generation_prompt=
// True, tokenize=True): the rendered text is tokenized without adding special tokens, because a
// chat template writes BOS itself where the model wants it.
#include "core/policies/prompt_format.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "models/llama/sampler.h"
#include "models/tokenizers/chat_template.h"

namespace fs = std::filesystem;

namespace tandem {

namespace {

// The directory of a tokenizer path (tokenizer.json or its directory).
std::string tokenizer_dir_of(const std::string& tokenizer_path) {
  std::error_code ec;
  const fs::path p = tokenizer_path;
  return (fs::is_directory(p, ec) ? p : p.parent_path()).string();
}

void add_unique(std::vector<int64_t>& ids, int64_t id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace

PromptFormat::PromptFormat(const PromptFormatOptions& o, const models::Tokenizer& tokenizer)
    : tokenizer_(tokenizer), system_prompt_(o.system_prompt) {
  std::error_code ec;
  nlohmann::json kwargs = nlohmann::json::object();
  for (const auto& [name, value] : o.template_kwargs) kwargs[name] = nlohmann::json::parse(value);
  template_kwargs_ = kwargs.dump();
  if (o.chat_template == "auto") {
    // Base models ship no template: auto then means raw text.
    if (o.tokenizer_path)
      if (auto t = models::ChatTemplate::from_tokenizer_dir(tokenizer_dir_of(*o.tokenizer_path), &template_origin_))
        chat_template_ = std::make_unique<models::ChatTemplate>(std::move(*t));
  } else if (o.chat_template != "none") {
    if (!fs::is_regular_file(o.chat_template, ec))
      throw UserError(o.origin + ": " + o.chat_template + " is not a template file (use auto, none or a Jinja file)");
    // The model's special tokens, as the tokenizer spells them, for templates that write them.
    auto token = [&](std::optional<int64_t> id) { return id ? tokenizer.id_to_token(*id) : std::string(); };
    chat_template_ = std::make_unique<models::ChatTemplate>(
        models::ChatTemplate::from_file(o.chat_template, token(tokenizer.bos_id()), token(tokenizer.eos_id())));
    template_origin_ = o.chat_template;
    from_file_ = true;
  }
  if (system_prompt_ && !chat_template_)
    throw UserError(o.origin + ": a system prompt (tracks.ar.data.system_prompt) needs a chat template, and " +
                    (o.chat_template == "none" ? std::string("chat_template is none")
                                               : "the tokenizer has none (no chat_template.jinja, no chat_template in "
                                                 "tokenizer_config.json)") +
                    "; give chat_template a Jinja file or remove system_prompt");
  if (!o.template_kwargs.empty() && !chat_template_)
    throw UserError(o.origin + ": chat_template_kwargs (" + template_kwargs_ +
                    ") need a chat template, and there is none; remove them or give chat_template a Jinja file");
  if (auto eos = tokenizer.eos_id()) add_unique(stop_ids_, *eos);
  if (chat_template_ && !chat_template_->eos_token().empty()) {
    const auto id = tokenizer.token_to_id(chat_template_->eos_token());
    if (!id)
      throw UserError((fs::path(template_origin_).parent_path() / "tokenizer_config.json").string() + ": eos_token '" +
                      chat_template_->eos_token() +
                      "' is not a token of the tokenizer; the template does not belong to this tokenizer");
    add_unique(stop_ids_, *id);
  }
  for (const int64_t id : o.model_eos_ids) add_unique(stop_ids_, id);
  model_vocab_ = o.model_vocab;
  if (chat_template_) {
    render("check");  // a template that cannot render a plain turn fails now, not mid-run
    // The token the template closes an assistant turn with (Llama 3's <|eot_id|>, whose tokenizer
    // and config name <|end_of_text|> as eos): without it a model without a generation_config.json
    // would never stop.
    turn_end_ = turn_end_id();
    if (turn_end_) add_unique(stop_ids_, *turn_end_);
  }
}

std::optional<int64_t> PromptFormat::turn_end_id() const {
  const std::string content = "tandem-turn-end-probe";
  std::string text;
  try {
    text = chat_template_->render(std::vector<models::ChatMessage>{{"user", "Hi"}, {"assistant", content}},
                                  /*add_generation_prompt=*/false, nlohmann::json::parse(template_kwargs_));
  } catch (const UserError&) {
    return std::nullopt;  // a template that renders no closed assistant turn has no such token to find
  }
  const size_t at = text.rfind(content);
  if (at == std::string::npos) return std::nullopt;
  const std::vector<int64_t> after = tokenizer_.encode(text.substr(at + content.size()));
  if (after.empty() || !tokenizer_.is_special(after.front())) return std::nullopt;
  return after.front();
}

PromptFormat::~PromptFormat() = default;

std::string PromptFormat::render(const std::string& prompt) const {
  if (!chat_template_) return prompt;
  std::vector<models::ChatMessage> messages;
  if (system_prompt_) messages.push_back({"system", *system_prompt_});
  messages.push_back({"user", prompt});
  return chat_template_->render(messages, /*add_generation_prompt=*/true, nlohmann::json::parse(template_kwargs_));
}

std::vector<int64_t> PromptFormat::encode(const std::string& prompt) const {
  std::vector<int64_t> ids;
  if (!chat_template_)
    if (auto bos = tokenizer_.bos_id()) ids.push_back(*bos);
  const std::vector<int64_t> body = tokenizer_.encode(render(prompt));
  ids.insert(ids.end(), body.begin(), body.end());
  if (model_vocab_ > 0)
    for (const int64_t id : ids)
      if (id >= model_vocab_)
        throw UserError("a prompt encodes to token " + tokenizer_.id_to_token(id) + " (id " + std::to_string(id) +
                        "), past the model's vocabulary of " + std::to_string(model_vocab_) +
                        " ids; remove that text from the prompt: \"" + prompt.substr(0, 80) + "\"");
  return ids;
}

void check_tokenizer_fits(const models::Tokenizer& tokenizer, int64_t model_vocab, const std::string& what) {
  for (int64_t id = model_vocab; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_special(id))
      throw UserError(what + " has " + std::to_string(tokenizer.vocab_size()) + " ids but the model's vocabulary has " +
                      std::to_string(model_vocab) + " (token " + std::to_string(id) +
                      " is no special token); the tokenizer does not belong to this model");
}

const std::string& PromptFormat::template_source() const {
  static const std::string kNone;
  return chat_template_ ? chat_template_->source() : kNone;
}

std::string PromptFormat::describe() const {
  std::string s = chat_template_ ? "chat template " + template_origin_ : std::string("raw prompts (no chat template)");
  if (system_prompt_) s += ", system prompt";
  if (template_kwargs_ != "{}") s += ", template variables " + template_kwargs_;
  s += ", stop on";
  for (const int64_t id : stop_ids_) s += " " + tokenizer_.id_to_token(id);
  return s;
}

void add_stop_strings(const std::vector<std::string>& stops, const models::Tokenizer& tokenizer,
                      models::SamplingParams& sp) {
  for (const std::string& s : stops) {
    if (std::find(sp.stop_strings.begin(), sp.stop_strings.end(), s) != sp.stop_strings.end()) continue;
    sp.stop_strings.push_back(s);
    // A string that is one id alone (Qwen's </tool_call>) also stops on that id, without decoding.
    if (const auto ids = tokenizer.encode(s); ids.size() == 1) sp.stop_ids.push_back(ids[0]);
  }
  if (!sp.stop_strings.empty())
    sp.decode = [&tokenizer](const std::vector<int64_t>& ids) { return tokenizer.decode(ids); };
}

}  // namespace tandem
