// exact_match and partial_match, and the shared response normalisation.
#include "core/rewards/text_match.h"

#include <algorithm>
#include <cstdint>

#include "models/tokenizers/utf8.h"

namespace tandem::rewards {

const std::vector<std::string>& eos_markers() {
  static const std::vector<std::string> markers{"<eos>",      "</s>",       "<|endoftext|>",
                                                "<|im_end|>", "<|eot_id|>", "<|end_of_text|>"};
  return markers;
}

std::string trim(std::string_view text) {
  constexpr const char* kSpace = " \t\r\n\f\v";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  const size_t end = text.find_last_not_of(kSpace);
  return std::string(text.substr(begin, end - begin + 1));
}

std::string normalize_response(std::string_view response) {
  size_t cut = response.size();
  for (const auto& marker : eos_markers()) cut = std::min(cut, response.find(marker));
  return trim(response.substr(0, cut));
}

double exact_match_score(std::string_view response, std::string_view answer) {
  return normalize_response(response) == trim(answer) ? 1.0 : 0.0;
}

namespace {
// Code points, so a multi-byte character counts as one position; invalid bytes become U+FFFD.
std::vector<uint32_t> code_points(const std::string& text) {
  namespace utf8 = tandem::models::utf8;
  const std::string valid = utf8::make_valid(text);
  std::vector<uint32_t> out;
  for (size_t pos = 0; pos < valid.size();) {
    const size_t len = utf8::sequence_length(valid, pos);
    out.push_back(utf8::decode_at(valid, pos, len));
    pos += len;
  }
  return out;
}
}  // namespace

double partial_match_score(std::string_view response, std::string_view answer) {
  const std::vector<uint32_t> r = code_points(normalize_response(response));
  const std::vector<uint32_t> a = code_points(trim(answer));
  const size_t longest = std::max(r.size(), a.size());
  if (longest == 0) return 1.0;
  size_t matches = 0;
  for (size_t i = 0; i < std::min(r.size(), a.size()); ++i) matches += r[i] == a[i];
  return static_cast<double>(matches) / static_cast<double>(longest);
}

std::vector<double> ExactMatchReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<double> out;
  out.reserve(inputs.size());
  for (const auto& in : inputs) out.push_back(exact_match_score(in.response, in.answer));
  return out;
}

std::vector<double> PartialMatchReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<double> out;
  out.reserve(inputs.size());
  for (const auto& in : inputs) out.push_back(partial_match_score(in.response, in.answer));
  return out;
}

}  // namespace tandem::rewards
