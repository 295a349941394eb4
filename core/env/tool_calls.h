// Tool calls in the model's text, in the hermes format Qwen2.5 / Qwen3 templates teach:
// <tool_call>{"name": ..., "arguments": {...}}</tool_call>, several per turn. A call that does not
// parse is reported (the environment answers it), never a crash.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/env/protocol.h"

namespace tandem::env {

inline constexpr const char* kToolCallOpen = "<tool_call>";
inline constexpr const char* kToolCallClose = "</tool_call>";

struct ParsedToolCalls {
  std::vector<ToolCall> calls;       // the calls that parsed, in order
  std::optional<std::string> error;  // the first problem ("tool call 2: not JSON: ..."), if any
};

// Every <tool_call> block of `text`. `arguments` may be an object or a string holding one (some
// models write it that way). Problems: an unclosed block, a body that is not a JSON object, no
// string "name", arguments that are not an object.
ParsedToolCalls parse_tool_calls(const std::string& text);

}  // namespace tandem::env
