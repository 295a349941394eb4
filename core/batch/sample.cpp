// Sample invariants, checked where samples enter the data path.
#include "core/batch/sample.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace tandem {

int64_t ArSample::action_tokens() const {
  return std::accumulate(response_mask.begin(), response_mask.end(), int64_t{0},
                         [](int64_t acc, uint8_t m) { return acc + (m ? 1 : 0); });
}

void check_sample(const ArSample& s) {
  const std::string where = "sample " + std::to_string(s.index) + ": ";
  if (s.prompt_len < 0 || s.prompt_len > s.length())
    throw std::invalid_argument(where + "prompt_len " + std::to_string(s.prompt_len) + " outside [0, " +
                                std::to_string(s.length()) + "]");
  const auto n = static_cast<size_t>(s.response_len());
  if (s.response_mask.size() != n)
    throw std::invalid_argument(where + "response_mask has " + std::to_string(s.response_mask.size()) +
                                " entries for " + std::to_string(n) + " response tokens");
  if (!s.rollout_logp.empty() && s.rollout_logp.size() != n)
    throw std::invalid_argument(where + "rollout_logp has " + std::to_string(s.rollout_logp.size()) + " entries for " +
                                std::to_string(n) + " response tokens");
}

}  // namespace tandem
