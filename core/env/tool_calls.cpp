// The hermes tool-call parser.
#include "core/env/tool_calls.h"

#include <nlohmann/json.hpp>

namespace tandem::env {

namespace {

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The first 80 bytes, cut before a character (not inside a multi-byte one, which would make the
// parse error that quotes it invalid UTF-8 that no tokenizer encodes).
std::string shown(const std::string& s) {
  if (s.size() <= 80) return s;
  size_t cut = 80;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return s.substr(0, cut) + "...";
}

}  // namespace

ParsedToolCalls parse_tool_calls(const std::string& text) {
  ParsedToolCalls out;
  const std::string open = kToolCallOpen, close = kToolCallClose;
  size_t at = 0;
  for (int n = 1;; ++n) {
    const size_t b = text.find(open, at);
    if (b == std::string::npos) break;
    const size_t e = text.find(close, b + open.size());
    const std::string where = "tool call " + std::to_string(n);
    if (e == std::string::npos) {
      if (!out.error) out.error = where + ": <tool_call> is not closed by </tool_call>";
      break;
    }
    const std::string body = trimmed(text.substr(b + open.size(), e - b - open.size()));
    at = e + close.size();
    const auto j = nlohmann::ordered_json::parse(body, nullptr, false);
    std::string problem;
    if (j.is_discarded() || !j.is_object()) {
      problem = "not a JSON object: '" + shown(body) + "'";
    } else if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
      problem = "no string \"name\"";
    } else {
      ToolCall call{j["name"].get<std::string>(), nlohmann::ordered_json::object()};
      if (j.contains("arguments")) {
        auto args = j["arguments"];
        if (args.is_string()) args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
        if (args.is_discarded() || !args.is_object())
          problem = "\"arguments\" must be a JSON object";
        else
          call.arguments = std::move(args);
      }
      if (problem.empty()) {
        out.calls.push_back(std::move(call));
        continue;
      }
    }
    if (!out.error) out.error = where + ": " + problem;
  }
  return out;
}

}  // namespace tandem::env
