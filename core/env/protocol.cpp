// JSON-line encoding of the environment protocol and strict reading of its answers.
#include "core/env/protocol.h"

#include <cmath>

#include "common/error.h"

namespace tandem::env {

namespace {

using ojson = nlohmann::ordered_json;

std::string line_of(const ojson& j) {
  // Model text is valid UTF-8 by the tokenizer's contract; replace rather than throw regardless.
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
}

bool fail(std::string& problem, std::string what) {
  problem = std::move(what);
  return false;
}

// Every message is an object with a string "role" and a string "content" (other keys pass through
// to the chat template untouched).
bool read_messages(const ojson& answer, ojson& out, std::string& problem) {
  const auto it = answer.find("messages");
  if (it == answer.end() || it->is_null()) {
    out = ojson::array();
    return true;
  }
  if (!it->is_array()) return fail(problem, "\"messages\" must be a list of {\"role\", \"content\"} objects");
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      return fail(problem,
                  "messages[" + std::to_string(i) + "] must be an object with string \"role\" and \"content\"");
  }
  out = *it;  // keys in the environment's order (what a Python dict shows)
  return true;
}

}  // namespace

const char* turn_end_name(TurnEnd end) {
  switch (end) {
    case TurnEnd::kStop:
      return "stop";
    case TurnEnd::kStopString:
      return "stop_string";
    case TurnEnd::kLength:
      return "length";
  }
  return "stop";
}

std::string hello_request(int64_t id) {
  return line_of(ojson{{"type", "hello"}, {"id", id}, {"protocol", kProtocolVersion}});
}

std::string reset_request(int64_t id, const std::string& episode, const nlohmann::json& row, uint64_t seed) {
  return line_of(
      ojson{{"type", "reset"}, {"id", id}, {"episode", episode}, {"row", ojson::parse(row.dump())}, {"seed", seed}});
}

std::string step_request(int64_t id, const std::string& episode, const StepInput& input) {
  ojson calls = ojson::array();
  for (const auto& c : input.tool_calls) calls.push_back(ojson{{"name", c.name}, {"arguments", c.arguments}});
  ojson j{{"type", "step"}, {"id", id}, {"episode", episode}, {"text", input.text}, {"tool_calls", calls}};
  j["parse_error"] = input.parse_error ? ojson(*input.parse_error) : ojson(nullptr);
  j["finish"] = turn_end_name(input.end);
  return line_of(j);
}

std::string close_request(int64_t id, const std::string& episode) {
  return line_of(ojson{{"type", "close"}, {"id", id}, {"episode", episode}});
}

bool answer_id(const std::string& line, int64_t& id, ojson& parsed, std::string& problem) {
  parsed = ojson::parse(line, nullptr, false);
  if (parsed.is_discarded()) {
    const bool non_finite = line.find("NaN") != std::string::npos || line.find("Infinity") != std::string::npos;
    return fail(problem, non_finite ? "not JSON (NaN and Infinity are not JSON numbers)" : "not JSON");
  }
  if (!parsed.is_object()) return fail(problem, "not a JSON object");
  const auto it = parsed.find("id");
  if (it == parsed.end() || !it->is_number_integer())
    return fail(problem, "no integer \"id\" (every answer echoes its request's id)");
  id = it->get<int64_t>();
  return true;
}

bool read_hello(const ojson& answer, EnvHello& hello, std::string& problem) {
  const auto name = answer.find("name");
  if (name == answer.end() || !name->is_string() || name->get<std::string>().empty())
    return fail(problem, "hello: \"name\" must be a non-empty string");
  hello.name = name->get<std::string>();
  hello.tools = ojson::array();
  if (const auto tools = answer.find("tools"); tools != answer.end() && !tools->is_null()) {
    if (!tools->is_array()) return fail(problem, "hello: \"tools\" must be a list of JSON schemas");
    for (const auto& t : *tools)
      if (!t.is_object()) return fail(problem, "hello: every entry of \"tools\" must be a JSON object (a schema)");
    hello.tools = *tools;
  }
  const auto turns = answer.find("max_turns");
  if (turns == answer.end() || !turns->is_number_integer() || turns->get<int64_t>() < 1 || turns->get<int64_t>() > 1000)
    return fail(problem, "hello: \"max_turns\" must be an integer in [1, 1000]");
  hello.max_turns = turns->get<int>();
  hello.stop.clear();
  if (const auto stop = answer.find("stop"); stop != answer.end() && !stop->is_null()) {
    if (!stop->is_array()) return fail(problem, "hello: \"stop\" must be a list of strings");
    for (const auto& s : *stop) {
      if (!s.is_string() || s.get<std::string>().empty())
        return fail(problem, "hello: every entry of \"stop\" must be a non-empty string");
      hello.stop.push_back(s.get<std::string>());
    }
  }
  return true;
}

