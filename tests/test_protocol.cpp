// The environment protocol's lines: requests carry what docs/env_protocol.md says, and answers are
// read strictly, each malformed form named.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "core/env/protocol.h"

using namespace tandem::env;
using json = nlohmann::json;

namespace {

std::string problem_of(const std::string& line, bool is_reset) {
  int64_t id = 0;
  nlohmann::ordered_json parsed;
  std::string problem;
  EnvAnswer a;
  if (!answer_id(line, id, parsed, problem)) return problem;
  if (!read_answer(parsed, is_reset, a, problem)) return problem;
  return "";
}

}  // namespace

TEST_CASE("protocol requests are one JSON line each with the documented keys", "[env][protocol]") {
  const auto hello = json::parse(hello_request(0));
  CHECK(hello == json{{"type", "hello"}, {"id", 0}, {"protocol", kProtocolVersion}});
  const auto reset = json::parse(reset_request(3, "s1-g0-m2", json{{"prompt", "2+2"}}, 99));
  CHECK(reset ==
        json{{"type", "reset"}, {"id", 3}, {"episode", "s1-g0-m2"}, {"row", {{"prompt", "2+2"}}}, {"seed", 99}});
  StepInput in;
  in.text = "<tool_call>...";
  in.tool_calls.push_back(ToolCall{"calc", nlohmann::ordered_json{{"expression", "1+1"}}});
  in.parse_error = "tool call 2: not a JSON object";
  in.end = TurnEnd::kStopString;
  const std::string line = step_request(4, "e", in);
  CHECK(line.back() == '\n');
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  const auto step = json::parse(line);
  CHECK(step["tool_calls"] == json::array({{{"name", "calc"}, {"arguments", {{"expression", "1+1"}}}}}));
  CHECK(step["parse_error"] == "tool call 2: not a JSON object");
  CHECK(step["finish"] == "stop_string");
  // And the other way round, as `tandem env NAME` reads them.
  const Request r = parse_request(line.substr(0, line.size() - 1));
  CHECK(r.type == "step");
  CHECK(r.step.tool_calls[0].arguments["expression"] == "1+1");
  CHECK(r.step.end == TurnEnd::kStopString);
}

TEST_CASE("protocol answers are read strictly", "[env][protocol]") {
  CHECK(problem_of(R"({"id": 1, "messages": [{"role": "user", "content": "hi"}]})", true).empty());
  CHECK(problem_of(R"({"id": 1, "messages": [{"role": "tool", "content": "3"}], "reward": 0, "done": false})", false)
            .empty());
  CHECK(problem_of(R"({"id": 1, "reward": 1.0, "done": true})", false).empty());
  // A done step's messages are ignored, as the protocol says: not read, so not a process failure.
  CHECK(problem_of(R"({"id": 2, "messages": "bye", "reward": 1, "done": true})", false).empty());
  CHECK(problem_of(R"({"id": 2, "messages": "bye", "reward": 1, "done": false})", false) ==
        "\"messages\" must be a list of {\"role\", \"content\"} objects");
  CHECK(problem_of(R"({"id": 1, "error": "bad row"})", true).empty());
  CHECK(problem_of("not json", false) == "not JSON");
  CHECK(problem_of(R"({"reward": 1})", false) == "no integer \"id\" (every answer echoes its request's id)");
  CHECK(problem_of(R"({"id": 1, "reward": NaN, "done": true})", false) ==
        "not JSON (NaN and Infinity are not JSON numbers)");
  CHECK(problem_of(R"({"id": 1, "done": true})", false) == "step: \"reward\" must be a number");
  CHECK(problem_of(R"({"id": 1, "reward": 0})", false) == "step: \"done\" must be true or false");
  CHECK(problem_of(R"({"id": 1, "reward": 0, "done": false})", false) ==
        "step: an episode that is not done needs the next \"messages\" for the model");
  CHECK(problem_of(R"({"id": 1, "messages": [{"role": "user"}], "reward": 0, "done": false})", false) ==
        "messages[0] must be an object with string \"role\" and \"content\"");
  CHECK(problem_of(R"({"id": 1, "messages": []})", true) ==
        "reset: \"messages\" must hold the episode's first messages");
  CHECK(problem_of(R"({"id": 1, "messages": [{"role": "user", "content": "x"}], "reward": 0})", true) ==
        "reset: an answer to reset has \"messages\" only (no \"reward\" or \"done\")");
  EnvHello h;
  std::string problem;
  CHECK(read_hello(json{{"name", "calc"}, {"max_turns", 4}, {"stop", {"</tool_call>"}}}, h, problem));
  CHECK(h.stop == std::vector<std::string>{"</tool_call>"});
  CHECK_FALSE(read_hello(json{{"name", "calc"}, {"max_turns", 0}}, h, problem));
  CHECK(problem == "hello: \"max_turns\" must be an integer in [1, 1000]");
  CHECK_FALSE(read_hello(json{{"max_turns", 2}}, h, problem));
  CHECK(problem == "hello: \"name\" must be a non-empty string");
}

