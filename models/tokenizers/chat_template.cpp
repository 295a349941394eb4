// Loading a chat template from a tokenizer directory or a Jinja file, and rendering the
// transformers render context around a conversation.
#include "models/tokenizers/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace tandem::models {

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(std::string(what) + " " + path + ": cannot open the file");
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// A special token in tokenizer_config.json: "text", {"content": "text", ...} (AddedToken) or null.
std::string special_token(const nlohmann::json& config, const char* key, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  throw UserError(path + ": \"" + key + "\" must be a string, an object with a string \"content\", or null");
}

std::string template_source(const nlohmann::json& config, const std::string& path) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    throw UserError(path + ": no \"chat_template\" (this tokenizer has no chat template; name a Jinja file instead)");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::vector<std::string> names;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
          !entry["template"].is_string())
        throw UserError(path + ": \"chat_template\" list entries must be {\"name\": string, \"template\": string}");
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names.push_back(entry["name"].get<std::string>());
    }
    std::string listed;
    for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
    throw UserError(path + ": \"chat_template\" has no template named \"default\" (it has: " + listed + ")");
  }
  throw UserError(path + ": \"chat_template\" must be a string or a list of {name, template}");
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  const std::string text = read_file(path, "tokenizer config");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": not valid JSON: " + e.what());
  }
  if (!config.is_object()) throw UserError(path + ": a tokenizer_config.json must hold a JSON object");
  std::string source = template_source(config, path);
  return from_source(std::move(source), path, special_token(config, "bos_token", path),
                     special_token(config, "eos_token", path));
}

std::optional<ChatTemplate> ChatTemplate::from_tokenizer_dir(const std::string& dir, std::string* origin) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  nlohmann::json config = nlohmann::json::object();
  if (fs::is_regular_file(config_path, ec)) {
    config = nlohmann::json::parse(read_file(config_path, "tokenizer config"), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object())
      throw UserError(config_path + ": not a JSON object (the tokenizer's configuration)");
  }
  if (fs::is_regular_file(jinja_path, ec)) {
    *origin = jinja_path;
    return from_source(read_file(jinja_path, "chat template"), jinja_path,
                       special_token(config, "bos_token", config_path),
                       special_token(config, "eos_token", config_path));
  }
  if (!config.contains("chat_template") || config.at("chat_template").is_null()) return std::nullopt;
  *origin = config_path;
  return from_source(template_source(config, config_path), config_path, special_token(config, "bos_token", config_path),
                     special_token(config, "eos_token", config_path));
}

ChatTemplate ChatTemplate::from_file(const std::string& path, std::string bos_token, std::string eos_token) {
  return from_source(read_file(path, "chat template"), path, std::move(bos_token), std::move(eos_token));
}

ChatTemplate ChatTemplate::from_source(std::string source, std::string origin, std::string bos_token,
                                       std::string eos_token) {
  jinja::Template compiled = jinja::Template::parse(source, "chat template " + origin);
  return ChatTemplate(std::move(source), std::move(compiled), std::move(bos_token), std::move(eos_token));
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  // ordered_json keeps each message's keys as {"role", "content"}, as a Python dict would.
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render(list, add_generation_prompt, nullptr, extra);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& tools, const nlohmann::json& extra) const {
  if (!extra.is_null() && !extra.is_object())
    throw UserError(compiled_.origin() + ": extra template variables must be a JSON object");
  if (!messages.is_array()) throw UserError(compiled_.origin() + ": the messages must be a JSON list");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  if (!bos_token_.empty()) context["bos_token"] = bos_token_;
  if (!eos_token_.empty()) context["eos_token"] = eos_token_;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it)
      context[it.key()] = nlohmann::ordered_json::parse(it.value().dump());
  return compiled_.render(context);
}

}  // namespace tandem::models
