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

bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Whether the number whose first digit is s[i] is negative: a '-' (or U+2212) right before it,
// or before a '$' right before it ("-$5"), that does not follow a letter or digit ("5-3" and
// "COVID-19" are not signs).
bool negative_before(std::string_view s, size_t i) {
  if (i > 0 && s[i - 1] == '$') --i;
  size_t sign = 0;
  if (i >= 1 && s[i - 1] == '-')
    sign = 1;
  else if (i >= 3 && s.substr(i - 3, 3) == "\xE2\x88\x92")
    sign = 3;
  return sign > 0 && (i == sign || !is_alnum(s[i - sign - 1]));
}

// The length of a thousands separator at s[i] followed by exactly three digits: "," or LaTeX's
// "{,}"; 0 when there is none.
size_t thousands_at(std::string_view s, size_t i) {
  const size_t n = s.substr(i, 1) == "," ? 1 : s.substr(i, 3) == "{,}" ? 3 : 0;
  return n > 0 && digit_at(s, i + n) && digit_at(s, i + n + 1) && digit_at(s, i + n + 2) && !digit_at(s, i + n + 3) ? n
                                                                                                                    : 0;
}

// Reads one number starting at the digit s[i]; advances i past it.
std::string read_number(std::string_view s, size_t& i) {
  std::string out;
  if (negative_before(s, i)) out.push_back('-');
  while (digit_at(s, i)) out.push_back(s[i++]);
  // A thousands group continues the number only when exactly three digits follow.
  for (size_t n; (n = thousands_at(s, i)) > 0; i += n + 3) out.append(s.substr(i + n, 3));
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
      // ".5" is 0.5 (not after a digit: "3.5" is read whole, from its 3).
      const bool bare_fraction = i > 0 && text[i - 1] == '.' && (i == 1 || !is_digit(text[i - 2]));
      std::string n = read_number(text, i);
      numbers.push_back(bare_fraction && n.find('.') == std::string::npos ? "0." + n : n);
    } else {
      ++i;
    }
  }
  return numbers;
}

std::optional<double> final_number(std::string_view text) {
  // A "####" counts only when a number follows it (after spaces, a sign, a '$'): a response may
  // hold Markdown headings ("#### Step 2: ...").
  for (size_t m = text.rfind("####"); m != std::string_view::npos;
       m = m == 0 ? std::string_view::npos : text.rfind("####", m - 1)) {
    size_t i = m + 4;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    if (i < text.size() && text[i] == '-') ++i;
    if (i < text.size() && text[i] == '$') ++i;
    if (digit_at(text, i)) return parse_number(find_numbers(text.substr(m + 4)).front());
  }
  const auto all = find_numbers(text);
  if (all.empty()) return std::nullopt;
  return parse_number(all.back());
}

namespace {

// The numbers of a reference's answer part: after its last "####", else all of it.
std::vector<std::string> reference_numbers(std::string_view answer) {
  const size_t marker = answer.rfind("####");
  return find_numbers(marker == std::string_view::npos ? answer : answer.substr(marker + 4));
}

}  // namespace

std::string math_reference_problem(std::string_view answer) {
  const size_t count = reference_numbers(answer).size();
  if (count == 1) return "";
  const std::string where = answer.rfind("####") == std::string_view::npos ? "" : " after its last '####'";
  if (count == 0) return "has no number" + where + " to compare against";
  return "holds " + std::to_string(count) + " numbers" + where +
         " where math_answer compares one (a fraction, a root or a time cannot be compared as one number): end "
         "it with '#### N'";
}

std::optional<double> reference_number(std::string_view answer) {
  const std::vector<std::string> numbers = reference_numbers(answer);
  if (numbers.size() != 1) return std::nullopt;  // math_reference_problem says why
  return parse_number(numbers.front());
}

double math_answer_score(std::string_view response, std::string_view answer, int64_t sample_index) {
  const std::optional<double> expected = reference_number(answer);
  if (!expected) {
    std::string shown(answer.substr(0, 80));
    throw UserError("math_answer: the reference answer of sample " + std::to_string(sample_index) + " " +
                    math_reference_problem(answer) + " ('" + shown + (answer.size() > 80 ? "...'" : "'") + ")");
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
