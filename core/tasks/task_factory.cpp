// The name -> implementation table for AR prompt sources.
#include "core/tasks/task_factory.h"

#include "common/error.h"
#include "core/config/config.h"
#include "core/tasks/dataset_source.h"
#include "core/tasks/jsonl_dataset.h"

namespace tandem::tasks {

const std::vector<std::string>& ar_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const SyntheticTask t :
         {SyntheticTask::kReverseDigits, SyntheticTask::kSortDigits, SyntheticTask::kAdd, SyntheticTask::kShapeCorners})
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

}  // namespace tandem::tasks
