// Rank-local store of a step's samples that releases whole groups only: GRPO advantages need
// every member of a group, and a group may fan out to any number of samples (compact rollouts).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem {

struct BufferStats {
  int64_t groups_released = 0;
  int64_t groups_dropped_zero_variance = 0;
  int64_t samples_dropped = 0;
};

// Sample must have `group_id` and `reward` members (ArSample, ImageSample).
template <class Sample>
class RolloutBuffer {
 public:
  // Declares that `group_id` will produce `expected` samples; the group completes on the last one.
  void expect_group(int64_t group_id, int64_t expected) {
    if (expected < 1) throw std::invalid_argument("group " + std::to_string(group_id) + ": expected >= 1 samples");
    if (groups_.count(group_id)) throw std::invalid_argument("group " + std::to_string(group_id) + " declared twice");
    groups_[group_id].expected = expected;
  }

  void add(Sample sample) {
    auto it = groups_.find(sample.group_id);
    if (it == groups_.end())
      throw std::invalid_argument("sample for undeclared group " + std::to_string(sample.group_id));
    Group& g = it->second;
    if (static_cast<int64_t>(g.samples.size()) >= g.expected)
      throw std::invalid_argument("group " + std::to_string(sample.group_id) + " already has its " +
                                  std::to_string(g.expected) + " samples");
    g.samples.push_back(std::move(sample));
  }

  bool complete(int64_t group_id) const {
    auto it = groups_.find(group_id);
    return it != groups_.end() && static_cast<int64_t>(it->second.samples.size()) == it->second.expected;
  }
  int64_t pending_groups() const {
    return std::count_if(groups_.begin(), groups_.end(), [](const auto& kv) {
      return static_cast<int64_t>(kv.second.samples.size()) < kv.second.expected;
    });
  }

  // Removes and returns every complete group's samples, ordered by group id then arrival, so
  // the result does not depend on completion timing. With drop_zero_variance, groups whose
  // rewards are all equal (no learning signal: DAPO dynamic sampling) are discarded and counted.
  std::vector<Sample> take_complete(bool drop_zero_variance, BufferStats* stats = nullptr) {
    std::vector<Sample> out;
    for (auto it = groups_.begin(); it != groups_.end();) {
      Group& g = it->second;
      if (static_cast<int64_t>(g.samples.size()) < g.expected) {
        ++it;
        continue;
      }
      const bool flat = std::all_of(g.samples.begin(), g.samples.end(),
                                    [&](const Sample& s) { return s.reward == g.samples.front().reward; });
      if (drop_zero_variance && flat) {
        if (stats) stats->groups_dropped_zero_variance++, stats->samples_dropped += g.expected;
      } else {
        if (stats) stats->groups_released++;
        for (auto& s : g.samples) out.push_back(std::move(s));
      }
      it = groups_.erase(it);
    }
    return out;
  }

 private:
  struct Group {
    int64_t expected = 0;
    std::vector<Sample> samples;
  };
  std::map<int64_t, Group> groups_;
};

}  // namespace tandem
