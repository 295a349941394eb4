// Warm-start demonstrations: read, checked, and laid out through Episode like a played episode.
#include "core/env/demonstrations.h"

#include <fstream>

#include "common/error.h"
#include "core/env/episode_runner.h"

namespace tandem::env {

namespace {

using ojson = nlohmann::ordered_json;

void check_conversation(const ojson& row, const std::string& where) {
  if (!row.is_object() || !row.contains("messages") || !row["messages"].is_array())
    throw UserError(where +
                    ": expected an object with a \"messages\" array, e.g. {\"messages\": [{\"role\": "
                    "\"user\", \"content\": \"...\"}, {\"role\": \"assistant\", \"content\": \"...\"}]}");
  const ojson& m = row["messages"];
  bool last_assistant = false, any_assistant = false;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = where + ": message " + std::to_string(i);
    if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string())
      throw UserError(at + " needs a string \"role\"");
    const std::string role = m[i]["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw UserError(at + " has role '" + role + "' (system, user, assistant or tool)");
    const bool content = m[i].contains("content") && m[i]["content"].is_string();
    const bool calls = role == "assistant" && m[i].contains("tool_calls") && m[i]["tool_calls"].is_array();
    if (!content && !calls) throw UserError(at + " (" + role + ") needs a string \"content\"");
    const bool assistant = role == "assistant";
    if (assistant && i == 0)
      throw UserError(at + " is an assistant message before any prompt: start with a user (or system) message");
    if (assistant && last_assistant)
      throw UserError(at + " follows another assistant message: an environment's answer comes between turns");
    last_assistant = assistant;
    any_assistant = any_assistant || assistant;
  }
  if (!any_assistant) throw UserError(where + " has no assistant message: nothing to learn from");
  if (!last_assistant)
    throw UserError(where + " ends with a " + m.back()["role"].get<std::string>() +
                    " message: a demonstration ends with the model's last turn (drop what follows it)");
}

// json.dumps's spacing (", " and ": "), as chat templates' tojson renders tool calls.
std::string python_dumps(const ojson& v) {
  std::string out;
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it)
      out += (out.empty() ? "" : ", ") + ojson(it.key()).dump() + ": " + python_dumps(it.value());
    return "{" + out + "}";
  }
  if (v.is_array()) {
    for (const ojson& x : v) out += (out.empty() ? "" : ", ") + python_dumps(x);
    return "[" + out + "]";
  }
  return v.dump();
}

}  // namespace

std::vector<ojson> read_demonstrations(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw UserError("tracks.ar.warmstart.demos: cannot open '" + path +
                    "' (a JSON-lines file of conversations; see docs/env_protocol.md)");
  std::vector<ojson> out;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + " line " + std::to_string(line_no);
    ojson row;
    try {
      row = ojson::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw UserError(where + " is not JSON: " + e.what());
    }
    check_conversation(row, where);
    out.push_back(row["messages"]);
  }
  if (out.empty()) throw UserError("tracks.ar.warmstart.demos: '" + path + "' holds no conversation");
  return out;
}

std::string assistant_text(const ojson& message) {
  std::string text = message.contains("content") && message["content"].is_string()
                         ? message["content"].get<std::string>()
                         : std::string();
  if (!message.contains("tool_calls")) return text;
  for (const ojson& call : message["tool_calls"]) {
    const ojson& f = call.contains("function") ? call["function"] : call;
    if (!f.contains("name") || !f["name"].is_string())
      throw UserError("a demonstration's tool call needs a string \"name\" (got " + call.dump() + ")");
    ojson args = f.contains("arguments") ? f["arguments"] : ojson::object();
    if (args.is_string()) {
      try {
        args = ojson::parse(args.get<std::string>());
      } catch (const nlohmann::json::exception&) {
        throw UserError("a demonstration's tool call has arguments that are not JSON: " + call.dump());
      }
    }
    if (!args.is_object())
      throw UserError("a demonstration's tool call needs \"arguments\" that are a JSON object (got " + call.dump() +
                      ")");
    if (!text.empty()) text += "\n";
    text += "<tool_call>\n" + python_dumps(ojson{{"name", f["name"]}, {"arguments", args}}) + "\n</tool_call>";
  }
  return text;
}

ArSample demonstration_sample(const ConversationFormat& format, const ojson& messages, int64_t end_of_turn,
                              const std::optional<std::string>& system_prompt, int64_t max_tokens,
                              const std::string& where) {
  ojson first = ojson::array();
  if (system_prompt && messages.front()["role"] != "system")
    first.push_back(ojson{{"role", "system"}, {"content", *system_prompt}});
  size_t i = 0;
  for (; messages[i]["role"] != "assistant"; ++i) first.push_back(messages[i]);
  Episode episode(format, first, max_tokens);
  const auto too_long = [&] {
    return UserError(where + " is longer than the episode cap of " + std::to_string(max_tokens) +
                     " tokens (tracks.ar.env.max_tokens, else the model's max_seq_len): shorten it or raise the cap");
  };
  if (static_cast<int64_t>(episode.tokens().size()) > max_tokens) throw too_long();
  while (i < messages.size()) {
    std::vector<int64_t> ids = format.tokenizer->encode(assistant_text(messages[i]));
    ids.push_back(end_of_turn);
    episode.add_model_turn(ids, true);
    if (static_cast<int64_t>(episode.tokens().size()) > max_tokens) throw too_long();
    ojson observation = ojson::array();
    for (++i; i < messages.size() && messages[i]["role"] != "assistant"; ++i) observation.push_back(messages[i]);
    if (!observation.empty() && !episode.add_observation(observation)) throw too_long();
  }
  EpisodeOutcome out;
  out.tokens = episode.tokens();
  out.sources = episode.sources();
  out.logp.assign(out.tokens.size(), 0.0);
  out.prompt_len = episode.prompt_tokens();
  return episode_sample(out);
}

}  // namespace tandem::env
