// The environment protocol's vocabulary (docs/env_protocol.md): what tandem asks an environment
// (hello, reset, step, close) and what it answers, as plain structs with their JSON-line encoding
// and a strict reading of answers that names what is wrong with a malformed one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tandem::env {

inline constexpr int kProtocolVersion = 1;

// What `hello` answers: the environment's identity and the rules the episode runner enforces.
struct EnvHello {
  std::string name;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // JSON schemas, as the chat template takes them
  int max_turns = 1;                                               // model turns per episode, >= 1
  std::vector<std::string> stop;                                   // strings that end a model turn
};

// Why a model turn ended.
enum class TurnEnd { kStop, kStopString, kLength };
const char* turn_end_name(TurnEnd end);  // "stop", "stop_string", "length"

// One tool call parsed from the model's text: {"name": ..., "arguments": {...}}.
struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

// What `step` sends: the model's turn as text, the tool calls parsed from it (or why they could
// not be parsed: the environment answers that, the run goes on) and why the turn ended.
struct StepInput {
  std::string text;
  std::vector<ToolCall> tool_calls;
  std::optional<std::string> parse_error;
  TurnEnd end = TurnEnd::kStop;
};

// An answer to reset (messages only) or step. `error` set: the environment declared this episode
// failed (it is dropped from training and counted), the process is fine.
struct EnvAnswer {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role", "content", ...}]
  double reward = 0.0;
  bool done = false;
  std::optional<std::string> error;
};

// Request lines (each ends with '\n'). `id` is the request id the answer must echo.
std::string hello_request(int64_t id);
std::string reset_request(int64_t id, const std::string& episode, const nlohmann::json& row, uint64_t seed);
std::string step_request(int64_t id, const std::string& episode, const StepInput& input);
std::string close_request(int64_t id, const std::string& episode);

// Reading answers. `line` is one line without its newline. Each returns false and sets `problem`
// (what is wrong and what was expected) for a malformed answer.
// The request id an answer echoes; false when the line is not a JSON object with an integer "id".
// Answers are read keeping their keys' order: a tool schema reaches the chat template as the
// environment wrote it, as transformers' apply_chat_template renders it (a sorted copy would put
// "function" before "type" in the system prompt).
bool answer_id(const std::string& line, int64_t& id, nlohmann::ordered_json& parsed, std::string& problem);
bool read_hello(const nlohmann::ordered_json& answer, EnvHello& hello, std::string& problem);
// `is_reset`: a reset answer has messages only (reward and done are refused: nothing happened yet).
bool read_answer(const nlohmann::ordered_json& answer, bool is_reset, EnvAnswer& out, std::string& problem);

// Parsing the other way round (an environment written in C++, `tandem env NAME`): a request line
// into its type and fields. Throws UserError for a malformed request.
struct Request {
  std::string type;  // hello | reset | step | close
  int64_t id = 0;
  std::string episode;
  nlohmann::json row;
  uint64_t seed = 0;
  StepInput step;
};
Request parse_request(const std::string& line);
std::string hello_answer(int64_t id, const EnvHello& hello);
std::string answer_line(int64_t id, const EnvAnswer& answer, bool is_reset);

}  // namespace tandem::env
