// String-comparison rewards: exact_match and partial_match, plus the response normalisation
// every built-in reward shares (cut at an end-of-sequence marker, trim whitespace).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/rewards/reward_fn.h"

namespace tandem::rewards {

// Textual end-of-sequence markers a decoded response may still contain when special tokens were
// not skipped: the char tokenizer's "<eos>" and the common Hugging Face ones.
const std::vector<std::string>& eos_markers();

// Trims ASCII whitespace from both ends.
std::string trim(std::string_view text);

// The response up to (not including) its first end-of-sequence marker, trimmed.
std::string normalize_response(std::string_view response);

// 1 when normalize_response(response) == trim(answer), else 0.
double exact_match_score(std::string_view response, std::string_view answer);

// Partial credit, compared per Unicode code point after the same normalisation:
//   score = #{ i < min(n, m) : r_i == a_i } / max(n, m)
// with r the response (length m) and a the answer (length n). Position-wise agreement divided by
// the longer length, so missing and extra characters both cost 1/max(n, m) each. In [0, 1], and
// 1 exactly when the response equals the answer (an empty response to an empty answer scores 1).
double partial_match_score(std::string_view response, std::string_view answer);

class ExactMatchReward : public RewardFn {
 public:
  std::vector<double> score(const std::vector<RewardInput>& inputs) override;
  std::string name() const override { return "exact_match"; }
};

class PartialMatchReward : public RewardFn {
 public:
  std::vector<double> score(const std::vector<RewardInput>& inputs) override;
  std::string name() const override { return "partial_match"; }
};

}  // namespace tandem::rewards
