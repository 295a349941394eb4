// Builds the AR track's prompt source from the recipe's tracks.ar.data fields (passed as plain
// arguments so the factory is testable without a recipe).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tasks/prompt_source.h"
#include "core/tasks/synthetic.h"

namespace tandem {
struct ArDataConfig;
}

namespace tandem::tasks {

// `task` is one of ar_task_names(): a synthetic task, whose difficulty is
// `synthetic` or the task's default, or "jsonl", which needs `path`. `shuffle` applies to datasets
// only (generated prompts are already random). Throws UserError for an unknown task (with the
// nearest name), a missing path, or any dataset error.
// The AR task names make_prompt_source() builds (the synthetic tasks, then "jsonl"), and the image
// track's datasets: the recipe schema offers exactly these.
const std::vector<std::string>& ar_task_names();
const std::vector<std::string>& image_task_names();

std::unique_ptr<PromptSource> make_prompt_source(const std::string& task, const std::optional<std::string>& path,
                                                 const std::string& prompt_key, const std::string& answer_key,
                                                 bool shuffle, int64_t seed,
                                                 const std::optional<SyntheticOptions>& synthetic = std::nullopt);

// The task's prompt stream for `seed` from the recipe's tracks.ar.data, with its digit range for
// synthetic tasks.
std::unique_ptr<PromptSource> make_ar_prompts(const ArDataConfig& data, int64_t seed);

}  // namespace tandem::tasks
