// See metric_reduction.h. std::map keeps the names sorted, so every rank lays its values out in
// the same order without exchanging the names.
#include "core/run/metric_reduction.h"

#include <algorithm>
#include <stdexcept>

namespace tandem {

namespace {

void reduce_values(std::map<std::string, double>& values, parallel::Communicator& comm, parallel::ReduceOp op) {
  if (values.empty()) return;
  std::vector<double> flat;
  for (const auto& kv : values) flat.push_back(kv.second);
  torch::Tensor t = torch::tensor(flat, torch::kFloat64);  // (K)
  comm.all_reduce(t, op);
  int64_t i = 0;
  for (auto& kv : values) kv.second = t[i++].item<double>();
}

}  // namespace

void MetricReduction::max(const std::string& name, double value) {
  auto [it, fresh] = maxima_.emplace(name, value);
  if (!fresh) it->second = std::max(it->second, value);
}

void MetricReduction::reduce(parallel::Communicator& comm) {
  reduce_values(sums_, comm, parallel::ReduceOp::kSum);
  reduce_values(maxima_, comm, parallel::ReduceOp::kMax);
  reduced_ = true;
}

double MetricReduction::operator[](const std::string& name) const {
  if (!reduced_) throw std::logic_error("MetricReduction: read '" + name + "' before reduce()");
  if (auto it = sums_.find(name); it != sums_.end()) return it->second;
  if (auto it = maxima_.find(name); it != maxima_.end()) return it->second;
  throw std::out_of_range("MetricReduction: no metric named '" + name + "'");
}

double MetricReduction::ratio(const std::string& name, const std::string& per) const {
  const double d = (*this)[per];
  return d != 0 ? (*this)[name] / d : 0.0;
}

}  // namespace tandem
