// The built-in environments' rules (calculator, guess, lookup), the final-answer reader, and the
// protocol server `tandem env NAME` runs, driven through string streams.
#include <catch2/catch.hpp>

#include "fixtures.h"

#include <sstream>

#include "common/error.h"
#include "core/env/builtin_envs.h"

using namespace tandem;
using namespace tandem::env;
using json = nlohmann::json;

namespace {

StepInput said(const std::string& text, std::vector<ToolCall> calls = {}) {
  StepInput in;
  in.text = text;
  in.tool_calls = std::move(calls);
  return in;
}

}  // namespace

TEST_CASE("last_integer reads the final answer", "[env][builtin]") {
  std::string v;
  CHECK((last_integer("so 347 * 29 = 10063.", v) && v == "10063"));
  CHECK((last_integer("the answer is 10,063", v) && v == "10063"));
  CHECK((last_integer("It is -12", v) && v == "-12"));
  CHECK((last_integer("<think>maybe 5</think>I will not say", v) == false));
  CHECK((last_integer("<think>maybe 5</think>007", v) && v == "7"));
  CHECK_FALSE(last_integer("none", v));
}

TEST_CASE("calculator: calc answers, the final turn is scored", "[env][builtin]") {
  auto env = make_builtin_env("calculator");
  CHECK(env->hello().name == "calculator");
  CHECK(env->hello().stop == std::vector<std::string>{"</tool_call>"});
  const auto first = env->reset("e", json{{"prompt", "What is 347 * 29?"}, {"answer", "10063"}}, 1);
  CHECK(first.messages[0]["content"] == "What is 347 * 29?");
  auto a = env->step("e", said("", {ToolCall{"calc", {{"expression", "347 * 29"}}},
                                    ToolCall{"calc", {{"expression", "1 +"}}}, ToolCall{"sh", {{"cmd", "ls"}}}}));
  CHECK_FALSE(a.done);
  REQUIRE(a.messages.size() == 3);
  CHECK(a.messages[0] == nlohmann::ordered_json{{"role", "tool"}, {"content", "10063"}});
  CHECK(a.messages[1]["content"] == "error: expected a number at 3 in '1 +'");
  CHECK(a.messages[2]["content"] == "error: unknown tool 'sh' (calc)");
  StepInput bad = said("<tool_call>{x}</tool_call>");
  bad.parse_error = "tool call 1: not a JSON object: '{x}'";
  CHECK(env->step("e", bad).messages[0]["content"] == "error: tool call 1: not a JSON object: '{x}'");
  a = env->step("e", said("The answer is 10063."));
  CHECK((a.done && a.reward == 1.0));
  env->reset("f", json{{"prompt", "What is 347 * 29?"}, {"answer", "10063"}}, 1);
  CHECK(env->step("f", said("10064")).reward == 0.0);
  // Without a row, the seed draws the question; one seed, one question (a GRPO group shares it).
  const auto q1 = env->reset("g", json::object(), 42).messages[0]["content"];
  CHECK(env->reset("h", json::object(), 42).messages[0]["content"] == q1);
  CHECK(env->reset("i", json::object(), 43).messages[0]["content"] != q1);
}

TEST_CASE("guess: higher / lower, right guess rewarded, at most 8 turns", "[env][builtin]") {
  auto env = make_builtin_env("guess");
  CHECK(env->hello().max_turns == 8);
  env->reset("e", json{{"target", 40}}, 0);
  CHECK(env->step("e", said("32")).messages[0]["content"] == "Higher.");
  CHECK(env->step("e", said("I say 48")).messages[0]["content"] == "Lower.");
  CHECK(env->step("e", said("no idea")).messages[0]["content"] == "Answer with one number from 1 to 64.");
  const auto right = env->step("e", said("40"));
  CHECK((right.done && right.reward == 1.0));
  env->reset("f", json{{"target", 40}}, 0);
  EnvAnswer last;
  for (int t = 0; t < 8; ++t) last = env->step("f", said("1"));
  CHECK((last.done && last.reward == 0.0));
  CHECK(env->reset("g", json{{"target", 65}}, 0).error);
}

TEST_CASE("lookup: the value comes only from the get tool", "[env][builtin]") {
  auto env = make_builtin_env("lookup");
  const auto first = env->reset("e", json::object(), 7);
  const std::string prompt = first.messages[0]["content"];
  const auto q = prompt.find('\'');
  const std::string key = prompt.substr(q + 1, prompt.find('\'', q + 1) - q - 1);
  const auto got = env->step("e", said("", {ToolCall{"get", {{"key", key}}}}));
  const std::string value = got.messages[0]["content"];
  CHECK(value.size() == 4);
  CHECK(prompt.find(value) == std::string::npos);  // the answer is in the observation only
  CHECK(env->step("e", said("", {ToolCall{"get", {{"key", "nope"}}}})).messages[0]["content"] ==
        "error: no key 'nope'");
  CHECK(env->step("e", said("It is " + value)).reward == 1.0);
}

TEST_CASE("a step for an episode never reset (or closed) is that episode's error", "[env][builtin]") {
  for (const char* name : {"calculator", "guess", "lookup"}) {
    INFO(name);
    auto env = make_builtin_env(name);
    CHECK(env->step("ghost", said("7")).error == "unknown episode ghost");
    env->reset("e", json::object(), 3);
    CHECK_FALSE(env->step("e", said("7")).error);  // control: a reset episode is served
    env->close("e");
    CHECK(env->step("e", said("7")).error == "unknown episode e");
  }
}

TEST_CASE("unknown built-in environments are named", "[env][builtin]") {
  CHECK(test::user_error_of([] { make_builtin_env("chess"); }) ==
        "unknown built-in environment 'chess' (calculator, guess, lookup; or env.command)");
}

TEST_CASE("serve_env speaks the protocol", "[env][builtin]") {
  auto env = make_builtin_env("guess");
  std::istringstream in(
      "{\"type\":\"hello\",\"id\":0,\"protocol\":1}\n"
      "{\"type\":\"reset\",\"id\":1,\"episode\":\"e\",\"row\":{\"target\":3},\"seed\":1}\n"
      "{\"type\":\"step\",\"id\":2,\"episode\":\"e\",\"text\":\"3\",\"tool_calls\":[],\"parse_error\":null,\"finish\":"
      "\"stop\"}\n"
      "{\"type\":\"close\",\"id\":3,\"episode\":\"e\"}\n");
  std::ostringstream out;
  CHECK(serve_env(*env, in, out) == 0);
  std::istringstream lines(out.str());
  std::vector<json> answers;
  for (std::string line; std::getline(lines, line);) answers.push_back(json::parse(line));
  REQUIRE(answers.size() == 4);
  CHECK(answers[0]["name"] == "guess");
  CHECK(answers[1]["messages"].size() == 1);
  CHECK(answers[2] == json{{"id", 2}, {"messages", json::array()}, {"reward", 1.0}, {"done", true}});
  CHECK(answers[3] == json{{"id", 3}});
  std::istringstream bad("{\"type\":\"dance\",\"id\":0}\n");
  CHECK(serve_env(*env, bad, out) == 2);
}
