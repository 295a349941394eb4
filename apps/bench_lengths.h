// The workload files of `bench train` and `bench rollout`: one sequence per line, either "L" (a
// sequence of L tokens, the first half its own prompt) or "group prompt_len response_len" (the
// lines of a group share one prompt of that length); one form per file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::app {

struct SequenceSpec {
  int64_t group = 0, prompt = 0, response = 0;
  int64_t length() const { return prompt + response; }
};

// Throws UserError naming the file and line of anything else.
std::vector<SequenceSpec> read_lengths(const std::string& path);

}  // namespace tandem::app
