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

// Decimal numbers in `text`, in order, as written minus thousands separators: an optional sign
// ('-' or U+2212, also before a '$': "-$5"; not after a letter or digit, so "5-3" is 5 and 3 and
// "COVID-19" is 19), digits, ",ddd" or LaTeX "{,}ddd" groups (exactly three digits), and an
// optional ".d+" fraction; ".5" is 0.5. "$1,234.50" -> "1234.50"; "1,2,3" -> 1, 2, 3.
std::vector<std::string> find_numbers(std::string_view text);

// A response's answer: the first number after the last "####" that a number follows (a "####"
// heading followed by words does not count), else the last number of the text.
std::optional<double> final_number(std::string_view text);

// What is wrong with a reference answer for math_answer ("" when nothing): its answer part (after
// its last "####", else all of it) must hold exactly one number. "\frac{1}{2}" holds two.
std::string math_reference_problem(std::string_view answer);
// That one number; nullopt when math_reference_problem says why not.
std::optional<double> reference_number(std::string_view answer);

// 1 when final_number(normalize_response(response)) equals reference_number(answer), else 0 (also
// when the response has no number). Throws UserError naming `sample_index` and the problem when
// the answer has no single number: such a dataset cannot be scored by this reward.
double math_answer_score(std::string_view response, std::string_view answer, int64_t sample_index);

class MathAnswerReward : public RewardFn {
 public:
  std::vector<double> score(const std::vector<RewardInput>& inputs) override;
  std::string name() const override { return "math_answer"; }
};

}  // namespace tandem::rewards
