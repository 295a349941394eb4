// The `jsonl` AR task: one JSON object per line holding a prompt and a reference answer, loaded
// strictly so that a bad record is reported by file and line instead of surfacing mid-run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tasks/prompt_source.h"

namespace tandem::tasks {

// Reads every record of `path`. Each non-blank line must be a JSON object whose `prompt_key` and
// `answer_key` are strings (other keys are ignored); blank lines are skipped. A prompt's id is its
// 0-based line index (line number - 1). An empty `answer_key` means the records carry no answers
// (answer ""), for rewards that do not need one. Throws UserError naming "path:line" and the key
// for bad JSON, a non-object, a missing key or a non-string value; and for a missing, unreadable
// or empty file.
std::vector<Prompt> load_jsonl_prompts(const std::string& path, const std::string& prompt_key,
                                       const std::string& answer_key);

}  // namespace tandem::tasks
