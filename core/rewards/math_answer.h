// The math_answer reward: compares the final number of a response with the reference answer's
// (GSM8K style "... #### 42"), numerically and ignoring thousands separators.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rewards/reward_fn.h"

namespace tandem::rewards {

// Decimal numbers in `text`, in order, as written minus thousands separators: an optional '-'
// (when not preceded by a digit, so "5-3" is 5 and 3), digits, ",ddd" groups (a comma followed by
// exactly three digits), and an optional ".d+" fraction. "$1,234.50" -> "1234.50"; "1,2,3" -> 1, 2, 3.
std::vector<std::string> find_numbers(std::string_view text);

// The value after the last "####" when there is one (its first number, nullopt when none
// follows), else the last number of the text.
std::optional<double> final_number(std::string_view text);

// 1 when final_number(normalize_response(response)) equals final_number(answer), else 0 (also
// when the response has no number). Throws UserError naming `sample_index` when the answer has no
// number: such a dataset cannot be scored by this reward.
double math_answer_score(std::string_view response, std::string_view answer, int64_t sample_index);

class MathAnswerReward : public RewardFn {
 public:
  std::vector<double> score(const std::vector<RewardInput>& inputs) override;
  std::string name() const override { return "math_answer"; }
};

}  // namespace tandem::rewards
