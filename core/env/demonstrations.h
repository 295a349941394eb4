// Demonstrations for the supervised warm-start of a multi-turn recipe (tracks.ar.warmstart.demos):
// conversations in JSON lines laid out exactly as the episodes the model will play, so it learns
// from the token layout it will sample in. The first messages render the prompt; each assistant
// message is a model turn, its text tokenised on its own (as the sampler's ids are, never inside
// the rendered conversation) and ended by the end-of-turn token; the messages between turns are
// observations rendered by the template. Only the model turns are trained.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/batch/sample.h"
#include "core/env/episode.h"

namespace tandem::env {

// Reads `path`: one conversation per line, {"messages": [...]}, roles system, user, assistant and
// tool, string contents. An assistant message may carry OpenAI's `tool_calls` ({"function":
// {"name", "arguments"}}, arguments an object or a JSON string), which become hermes text.
// Throws UserError naming the file, the line and what to fix: no assistant message, one first,
// two in a row, or a conversation not ending with one.
std::vector<nlohmann::ordered_json> read_demonstrations(const std::string& path);

// An assistant message's text as the model would sample it: the content, then one
// "<tool_call>\n{json}\n</tool_call>" block per tool call.
std::string assistant_text(const nlohmann::ordered_json& message);

// The conversation as a warm-start sample: its prompt (the first messages, after `system_prompt`
// when the conversation has no system message of its own, as episodes start), the model turns
// with response mask 1, everything else 0. Throws UserError when it outgrows `max_tokens`;
// `where` names the demonstration in that error.
ArSample demonstration_sample(const ConversationFormat& format, const nlohmann::ordered_json& messages,
                              int64_t end_of_turn, const std::optional<std::string>& system_prompt, int64_t max_tokens,
                              const std::string& where);

}  // namespace tandem::env
