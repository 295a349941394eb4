// The name -> implementation table for AR prompt sources.
#include "core/tasks/task_factory.h"

#include "common/error.h"
#include "core/config/config.h"
#include "core/config/name_tables.h"
#include "core/tasks/dataset_source.h"
#include "core/tasks/jsonl_dataset.h"

namespace tandem::tasks {

const std::vector<std::string>& ar_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const SyntheticTask t : {SyntheticTask::kReverseDigits, SyntheticTask::kSortDigits, SyntheticTask::kAdd,
                                  SyntheticTask::kShapeCorners, SyntheticTask::kMultiply})
      n.push_back(synthetic_task_name(t));
    n.push_back("jsonl");
    return n;
  }();
  return names;
}

const std::vector<std::string>& image_task_names() {
  static const std::vector<std::string> names{"shapes"};  // core/tasks/shapes.h
  return names;
}

std::unique_ptr<PromptSource> make_prompt_source(const std::string& task, const std::optional<std::string>& path,
                                                 const std::string& prompt_key, const std::string& answer_key,
                                                 bool shuffle, int64_t seed,
                                                 const std::optional<SyntheticOptions>& synthetic) {
  if (const auto kind = synthetic_task_from_name(task))
    return std::make_unique<SyntheticSource>(*kind, synthetic.value_or(default_synthetic_options(*kind)), seed);
  if (task == "jsonl") {
    if (!path || path->empty()) throw UserError("task jsonl: data.path is required (the JSONL prompt file)");
    return std::make_unique<DatasetSource>(load_jsonl_prompts(*path, prompt_key, answer_key), shuffle, seed,
                                           "jsonl " + *path);
  }
  throw UserError(unknown_name_message("AR task", task, ar_task_names()));
}

std::unique_ptr<PromptSource> make_ar_prompts(const ArDataConfig& d, int64_t seed) {
  std::optional<SyntheticOptions> synthetic;
  if (auto task = synthetic_task_from_name(d.task); task && (d.min_digits || d.max_digits)) {
    synthetic = default_synthetic_options(*task);
    if (d.min_digits) synthetic->min_digits = *d.min_digits;
    if (d.max_digits) synthetic->max_digits = *d.max_digits;
  }
  return make_prompt_source(d.task, d.path, d.prompt_key, d.answer_key, d.shuffle, seed, synthetic);
}

namespace {
// The recipe schema offers exactly these names (config/name_tables.h).
const NameRegistrar kArTaskNames(NameTable::kArTask, ar_task_names());
const NameRegistrar kImageTaskNames(NameTable::kImageTask, image_task_names());
}  // namespace

}  // namespace tandem::tasks
