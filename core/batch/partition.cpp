// Karmarkar-Karp largest differencing for k parts (Korf's "complete KK" first descent): each
// starting k-tuple holds at most one item per slot; the two tuples with the largest spread are
// merged by pairing the heaviest side of one with the lightest of the other, until one tuple
// remains. The seedings differ only in the starting tuples (or, for greedy, skip KK); the
// refinement is a local search, so each seeding can stop at a different local optimum and the
// best of them is kept.
#include "core/batch/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <tuple>

namespace tandem {

// Moves one item, or swaps a pair, between the heaviest part and another part while that lowers
// the heaviest of the two. Bounded, deterministic.
void refine_partition(const std::vector<double>& w, std::vector<std::vector<int64_t>>& parts) {
  const size_t k = parts.size();
  // Each part is kept sorted by (weight, index), so the swap partner search is a binary search.
  auto lighter = [&](int64_t a, int64_t b) { return w[a] < w[b] || (w[a] == w[b] && a < b); };
  std::vector<double> sums(k);
  for (size_t p = 0; p < k; ++p) {
    std::sort(parts[p].begin(), parts[p].end(), lighter);
    sums[p] = part_weight(w, parts[p]);
  }
  auto erase = [&](std::vector<int64_t>& v, int64_t x) { v.erase(std::lower_bound(v.begin(), v.end(), x, lighter)); };
  auto insert = [&](std::vector<int64_t>& v, int64_t x) {
    v.insert(std::lower_bound(v.begin(), v.end(), x, lighter), x);
  };
  for (int iter = 0; iter < 64 * static_cast<int>(k); ++iter) {
    const size_t h = std::max_element(sums.begin(), sums.end()) - sums.begin();
    bool improved = false;
    for (size_t r = 0; r < k && !improved; ++r) {
      const double delta = sums[h] - sums[r];
      if (r == h || delta <= 0) continue;
      // Moving d = w[x] (- w[y] for a swap) from h to r improves the pair iff 0 < d < delta; the
      // best d is the one closest to delta / 2.
      const std::vector<int64_t>& rs = parts[r];
      double best_gain = 0;
      int64_t best_x = -1, best_y = -1;
      auto consider = [&](int64_t x, int64_t y, double d) {
        if (d <= 0 || d >= delta) return;
        const double gain = sums[h] - std::max(sums[h] - d, sums[r] + d);
        if (gain > best_gain * (1 + 1e-12) + 1e-12) best_gain = gain, best_x = x, best_y = y;
      };
      for (int64_t x : parts[h]) {
        consider(x, -1, w[x]);
        const double target = w[x] - delta / 2;
        auto it = std::lower_bound(rs.begin(), rs.end(), target, [&](int64_t a, double t) { return w[a] < t; });
        if (it != rs.end()) consider(x, *it, w[x] - w[*it]);
        if (it != rs.begin()) consider(x, *std::prev(it), w[x] - w[*std::prev(it)]);
      }
      if (best_x < 0) continue;
      erase(parts[h], best_x);
      insert(parts[r], best_x);
      sums[h] -= w[best_x];
      sums[r] += w[best_x];
      if (best_y >= 0) {
        erase(parts[r], best_y);
        insert(parts[h], best_y);
        sums[r] -= w[best_y];
        sums[h] += w[best_y];
      }
      improved = true;
    }
    if (!improved) break;
  }
}

double part_weight(const std::vector<double>& weights, const std::vector<int64_t>& part) {
  double s = 0;
  for (int64_t i : part) s += weights[i];
  return s;
}

double max_part_weight(const std::vector<double>& weights, const std::vector<std::vector<int64_t>>& parts) {
  double m = 0;
  for (const auto& p : parts) m = std::max(m, part_weight(weights, p));
  return m;
}

namespace {

// Largest differencing from the given starting tuples (each at most k items, one per slot).
// Equal spreads go to the older tuple, or with heavy_first to the heavier top slot first (as
// verl orders its states); integer lengths tie often, and the two orders reach different ends.
std::vector<std::vector<int64_t>> kk_from_tuples(const std::vector<double>& weights, int64_t k,
                                                 const std::vector<std::vector<int64_t>>& tuples, bool heavy_first) {
  std::vector<std::vector<int64_t>> parts(k);
  const int64_t n = static_cast<int64_t>(weights.size()), n_tuples = static_cast<int64_t>(tuples.size());
  if (n_tuples == 0) return parts;
  // Flat storage: tuple t's slot j has a sum and an item chain (a linked list through next_item),
  // so merging two tuples is O(k) with no allocation.
  const int64_t max_tuples = 2 * n_tuples;
  std::vector<double> sum(max_tuples * k, 0.0);
  std::vector<int64_t> head(max_tuples * k, -1), tail(max_tuples * k, -1), next_item(n, -1);
  using Entry = std::tuple<double, double, int64_t>;  // (spread, top slot sum or 0, -tuple id), largest first
  std::priority_queue<Entry> heap;
  auto entry = [&](int64_t t) { return Entry{sum[t * k] - sum[t * k + k - 1], heavy_first ? sum[t * k] : 0.0, -t}; };
  for (int64_t t = 0; t < n_tuples; ++t) {
    std::vector<int64_t> items = tuples[t];  // heaviest slot first
    std::stable_sort(items.begin(), items.end(), [&](int64_t a, int64_t b) { return weights[a] > weights[b]; });
    for (size_t j = 0; j < items.size(); ++j) {
      sum[t * k + j] = weights[items[j]];
      head[t * k + j] = tail[t * k + j] = items[j];
    }
    heap.push(entry(t));
  }
  std::vector<int64_t> order(k);
  std::vector<double> tmp_sum(k);
  std::vector<int64_t> tmp_head(k), tmp_tail(k);
  int64_t next = n_tuples;
  while (heap.size() > 1) {
    const int64_t a = -std::get<2>(heap.top());
    heap.pop();
    const int64_t b = -std::get<2>(heap.top());
    heap.pop();
    const int64_t m = next++;
    for (int64_t j = 0; j < k; ++j) {  // a's heaviest slot takes b's lightest
      const int64_t sa = a * k + j, sb = b * k + (k - 1 - j);
      tmp_sum[j] = sum[sa] + sum[sb];
      if (head[sa] < 0) {
        tmp_head[j] = head[sb], tmp_tail[j] = tail[sb];
      } else {
        tmp_head[j] = head[sa], tmp_tail[j] = tail[sa];
        if (head[sb] >= 0) next_item[tail[sa]] = head[sb], tmp_tail[j] = tail[sb];
      }
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return tmp_sum[x] > tmp_sum[y]; });
    for (int64_t j = 0; j < k; ++j) {
      sum[m * k + j] = tmp_sum[order[j]];
      head[m * k + j] = tmp_head[order[j]];
      tail[m * k + j] = tmp_tail[order[j]];
    }
    heap.push(entry(m));
  }
  const int64_t root = -std::get<2>(heap.top());
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = head[root * k + j]; i >= 0; i = next_item[i]) parts[j].push_back(i);
  return parts;
}

