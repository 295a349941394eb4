// Metric aggregation across micros (and ranks): each micro's value is weighted by its sample
// share, renormalised per key, so a key missing from a micro does not dilute the others.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

class TensorBoardWriter;

// Timing fields ("time/...", "perf/...") are the only metrics allowed to differ between a resumed
// and an uninterrupted run.
bool is_timing_metric(const std::string& key);

// Rank 0's metric log: one JSON object per step in <run_dir>/metrics.jsonl (flushed per line) and
// the same scalars in a TensorBoard event file under <run_dir>/tensorboard/.
class MetricsWriter {
 public:
  // resume_step >= 0: lines of later steps (written after the checkpoint being resumed) are
  // dropped first, so the file reads as if the run had never stopped; from step 0 (a fresh start
  // in a directory with an earlier attempt's file) step 0's lines go too.
  MetricsWriter(const std::string& run_dir, int64_t resume_step);
  ~MetricsWriter();
  void write(int64_t step, const MetricMap& metrics);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// The metrics.jsonl lines of `path` as (step, metrics), for tests and tools.
std::vector<std::pair<int64_t, MetricMap>> read_metrics_jsonl(const std::string& path);

}  // namespace tandem
