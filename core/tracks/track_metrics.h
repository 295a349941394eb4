// Metrics both tracks report the same way: a step's reward statistics over every rank's samples.
#pragma once

#include <cmath>
#include <vector>

#include "core/run/metric_reduction.h"
#include "core/run/metrics.h"

namespace tandem {

// Adds this rank's n, sum r and sum r^2 of `samples` (any type with `reward`) to `r`.
template <class Sample>
void add_reward_sums(const std::vector<Sample>& samples, MetricReduction& r) {
  r.sum("samples", 0), r.sum("reward_sum", 0), r.sum("reward_sq_sum", 0);
  for (const Sample& s : samples)
    r.sum("samples", 1), r.sum("reward_sum", s.reward), r.sum("reward_sq_sum", s.reward * s.reward);
}

// After r.reduce(): reward/mean, reward/std (unbiased, as the GRPO advantage) and rollout/samples.
inline void write_reward_metrics(const MetricReduction& r, MetricMap& metrics) {
  const double n = r["samples"], mean = r.ratio("reward_sum", "samples");
  metrics["reward/mean"] = mean;
  metrics["reward/std"] = n > 1 ? std::sqrt(std::max(0.0, (r["reward_sq_sum"] - n * mean * mean) / (n - 1))) : 0;
  metrics["rollout/samples"] = n;
}

}  // namespace tandem
