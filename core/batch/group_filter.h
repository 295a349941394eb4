// DAPO's dynamic sampling: a group whose rewards are all equal has zero advantage everywhere and
// teaches nothing, so filter_zero_variance_groups drops it before scheduling. The one copy of the
// rule, for any sample type with `group_id` and `reward` (ArSample, ImageSample).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace tandem {

// Removes every sample of a group whose rewards are all equal, keeping the others in order;
// returns how many samples were removed. Groups must be whole on this rank (they are: a rank
// samples every member of its prompts' groups).
template <class Sample>
int64_t drop_zero_variance_groups(std::vector<Sample>& samples) {
  std::map<int64_t, std::pair<double, double>> range;  // group -> (min, max) reward
  for (const Sample& s : samples) {
    auto [it, fresh] = range.emplace(s.group_id, std::make_pair(s.reward, s.reward));
    if (!fresh) it->second = {std::min(it->second.first, s.reward), std::max(it->second.second, s.reward)};
  }
  const size_t before = samples.size();
  samples.erase(std::remove_if(samples.begin(), samples.end(),
                               [&](const Sample& s) {
                                 const auto& r = range.at(s.group_id);
                                 return r.first == r.second;
                               }),
                samples.end());
  return static_cast<int64_t>(before - samples.size());
}

}  // namespace tandem