std::vector<std::vector<int64_t>> greedy_partition(const std::vector<double>& weights, int64_t k) {
  std::vector<int64_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weights[a] > weights[b]; });
  std::vector<std::vector<int64_t>> parts(k);
  std::vector<double> load(k, 0.0);
  for (int64_t i : order) {
    const size_t p = std::min_element(load.begin(), load.end()) - load.begin();  // lowest index on ties
    parts[p].push_back(i);
    load[p] += weights[i];
  }
  return parts;
}

// Ascending indices inside each part, heaviest part first: the canonical form callers get.
void canonicalize(const std::vector<double>& weights, std::vector<std::vector<int64_t>>& parts) {
  for (auto& p : parts) std::sort(p.begin(), p.end());
  std::stable_sort(parts.begin(), parts.end(),
                   [&](const auto& x, const auto& y) { return part_weight(weights, x) > part_weight(weights, y); });
}

}  // namespace

std::vector<std::vector<int64_t>> seed_partition(const std::vector<double>& weights, int64_t k, PartitionSeed seed) {
  const int64_t n = static_cast<int64_t>(weights.size());
  if (seed == PartitionSeed::kGreedy) return greedy_partition(weights, k);
  std::vector<std::vector<int64_t>> tuples;
  if (seed == PartitionSeed::kEqualSizeTuples) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weights[a] < weights[b]; });
    for (int64_t at = 0; at < n; at += k) tuples.emplace_back(order.begin() + at, order.begin() + std::min(n, at + k));
  } else {
    for (int64_t i = 0; i < n; ++i) tuples.push_back({i});
  }
  return kk_from_tuples(weights, k, tuples, seed != PartitionSeed::kSingletons);
}

std::vector<std::vector<int64_t>> karmarkar_karp(const std::vector<double>& weights, int64_t k, bool refine) {
  std::vector<std::vector<int64_t>> best;
  if (!refine) {
    best = seed_partition(weights, k, PartitionSeed::kSingletons);
  } else {
    double best_max = 0, best_spread = 0;
    for (const PartitionSeed seed : kPartitionSeeds) {
      auto parts = seed_partition(weights, k, seed);
      refine_partition(weights, parts);
      double hi = 0, lo = HUGE_VAL;
      for (const auto& p : parts) {
        const double w = part_weight(weights, p);
        hi = std::max(hi, w), lo = std::min(lo, w);
      }
      if (best.empty() || hi < best_max || (hi == best_max && hi - lo < best_spread))
        best = std::move(parts), best_max = hi, best_spread = hi - lo;
    }
  }
  canonicalize(weights, best);
  return best;
}

std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<double>& weights, double capacity) {
  std::vector<int64_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weights[a] > weights[b]; });
  std::vector<std::vector<int64_t>> bins;
  std::vector<double> load;
  for (int64_t i : order) {
    size_t b = 0;
    while (b < bins.size() && load[b] + weights[i] > capacity) ++b;
    if (b == bins.size()) bins.emplace_back(), load.push_back(0);
    bins[b].push_back(i);
    load[b] += weights[i];
  }
  for (auto& bin : bins) std::sort(bin.begin(), bin.end());
  return bins;
}

std::vector<std::vector<int64_t>> pack_bins(const std::vector<double>& weights, double capacity) {
  if (weights.empty()) return {};
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const int64_t lower = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(total / capacity - 1e-9)));
  auto ffd = first_fit_decreasing(weights, capacity);
  const int64_t ffd_bins = static_cast<int64_t>(ffd.size());
  // KK at the lower bound (and a few above, below FFD's count) gives equally loaded micros.
  // Refinement runs only when plain KK overflows a bin: it is the costly part.
  auto fits = [&](const std::vector<std::vector<int64_t>>& parts) {
    for (const auto& p : parts)
      if (p.empty() || part_weight(weights, p) > capacity) return false;
    return true;
  };
  for (int64_t k = lower; k <= std::min(ffd_bins, lower + 2); ++k) {
    auto parts = karmarkar_karp(weights, k, /*refine=*/false);
    if (fits(parts)) return parts;
    refine_partition(weights, parts);
    if (fits(parts)) {
      for (auto& p : parts) std::sort(p.begin(), p.end());
      return parts;
    }
  }
  return ffd;
}

}  // namespace tandem
