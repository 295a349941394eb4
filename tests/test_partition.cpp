// Karmarkar-Karp partitioning and bin packing.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>

#include "core/partition.h"

using namespace tandem;

namespace {
void check_is_partition(const std::vector<std::vector<int64_t>>& parts, size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& p : parts)
    for (int64_t i : p) seen.at(i)++;
  for (size_t i = 0; i < n; ++i) CHECK(seen[i] == 1);
}
double max_part(const std::vector<double>& w, const std::vector<std::vector<int64_t>>& parts) {
  double m = 0;
  for (const auto& p : parts) m = std::max(m, part_weight(w, p));
  return m;
}
}  // namespace

TEST_CASE("KK finds the perfect 2-way split of a textbook instance", "[partition]") {
  // {8,7,6,5,4}: plain KK gives 16/14; the refinement reaches the perfect 15/15.
  const std::vector<double> w{8, 7, 6, 5, 4};
  CHECK(max_part(w, karmarkar_karp(w, 2, false)) == 16);
  const auto parts = karmarkar_karp(w, 2, true);
  check_is_partition(parts, w.size());
  CHECK(max_part(w, parts) == 15);
}

TEST_CASE("KK is a partition, deterministic, and refinement is never worse", "[partition]") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(6.0, 1.2);
  for (int64_t k : {1, 2, 3, 8}) {
    std::vector<double> w(300);
    for (auto& x : w) x = std::round(dist(rng));
    const auto a = karmarkar_karp(w, k), b = karmarkar_karp(w, k);
    CHECK(a == b);
    check_is_partition(a, w.size());
    CHECK(static_cast<int64_t>(a.size()) == k);
    CHECK(max_part(w, a) <= max_part(w, karmarkar_karp(w, k, false)));
    const double mean = std::accumulate(w.begin(), w.end(), 0.0) / k;
    CHECK(max_part(w, a) / mean < 1.001);
  }
}

TEST_CASE("KK with more parts than items leaves parts empty", "[partition]") {
  const auto parts = karmarkar_karp({3, 1}, 4);
  CHECK(parts.size() == 4);
  check_is_partition(parts, 2);
}

TEST_CASE("bin packing respects capacity and reaches the lower bound on easy inputs", "[partition]") {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> dist(1, 900);
  std::vector<double> w(500);
  for (auto& x : w) x = dist(rng);
  const double cap = 4096;
  const auto bins = pack_bins(w, cap);
  check_is_partition(bins, w.size());
  for (const auto& b : bins) CHECK(part_weight(w, b) <= cap);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  CHECK(static_cast<double>(bins.size()) == std::ceil(total / cap));
  const auto ffd = first_fit_decreasing(w, cap);
  check_is_partition(ffd, w.size());
  for (const auto& b : ffd) CHECK(part_weight(w, b) <= cap);
}

TEST_CASE("bin packing of items that must each take a bin", "[partition]") {
  const std::vector<double> w{6, 6, 6};
  CHECK(pack_bins(w, 10).size() == 3);
  CHECK(pack_bins({}, 10).empty());
}
