// Weighted metric aggregation (DESIGN section 3, last rule).
#include "core/metrics.h"

#include <cmath>
#include <stdexcept>

namespace tandem {

void MetricAccumulator::add(const MetricMap& values, double weight) {
  if (!std::isfinite(weight) || weight < 0)
    throw std::invalid_argument("metric weight must be finite and >= 0, got " + std::to_string(weight));
  for (const auto& [key, value] : values) {
    Entry& e = sums_[key];
    e.weighted_sum += weight * value;
    e.weight += weight;
    e.plain_sum += value;
    e.count += 1;
  }
}

MetricMap MetricAccumulator::result() const {
  MetricMap out;
  for (const auto& [key, e] : sums_) out[key] = e.weight > 0 ? e.weighted_sum / e.weight : e.plain_sum / e.count;
  return out;
}

MetricMap aggregate_metrics(const std::vector<MetricMap>& micros, const std::vector<double>& weights) {
  if (micros.size() != weights.size())
    throw std::invalid_argument("aggregate_metrics: " + std::to_string(micros.size()) + " metric sets but " +
                                std::to_string(weights.size()) + " weights");
  MetricAccumulator acc;
  for (size_t i = 0; i < micros.size(); ++i) acc.add(micros[i], weights[i]);
  return acc.result();
}

}  // namespace tandem
