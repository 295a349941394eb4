// The part of a step every track does the same way once its samples are scored: the directory of
// every rank's samples, the schedule computed identically on every rank from it, the all-to-all
// that moves samples to their scheduled rank, and the lookup of a micro's samples. Templated over
// the sample type (ArSample, ImageSample).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "core/batch/exchange.h"
#include "core/batch/schedule.h"
#include "parallel/communicator.h"

namespace tandem {

template <class Sample>
struct StepPlan {
  RolloutDirectory directory;  // every rank's samples: ids and costs, the same on every rank
  Schedule schedule;           // rollout -> dp rank -> mini -> micro -> directory positions
  std::vector<Sample> mine;    // the samples scheduled to this rank, sorted by index
};

// local: this rank's scored samples; costs[i]: local[i]'s cost in the schedule. Collective over dp.
template <class Sample>
StepPlan<Sample> plan_and_exchange(const std::vector<Sample>& local, const std::vector<SampleCost>& costs,
                                   const ScheduleOptions& options, parallel::Communicator& dp) {
  std::vector<int64_t> ids;
  ids.reserve(local.size());
  for (const Sample& s : local) ids.push_back(s.index);
  StepPlan<Sample> plan;
  plan.directory = gather_directory(ids, costs, dp);
  plan.schedule = build_schedule(plan.directory.costs, options);
  plan.mine = exchange_samples(local, plan.directory, destinations(plan.schedule, plan.directory.ids.size()), dp);
  return plan;
}

// The samples of `mine` (sorted by index) that `micro`'s directory positions name, in its order.
template <class Sample>
std::vector<const Sample*> samples_of(const MicroBatch& micro, const RolloutDirectory& directory,
                                      const std::vector<Sample>& mine) {
  std::vector<const Sample*> out;
  out.reserve(micro.samples.size());
  for (const int64_t position : micro.samples) {
    const int64_t id = directory.ids[position];
    auto it = std::lower_bound(mine.begin(), mine.end(), id, [](const Sample& s, int64_t v) { return s.index < v; });
    if (it == mine.end() || it->index != id) throw std::logic_error("a scheduled sample is missing after the exchange");
    out.push_back(&*it);
  }
  return out;
}

}  // namespace tandem
