// Sample invariants, checked where samples enter the data path.
#include "core/batch/sample.h"

#include <algorithm>
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

bool same_prompt(const ArSample& a, const ArSample& b) {
  return a.group_id == b.group_id && a.prompt_len == b.prompt_len &&
         std::equal(a.tokens.begin(), a.tokens.begin() + a.prompt_len, b.tokens.begin());
}

std::vector<ArSample> split_turns(const ArSample& episode) {
  check_sample(episode);
  std::vector<ArSample> out;
  const auto& m = episode.response_mask;
  for (size_t begin = 0; begin < m.size();) {
    if (!m[begin]) {
      ++begin;
      continue;
    }
    size_t end = begin;
    while (end < m.size() && m[end]) ++end;
    ArSample t;
    const auto first = static_cast<int64_t>(begin), last = static_cast<int64_t>(end);
    t.tokens.assign(episode.tokens.begin(), episode.tokens.begin() + episode.prompt_len + last);
    t.prompt_len = episode.prompt_len + first;
    t.response_mask.assign(end - begin, 1);
    if (!episode.rollout_logp.empty())
      t.rollout_logp.assign(episode.rollout_logp.begin() + first, episode.rollout_logp.begin() + last);
    t.reward = episode.reward, t.advantage = episode.advantage, t.group_id = episode.group_id;
    t.policy_version = episode.policy_version;
    if (out.size() + 1 >= static_cast<size_t>(kTurnIdStride))
      throw std::invalid_argument("sample " + std::to_string(episode.index) + ": more than " +
                                  std::to_string(kTurnIdStride - 1) +
                                  " model turns; cap them with tracks.ar.env.max_turns or use env.samples: episode");
    t.index = episode.index * kTurnIdStride + static_cast<int64_t>(out.size());
    out.push_back(std::move(t));
    begin = end;
  }
  if (out.empty()) {
    out.push_back(episode);
    out.back().index = episode.index * kTurnIdStride;
  }
  return out;
}

}  // namespace tandem
