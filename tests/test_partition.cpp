// Karmarkar-Karp partitioning from several seedings, and bin packing.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <random>

#include "core/batch/partition.h"

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

TEST_CASE("k = 8: the best seeding beats plain KK + refinement where verl's equal-size KK did", "[partition]") {
  // Found by a random search (lognormal lengths, 40 items): plain KK followed by the move/swap
  // refinement stops at 8385 (max/mean 1.0100); verl's karmarkar_karp(equal_size=True), computed
  // by an independent Python re-implementation, reaches 8335 (1.0040), its equal_size=False 8443.
  const std::vector<double> w{2681, 833,  1309, 389,  1462, 604,  3398, 227,  632,  134,  1475, 4006, 3638, 641,
                              749,  101,  1773, 3562, 1694, 1515, 5274, 3877, 1130, 4442, 1311, 2440, 523,  725,
                              757,  1761, 1402, 1150, 713,  623,  651,  449,  4649, 727,  112,  2876};
  auto plain = seed_partition(w, 8, PartitionSeed::kSingletons);
  refine_partition(w, plain);
  CHECK(max_part(w, plain) == 8385);  // the previous karmarkar_karp's answer
  CHECK(max_part(w, seed_partition(w, 8, PartitionSeed::kEqualSizeTuples)) == 8335);
  CHECK(max_part(w, seed_partition(w, 8, PartitionSeed::kSingletonsHeavyFirst)) == 8443);
  for (const auto& p : seed_partition(w, 8, PartitionSeed::kEqualSizeTuples)) CHECK(p.size() == 5);
  const auto best = karmarkar_karp(w, 8);
  check_is_partition(best, w.size());
  CHECK(max_part(w, best) == 8334);  // 1.0039 of the mean 8301.875
}

TEST_CASE("randomized: the result is never worse than any seeding alone, and every seeding is needed", "[partition]") {
  std::mt19937_64 rng(11);
  const std::vector<int64_t> ks{1, 2, 3, 5, 8, 16};
  std::map<PartitionSeed, int> unique_best;  // instances only this seeding (refined) reaches the result on
  for (int trial = 0; trial < 1000; ++trial) {
    const int64_t k = ks[rng() % ks.size()];
    const int64_t n = static_cast<int64_t>(rng() % (6 * k + 1));  // includes n < k and n = 0
    std::lognormal_distribution<double> dist(6.5, 0.3 + static_cast<double>(rng() % 100) / 100.0);
    std::vector<double> w(n);
    for (auto& x : w) x = std::max(16.0, std::round(dist(rng)));  // integer lengths: ties are common
    INFO("trial " << trial << " k " << k << " n " << n);
    const auto result = karmarkar_karp(w, k);
    check_is_partition(result, w.size());
    REQUIRE(static_cast<int64_t>(result.size()) == k);
    const double best = max_part(w, result);
    std::map<PartitionSeed, double> refined;
    for (const PartitionSeed seed : kPartitionSeeds) {
      auto parts = seed_partition(w, k, seed);
      check_is_partition(parts, w.size());
      CHECK(max_part(w, parts) >= best);
      refine_partition(w, parts);
      refined[seed] = max_part(w, parts);
      CHECK(refined[seed] >= best);
    }
    for (const auto& [seed, m] : refined) {
      bool alone = m == best;
      for (const auto& [other, m2] : refined) alone = alone && (other == seed || m2 > best);
      unique_best[seed] += alone ? 1 : 0;
    }
  }
  // Control: for each seeding there are instances that only it solves this well, so leaving any
  // one out would make the check above fail.
  for (const PartitionSeed seed : kPartitionSeeds) {
    INFO("seed " << static_cast<int>(seed));
    CHECK(unique_best[seed] > 0);
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
