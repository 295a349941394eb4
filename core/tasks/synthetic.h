// Built-in procedural AR tasks (reverse_digits, sort_digits, add, shape_corners for the char
// tokenizer; multiply, in words, for hf tokenizers and the calculator environment): infinite, and
// prompt k is a pure function of (task, options, seed, k), so cursors and shards are exact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tasks/prompt_source.h"

namespace tandem::tasks {

// Formats (only characters of the default char alphabet):
//   reverse_digits  "1234>"  -> "4321"   digits reversed
//   sort_digits     "3141:"  -> "1134"   digits sorted ascending
//   add             "12+7="  -> "19"     decimal sum, operands without leading zeros
//   shape_corners   "square corners=" -> "4"   corners of one of the shapes task's classes
//                   (core/tasks/shapes.h), uniform over all of them; the digit options do not apply
//   multiply        "What is 713 * 11?" -> "7843"   a product too long for a small model to work
//                   out, the question the calculator environment asks (needs '?' and capitals,
//                   which the char tokenizer's default alphabet lacks)
enum class SyntheticTask { kReverseDigits, kSortDigits, kAdd, kShapeCorners, kMultiply };

// The answer of shape_corners for shape class `label`: circle 0, square 4, triangle 3, cross 12,
// ring 0, diamond 4, saltire 12, frame 8 (outer and inner corners).
int64_t shape_corners(int64_t label);

// Difficulty: the digit count of the string (reverse, sort) or of each operand (add, multiply), drawn
// uniformly from [min_digits, max_digits] per prompt.
struct SyntheticOptions {
  int64_t min_digits = 2;
  int64_t max_digits = 5;
};

// Keeps add's sum inside int64 and every prompt short enough for small max_seq_len models.
inline constexpr int64_t kMaxSyntheticDigits = 9;

// reverse/sort: 2..5 digits; add: 1..3 digits per operand; multiply: 2..3 digits per operand. With these the longest
// prompt is 8 characters and the longest answer 5, well inside the quickstart model's max_seq_len 32.
SyntheticOptions default_synthetic_options(SyntheticTask task);

std::optional<SyntheticTask> synthetic_task_from_name(const std::string& name);
std::string synthetic_task_name(SyntheticTask task);

// Throws UserError naming the task unless 1 <= min_digits <= max_digits <= kMaxSyntheticDigits.
void validate_synthetic_options(SyntheticTask task, const SyntheticOptions& options);

// The longest prompt and answer (in characters) the options can produce, so a trainer can check
// them against max_seq_len / max_new_tokens before the first step.
struct SyntheticLengths {
  int64_t prompt = 0;
  int64_t answer = 0;
};
SyntheticLengths synthetic_max_lengths(SyntheticTask task, const SyntheticOptions& options);

// Prompt number `index` of the stream; its id is `index`.
Prompt generate_synthetic(SyntheticTask task, const SyntheticOptions& options, int64_t seed, int64_t index);

class SyntheticSource : public PromptSource {
 public:
  // Validates the options (UserError).
  SyntheticSource(SyntheticTask task, const SyntheticOptions& options, int64_t seed);

  Prompt next() override;
  DataCursor cursor() const override { return cursor_; }
  void restore(const DataCursor& cursor) override { cursor_ = cursor; }
  std::optional<int64_t> size() const override { return std::nullopt; }
  std::string describe() const override { return synthetic_task_name(task_); }

 private:
  SyntheticTask task_;
  SyntheticOptions options_;
  DataCursor cursor_;
};

}  // namespace tandem::tasks
