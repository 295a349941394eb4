// A finite prompt list served in epochs, optionally reshuffled each epoch in an order that
// depends only on (seed, epoch), so a restored cursor replays exactly the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tasks/prompt_source.h"

namespace tandem::tasks {

// The order of epoch `epoch`: a Fisher-Yates permutation of [0, n) drawn from (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch);

class DatasetSource : public PromptSource {
 public:
  // Throws UserError when `prompts` is empty (naming `name`).
  DatasetSource(std::vector<Prompt> prompts, bool shuffle, int64_t seed, std::string name);

  Prompt next() override;
  DataCursor cursor() const override { return cursor_; }
  // Throws UserError for a position past the end of the dataset (it changed since the save).
  void restore(const DataCursor& cursor) override;
  std::optional<int64_t> size() const override { return static_cast<int64_t>(prompts_.size()); }
  std::string describe() const override { return name_; }

 private:
  void ensure_order();

  std::vector<Prompt> prompts_;
  bool shuffle_;
  std::string name_;
  DataCursor cursor_;
  std::vector<int64_t> order_;  // the current epoch's order (empty: not built yet)
  int64_t order_epoch_ = -1;
};

}  // namespace tandem::tasks