TEST_CASE(
    "an environment's hello and messages keep their keys' order: its tool schema reaches the chat template as "
    "written, as apply_chat_template renders it",
    "[env][protocol]") {
  // "type" before "function", "name" before "description": not the sorted order, which a sorted
  // copy would render into the system prompt ("function" first).
  const std::string tool = R"({"type": "function", "function": {"name": "calc", "description": "d"}})";
  const std::string line = R"({"id": 0, "name": "calculator", "max_turns": 2, "tools": [)" + tool + "]}";
  int64_t id = -1;
  nlohmann::ordered_json parsed;
  std::string problem;
  REQUIRE(answer_id(line, id, parsed, problem));
  EnvHello h;
  REQUIRE(read_hello(parsed, h, problem));
  CHECK(h.tools.size() == 1);
  CHECK(h.tools[0].dump() == nlohmann::ordered_json::parse(tool).dump());
  // Control: the same schema read without order starts with "function".
  CHECK(json::parse(tool).dump().rfind(R"({"function")", 0) == 0);
  const std::string step = R"({"id": 1, "messages": [{"role": "tool", "content": "7", "name": "calc"}], )"
                           R"("reward": 0, "done": false})";
  REQUIRE(answer_id(step, id, parsed, problem));
  EnvAnswer a;
  REQUIRE(read_answer(parsed, false, a, problem));
  CHECK(a.messages.dump() == R"([{"role":"tool","content":"7","name":"calc"}])");
}

TEST_CASE("a request keeps its tool call's arguments in the model's order, and a malformed one is named",
          "[env][protocol]") {
  // "b" before "a": what a C++ environment (`tandem env NAME`) gets is what the model wrote.
  const std::string step = R"({"type": "step", "id": 2, "episode": "e", "text": "t", )"
                           R"("tool_calls": [{"name": "f", "arguments": {"b": 1, "a": 2}}], "finish": "length"})";
  const Request r = parse_request(step);
  REQUIRE(r.step.tool_calls.size() == 1);
  CHECK(r.step.tool_calls[0].arguments.dump() == R"({"b":1,"a":2})");
  CHECK(r.step.end == TurnEnd::kLength);
  CHECK_FALSE(r.step.parse_error.has_value());
  // Control: an unordered parse of the same arguments puts "a" first.
  CHECK(json::parse(R"({"b": 1, "a": 2})").dump() == R"({"a":2,"b":1})");

  const auto problem = [](const std::string& line) -> std::string {
    try {
      parse_request(line);
    } catch (const tandem::UserError& e) {
      return e.what();
    }
    return "";
  };
  const std::string head = R"({"type": "step", "id": 3, "episode": "e", "text": "t", )";
  CHECK(problem(head + R"("finish": "eos"})") == "env request: step's \"finish\" is eos (stop, stop_string or length)");
  CHECK(problem(head + R"("tool_calls": {"name": "f"}})") == "env request: step's \"tool_calls\" must be a list");
  CHECK(problem(head + R"("tool_calls": ["f"]})") ==
        "env request: tool_calls[0] must be an object with a string \"name\"");
  CHECK(problem(head + R"("tool_calls": [{"name": "f", "arguments": "x"}]})") ==
        "env request: tool_calls[0] \"arguments\" must be a JSON object");
  CHECK(problem(head + R"("parse_error": 7})") == "env request: step's \"parse_error\" must be a string or null");
  CHECK(problem(R"({"type": "reset", "id": 1, "episode": "e", "row": [1], "seed": 4})") ==
        "env request: reset's \"row\" must be a JSON object");
  CHECK(problem(head + R"("parse_error": null})").empty());
}
