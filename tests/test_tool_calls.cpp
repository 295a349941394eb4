// The hermes tool-call parser: several calls, arguments as an object or a JSON string, and each
// malformed form reported (never thrown) with the call's number.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/env/tool_calls.h"

using namespace tandem::env;

TEST_CASE("hermes tool calls parse, several per turn", "[env][tool_calls]") {
  const auto p = parse_tool_calls(
      "Let me compute.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"347 * "
      "29\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"get\", \"arguments\": \"{\\\"key\\\": \\\"kiwi\\\"}\"}</tool_call>");
  CHECK_FALSE(p.error);
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "calc");
  CHECK(p.calls[0].arguments["expression"] == "347 * 29");
  CHECK(p.calls[1].name == "get");
  CHECK(p.calls[1].arguments["key"] == "kiwi");  // arguments given as a JSON string
  CHECK(parse_tool_calls("no calls here").calls.empty());
  CHECK_FALSE(parse_tool_calls("no calls here").error);
  CHECK(parse_tool_calls("<tool_call>{\"name\": \"f\"}</tool_call>").calls[0].arguments.empty());
}

TEST_CASE("malformed tool calls are reported with their number, the good ones kept", "[env][tool_calls]") {
  const auto bad_json = parse_tool_calls("<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{name: b}</tool_call>");
  REQUIRE(bad_json.error);
  CHECK(*bad_json.error == "tool call 2: not a JSON object: '{name: b}'");
  CHECK(bad_json.calls.size() == 1);
  CHECK(*parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>").error == "tool call 1: no string \"name\"");
  CHECK(*parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>").error ==
        "tool call 1: \"arguments\" must be a JSON object");
  // A turn cut by the token cap mid-call.
  CHECK(*parse_tool_calls("<tool_call>{\"name\": \"a\", \"argu").error ==
        "tool call 1: <tool_call> is not closed by </tool_call>");
  // A long body is quoted to 80 bytes, never cut inside a character: "×" is 2 bytes, at bytes 79-80.
  const std::string body = "{calc: " + std::string(72, '7') + "\u00d7" + "3}";
  const std::string error = *parse_tool_calls("<tool_call>" + body + "</tool_call>").error;
  CHECK(error == "tool call 1: not a JSON object: '{calc: " + std::string(72, '7') + "...'");
  CHECK(nlohmann::json(error).dump() != "");  // valid UTF-8: a throw here was the bug
}