bool read_answer(const ojson& answer, bool is_reset, EnvAnswer& out, std::string& problem) {
  out = EnvAnswer{};
  if (const auto err = answer.find("error"); err != answer.end() && !err->is_null()) {
    if (!err->is_string()) return fail(problem, "\"error\" must be a string");
    out.error = err->get<std::string>();
    return true;
  }
  if (is_reset) {
    if (!read_messages(answer, out.messages, problem)) return false;
    if (out.messages.empty()) return fail(problem, "reset: \"messages\" must hold the episode's first messages");
    if (answer.contains("reward") || answer.contains("done"))
      return fail(problem, "reset: an answer to reset has \"messages\" only (no \"reward\" or \"done\")");
    return true;
  }
  const auto reward = answer.find("reward");
  if (reward == answer.end() || !reward->is_number()) return fail(problem, "step: \"reward\" must be a number");
  out.reward = reward->get<double>();
  if (!std::isfinite(out.reward)) return fail(problem, "step: \"reward\" must be finite");
  const auto done = answer.find("done");
  if (done == answer.end() || !done->is_boolean()) return fail(problem, "step: \"done\" must be true or false");
  out.done = done->get<bool>();
  if (out.done) return true;  // its messages, if any, are ignored (nothing follows them)
  if (!read_messages(answer, out.messages, problem)) return false;
  if (out.messages.empty())
    return fail(problem, "step: an episode that is not done needs the next \"messages\" for the model");
  return true;
}

Request parse_request(const std::string& line) {
  // Ordered, as answers are read: a tool call's arguments reach the environment in the order the
  // model wrote them (a sorted parse would reorder them).
  const ojson j = ojson::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw UserError("env request: not a JSON object: " + line.substr(0, 120));
  Request r;
  if (!j.contains("type") || !j["type"].is_string()) throw UserError("env request: no string \"type\"");
  if (!j.contains("id") || !j["id"].is_number_integer()) throw UserError("env request: no integer \"id\"");
  r.type = j["type"].get<std::string>();
  r.id = j["id"].get<int64_t>();
  if (r.type == "hello") return r;
  if (r.type != "reset" && r.type != "step" && r.type != "close")
    throw UserError("env request: unknown type \"" + r.type + "\" (hello, reset, step, close)");
  if (!j.contains("episode") || !j["episode"].is_string()) throw UserError("env request: no string \"episode\"");
  r.episode = j["episode"].get<std::string>();
  if (r.type == "reset") {
    const ojson row = j.value("row", ojson::object());
    if (!row.is_object()) throw UserError("env request: reset's \"row\" must be a JSON object");
    r.row = nlohmann::json::parse(row.dump());
    if (!j.contains("seed") || !j["seed"].is_number_unsigned())
      throw UserError("env request: reset needs an integer \"seed\"");
    r.seed = j["seed"].get<uint64_t>();
  } else if (r.type == "step") {
    if (!j.contains("text") || !j["text"].is_string()) throw UserError("env request: step needs a string \"text\"");
    r.step.text = j["text"].get<std::string>();
    const ojson calls = j.value("tool_calls", ojson::array());
    if (!calls.is_array()) throw UserError("env request: step's \"tool_calls\" must be a list");
    for (size_t i = 0; i < calls.size(); ++i) {
      const ojson& c = calls[i];
      const std::string what = "env request: tool_calls[" + std::to_string(i) + "] ";
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string())
        throw UserError(what + "must be an object with a string \"name\"");
      const ojson args = c.value("arguments", ojson::object());
      if (!args.is_object()) throw UserError(what + "\"arguments\" must be a JSON object");
      r.step.tool_calls.push_back(ToolCall{c["name"].get<std::string>(), args});
    }
    if (j.contains("parse_error") && !j["parse_error"].is_null()) {
      if (!j["parse_error"].is_string())
        throw UserError("env request: step's \"parse_error\" must be a string or null");
      r.step.parse_error = j["parse_error"].get<std::string>();
    }
    const ojson finish = j.value("finish", ojson("stop"));
    const std::string name = finish.is_string() ? finish.get<std::string>() : finish.dump();
    bool known = false;
    for (TurnEnd end : {TurnEnd::kStop, TurnEnd::kStopString, TurnEnd::kLength})
      if (name == turn_end_name(end)) {
        r.step.end = end;
        known = true;
      }
    if (!known) throw UserError("env request: step's \"finish\" is " + name + " (stop, stop_string or length)");
  }
  return r;
}

std::string hello_answer(int64_t id, const EnvHello& hello) {
  return line_of(ojson{
      {"id", id}, {"name", hello.name}, {"tools", hello.tools}, {"max_turns", hello.max_turns}, {"stop", hello.stop}});
}

std::string answer_line(int64_t id, const EnvAnswer& answer, bool is_reset) {
  ojson j{{"id", id}};
  if (answer.error) {
    j["error"] = *answer.error;
    return line_of(j);
  }
  j["messages"] = answer.messages;
  if (!is_reset) {
    j["reward"] = answer.reward;
    j["done"] = answer.done;
  }
  return line_of(j);
}

}  // namespace tandem::env
