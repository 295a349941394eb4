// calculator, guess and lookup; the in-process adapter; the protocol server of `tandem env NAME`.
#include "core/env/builtin_envs.h"

#include <iostream>
#include <map>

#include "common/error.h"
#include "core/env/arithmetic.h"
#include "core/tasks/det_rng.h"

namespace tandem::env {

namespace {

using ojson = nlohmann::ordered_json;

ojson message(const std::string& role, const std::string& content) {
  return ojson{{"role", role}, {"content", content}};
}

ojson function_tool(const std::string& name, const std::string& description, const std::string& arg,
                    const std::string& arg_description) {
  return ojson{{"type", "function"},
               {"function",
                {{"name", name},
                 {"description", description},
                 {"parameters",
                  {{"type", "object"},
                   {"properties", {{arg, {{"type", "string"}, {"description", arg_description}}}}},
                   {"required", {arg}}}}}}};
}

EnvAnswer answer(ojson messages, double reward, bool done) {
  EnvAnswer a;
  a.messages = std::move(messages);
  a.reward = reward;
  a.done = done;
  return a;
}

// An answer that fails its one episode (the process is fine).
EnvAnswer episode_error(std::string what) {
  EnvAnswer a;
  a.error = std::move(what);
  return a;
}

std::string row_string(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  if (it == row.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// Tool answers for a turn's calls, or the parse error; `run` answers one call.
template <typename Run>
ojson tool_messages(const StepInput& input, Run run) {
  ojson out = ojson::array();
  for (const auto& call : input.tool_calls) out.push_back(message("tool", run(call)));
  if (input.parse_error) out.push_back(message("tool", "error: " + *input.parse_error));
  return out;
}

// The final answer is scored when a turn has no tool call (or its calls did not parse at all and
// the turn ended the episode anyway).
class CalculatorEnv : public EnvLogic {
 public:
  EnvHello hello() const override {
    EnvHello h;
    h.name = "calculator";
    h.tools = ojson::array({function_tool("calc", "Evaluate an arithmetic expression (+ - * / and parentheses).",
                                          "expression", "the expression, e.g. 347 * 29")});
    h.max_turns = 4;
    h.stop = {"</tool_call>"};
    return h;
  }
  EnvAnswer reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) override {
    std::string prompt = row_string(row, "prompt"), expected = row_string(row, "answer");
    if (prompt.empty()) {
      tasks::DetRng rng(seed);
      const int64_t a = 100 + static_cast<int64_t>(rng.below(900)), b = 10 + static_cast<int64_t>(rng.below(90));
      prompt = "What is " + std::to_string(a) + " * " + std::to_string(b) + "?";
      expected = std::to_string(a * b);
    }
    if (expected.empty()) return episode_error("row has a \"prompt\" but no \"answer\"");
    answers_[episode] = expected;
    return answer(ojson::array({message("user", prompt)}), 0, false);
  }
  EnvAnswer step(const std::string& episode, const StepInput& input) override {
    const auto it = answers_.find(episode);
    if (it == answers_.end()) return episode_error("unknown episode " + episode);
    if (!input.tool_calls.empty() || input.parse_error) {
      return answer(tool_messages(input,
                                  [](const ToolCall& call) -> std::string {
                                    if (call.name != "calc") return "error: unknown tool '" + call.name + "' (calc)";
                                    const auto e = call.arguments.find("expression");
                                    if (e == call.arguments.end() || !e->is_string())
                                      return "error: calc needs a string \"expression\"";
                                    try {
                                      return evaluate_arithmetic(e->get<std::string>());
                                    } catch (const UserError& err) {
                                      return std::string("error: ") + err.what();
                                    }
                                  }),
                    0, false);
    }
    std::string got;
    return answer(ojson::array(), last_integer(input.text, got) && got == it->second ? 1.0 : 0.0, true);
  }
  void close(const std::string& episode) override { answers_.erase(episode); }

 private:
  std::map<std::string, std::string> answers_;
};

class GuessEnv : public EnvLogic {
 public:
  static constexpr int kTurns = 8;
  EnvHello hello() const override {
    EnvHello h;
    h.name = "guess";
    h.max_turns = kTurns;
    return h;
  }
  EnvAnswer reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) override {
    int64_t target = 1 + static_cast<int64_t>(tasks::DetRng(seed).below(64));
    if (const auto t = row.find("target"); t != row.end() && t->is_number_integer()) target = t->get<int64_t>();
    if (target < 1 || target > 64) return episode_error("\"target\" must be in 1..64");
    state_[episode] = {target, 0};
    return answer(ojson::array({message("user",
                                        "I am thinking of a whole number from 1 to 64. Guess it: answer with one "
                                        "number, and I will say higher or lower.")}),
                  0, false);
  }
  EnvAnswer step(const std::string& episode, const StepInput& input) override {
    const auto found = state_.find(episode);
    if (found == state_.end()) return episode_error("unknown episode " + episode);
    auto& s = found->second;
    ++s.turns;
    std::string text;
    const bool number = last_integer(input.text, text);
    const int64_t guess = number && text.size() < 10 ? std::stoll(text) : 0;
    if (number && guess == s.target) return answer(ojson::array(), 1.0, true);
    if (s.turns >= kTurns) return answer(ojson::array(), 0.0, true);
    const std::string hint = !number || guess < 1 || guess > 64 ? "Answer with one number from 1 to 64."
                             : guess < s.target                 ? "Higher."
                                                                : "Lower.";
    return answer(ojson::array({message("user", hint)}), 0, false);
  }
  void close(const std::string& episode) override { state_.erase(episode); }

 private:
  struct State {
    int64_t target = 0;
    int turns = 0;
  };
  std::map<std::string, State> state_;
};

class LookupEnv : public EnvLogic {
 public:
  static constexpr int kKeys = 8;
  EnvHello hello() const override {
    EnvHello h;
    h.name = "lookup";
    h.tools = ojson::array(
        {function_tool("get", "Read the value stored under a key of the hidden table.", "key", "the key, e.g. kiwi")});
    h.max_turns = 4;
    h.stop = {"</tool_call>"};
    return h;
  }
  EnvAnswer reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) override {
    static const char* kWords[] = {"apple", "birch", "cedar", "delta", "ember", "fjord", "grape", "heron",
                                   "iris",  "jade",  "kiwi",  "lemon", "maple", "north", "olive", "pearl"};
    tasks::DetRng rng(seed);
    std::map<std::string, std::string> table;
    while (table.size() < kKeys) table[kWords[rng.below(16)]] = std::to_string(1000 + rng.below(9000));
    std::string key = row_string(row, "key");
    if (key.empty()) {
      auto it = table.begin();
      std::advance(it, static_cast<long>(rng.below(kKeys)));
      key = it->first;
    }
    if (!table.count(key)) table[key] = std::to_string(1000 + rng.below(9000));
    state_[episode] = {table, table[key]};
    return answer(ojson::array({message("user",
                                        "A hidden table maps words to numbers. Use the get tool to read the "
                                        "value of the key '" +
                                            key + "', then answer with that number.")}),
                  0, false);
  }
  EnvAnswer step(const std::string& episode, const StepInput& input) override {
    const auto found = state_.find(episode);
    if (found == state_.end()) return episode_error("unknown episode " + episode);
    auto& s = found->second;
    if (!input.tool_calls.empty() || input.parse_error) {
      return answer(tool_messages(input,
                                  [&s](const ToolCall& call) -> std::string {
                                    if (call.name != "get") return "error: unknown tool '" + call.name + "' (get)";
                                    const auto k = call.arguments.find("key");
                                    if (k == call.arguments.end() || !k->is_string())
                                      return "error: get needs a string \"key\"";
                                    const auto v = s.table.find(k->get<std::string>());
                                    return v == s.table.end() ? "error: no key '" + k->get<std::string>() + "'"
                                                              : v->second;
                                  }),
                    0, false);
    }
    std::string got;
    return answer(ojson::array(), last_integer(input.text, got) && got == s.value ? 1.0 : 0.0, true);
  }
  void close(const std::string& episode) override { state_.erase(episode); }

