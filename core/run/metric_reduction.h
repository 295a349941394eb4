// Named reductions over ranks: a track adds its per-rank sums and maxima by name, reduce() runs one
// collective per kind, and the totals are read back by name, so no metric lives at a position in
// a tensor that the reader must count to. Every rank must add the same names.
#pragma once

#include <map>
#include <string>

#include "parallel/communicator.h"

namespace tandem {

class MetricReduction {
 public:
  void sum(const std::string& name, double value) { sums_[name] += value; }
  void max(const std::string& name, double value);
  // Collective over `comm`: sums add up, maxima take the largest. Call once, then read.
  void reduce(parallel::Communicator& comm);
  // The reduced value; throws std::out_of_range for a name never added (a typo, not a zero).
  double operator[](const std::string& name) const;
  // name's reduced sum divided by the reduced sum `per` (0 when that is 0).
  double ratio(const std::string& name, const std::string& per) const;

 private:
  std::map<std::string, double> sums_, maxima_;
  bool reduced_ = false;
};

}  // namespace tandem
