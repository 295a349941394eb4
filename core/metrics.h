// Metric aggregation across micros (and ranks): each micro's value is weighted by its sample
// share, renormalised per key, so a key missing from a micro does not dilute the others.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tandem {

using MetricMap = std::map<std::string, double>;

// Per key: sum(w_i v_i) / sum(w_i) over the micros that report the key; a zero weight sum falls
// back to the plain mean of those values. Throws std::invalid_argument on a size mismatch or a
// negative / non-finite weight.
MetricMap aggregate_metrics(const std::vector<MetricMap>& micros, const std::vector<double>& weights);

// Streaming form of the same rule.
class MetricAccumulator {
 public:
  void add(const MetricMap& values, double weight);
  MetricMap result() const;
  bool empty() const { return sums_.empty(); }

 private:
  struct Entry {
    double weighted_sum = 0;
    double weight = 0;
    double plain_sum = 0;
    double count = 0;
  };
  std::map<std::string, Entry> sums_;
};

}  // namespace tandem