 private:
  struct State {
    std::map<std::string, std::string> table;
    std::string value;
  };
  std::map<std::string, State> state_;
};

}  // namespace

const std::vector<std::string>& builtin_env_names() {
  static const std::vector<std::string> names{"calculator", "guess", "lookup"};
  return names;
}

std::unique_ptr<EnvLogic> make_builtin_env(const std::string& name) {
  if (name == "calculator") return std::make_unique<CalculatorEnv>();
  if (name == "guess") return std::make_unique<GuessEnv>();
  if (name == "lookup") return std::make_unique<LookupEnv>();
  throw UserError("unknown built-in environment '" + name + "' (calculator, guess, lookup; or env.command)");
}

bool last_integer(const std::string& text, std::string& out) {
  std::string t = text;
  if (const auto e = t.rfind("</think>"); e != std::string::npos) t = t.substr(e + 8);
  std::string digits;
  bool found = false;
  for (size_t i = t.size(); i-- > 0;) {
    const char c = t[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits.insert(digits.begin(), c);
      found = true;
    } else if (found && c == ',' && i > 0 && std::isdigit(static_cast<unsigned char>(t[i - 1]))) {
      continue;  // 10,063
    } else if (found) {
      if (c == '-') digits.insert(digits.begin(), '-');
      break;
    }
  }
  if (!found) return false;
  const size_t first = digits[0] == '-' ? 1 : 0;
  while (digits.size() > first + 1 && digits[first] == '0') digits.erase(first, 1);
  out = digits == "-0" ? "0" : digits;
  return true;
}

InProcessEnv::InProcessEnv(std::unique_ptr<EnvLogic> logic) : logic_(std::move(logic)), hello_(logic_->hello()) {}

void InProcessEnv::reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) {
  ready_.push_back(EnvEvent{episode, true, logic_->reset(episode, row, seed), std::nullopt});
}

void InProcessEnv::step(const std::string& episode, const StepInput& input) {
  ready_.push_back(EnvEvent{episode, false, logic_->step(episode, input), std::nullopt});
}

std::vector<EnvEvent> InProcessEnv::poll(std::chrono::milliseconds) {
  std::vector<EnvEvent> out(std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
  ready_.clear();
  return out;
}

int serve_env(EnvLogic& logic, std::istream& in, std::ostream& out) {
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      const Request r = parse_request(line);
      if (r.type == "hello") {
        out << hello_answer(r.id, logic.hello());
      } else if (r.type == "reset") {
        out << answer_line(r.id, logic.reset(r.episode, r.row, r.seed), true);
      } else if (r.type == "step") {
        out << answer_line(r.id, logic.step(r.episode, r.step), false);
      } else {
        logic.close(r.episode);
        out << nlohmann::json{{"id", r.id}}.dump() << "\n";
      }
      out.flush();
    } catch (const UserError& e) {
      std::cerr << "tandem env: " << e.what() << "\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace tandem::env
