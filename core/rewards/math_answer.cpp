// Number extraction (GSM8K "####" convention, thousands separators) and the math_answer reward.
#include "core/rewards/math_answer.h"

#include <locale>
#include <sstream>

#include "common/error.h"
#include "core/rewards/text_match.h"

namespace tandem::rewards {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool digit_at(std::string_view s, size_t i) { return i < s.size() && is_digit(s[i]); }

// Reads one number starting at the digit s[i]; advances i past it.
std::string read_number(std::string_view s, size_t& i) {
  std::string out;
  if (i > 0 && s[i - 1] == '-' && (i < 2 || !is_digit(s[i - 2]))) out.push_back('-');
  while (digit_at(s, i)) out.push_back(s[i++]);
  // ",ddd" continues the number only when exactly three digits follow (a thousands group).
  while (i < s.size() && s[i] == ',' && digit_at(s, i + 1) && digit_at(s, i + 2) && digit_at(s, i + 3) &&
         !digit_at(s, i + 4)) {
    out.append(s.substr(i + 1, 3));
    i += 4;
  }
  if (i < s.size() && s[i] == '.' && digit_at(s, i + 1)) {
    out.push_back(s[i++]);
    while (digit_at(s, i)) out.push_back(s[i++]);
  }
  return out;
}

// Locale-independent (strtod would follow LC_NUMERIC).
std::optional<double> parse_number(const std::string& text) {
  std::istringstream in(text);
  in.imbue(std::locale::classic());
  double value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

}  // namespace

std::vector<std::string> find_numbers(std::string_view text) {
  std::vector<std::string> numbers;
  for (size_t i = 0; i < text.size();) {
    if (is_digit(text[i])) {
      numbers.push_back(read_number(text, i));
    } else {
      ++i;
    }
  }
  return numbers;
}

std::optional<double> final_number(std::string_view text) {
  const size_t marker = text.rfind("####");
  if (marker != std::string_view::npos) {
    const auto after = find_numbers(text.substr(marker + 4));
    if (after.empty()) return std::nullopt;
    return parse_number(after.front());
  }
  const auto all = find_numbers(text);
  if (all.empty()) return std::nullopt;
  return parse_number(all.back());
}

double math_answer_score(std::string_view response, std::string_view answer, int64_t sample_index) {
  const std::optional<double> expected = final_number(answer);
  if (!expected) {
    std::string shown(answer.substr(0, 80));
    throw UserError("math_answer: the reference answer of sample " + std::to_string(sample_index) +
                    " has no number to compare against ('" + shown + (answer.size() > 80 ? "...'" : "'") + ")");
  }
  const std::optional<double> got = final_number(normalize_response(response));
  return got && *got == *expected ? 1.0 : 0.0;
}

std::vector<double> MathAnswerReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<double> out;
  out.reserve(inputs.size());
  for (const auto& in : inputs) out.push_back(math_answer_score(in.response, in.answer, in.sample_index));
  return out;
}

}  // namespace tandem::rewards
