// Weighted metric aggregation (DESIGN section 3, last rule).
#include "core/run/metrics.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "common/error.h"
#include "core/run/tensorboard.h"

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

bool is_timing_metric(const std::string& key) { return key.rfind("time/", 0) == 0 || key.rfind("perf/", 0) == 0; }

MetricsWriter::MetricsWriter(const std::string& run_dir, int64_t resume_step) : path_(run_dir + "/metrics.jsonl") {
  namespace fs = std::filesystem;
  if (resume_step >= 0 && fs::exists(path_)) {
    // Rewrite through a temporary file so a crash here cannot lose the lines we keep.
    std::ifstream in(path_);
    const std::string tmp = path_ + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    // A run from step 0 (a fresh start over an earlier attempt, or a resume of a step-0
    // checkpoint) writes step 0's lines (eval.at_start) again: they go too.
    const int64_t kept_up_to = resume_step == 0 ? -1 : resume_step;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      // Only the steps the resumed run does again go; a line this reader cannot place is kept.
      const bool redone =
          j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > kept_up_to;
      if (!redone) out << line << "\n";
    }
    out.close();
    // A short copy must not replace the history (a full disk shows here, not at each line).
    if (!out) throw UserError(tmp + ": cannot write the kept metrics (disk full?); " + path_ + " is unchanged");
    fs::rename(tmp, path_);
  }
  fs::create_directories(run_dir + "/tensorboard");
  tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir + "/tensorboard");
}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::write(int64_t step, const MetricMap& metrics) {
  nlohmann::ordered_json j;
  j["step"] = step;
  for (const auto& [k, v] : metrics) j[k] = v;
  std::ofstream out(path_, std::ios::app);
  out << j.dump() << "\n";
  out.flush();
  if (!out) throw std::runtime_error(path_ + ": cannot append metrics");
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  tensorboard_->add_scalars(step, metrics, now);
  tensorboard_->flush();
}

std::vector<std::pair<int64_t, MetricMap>> read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(path + ": cannot open metrics file");
  std::vector<std::pair<int64_t, MetricMap>> out;
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
      throw UserError(path + ":" + std::to_string(n) + ": not a metrics line (a JSON object with an integer step)");
    MetricMap m;
    for (const auto& [k, v] : j.items())
      if (k != "step") m[k] = v.is_number() ? v.get<double>() : std::nan("");
    out.emplace_back(j["step"].get<int64_t>(), std::move(m));
  }
  return out;
}

}  // namespace tandem
