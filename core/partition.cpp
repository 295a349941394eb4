// Karmarkar-Karp largest differencing for k parts (Korf's "complete KK" first descent): each
// item starts as a k-tuple (w, 0, ..., 0); the two tuples with the largest spread are merged
// by pairing the heaviest side of one with the lightest of the other, until one tuple remains.
#include "core/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

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
  auto insert = [&](std::vector<int64_t>& v, int64_t x) { v.insert(std::lower_bound(v.begin(), v.end(), x, lighter), x); };
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

std::vector<std::vector<int64_t>> karmarkar_karp(const std::vector<double>& weights, int64_t k, bool refine) {
  std::vector<std::vector<int64_t>> parts(k);
  const int64_t n = static_cast<int64_t>(weights.size());
  if (n == 0) return parts;
  // Flat storage: tuple t's slot j has a sum and an item chain (a linked list through next_item),
  // so merging two tuples is O(k) with no allocation.
  const int64_t max_tuples = 2 * n;
  std::vector<double> sum(max_tuples * k, 0.0);
  std::vector<int64_t> head(max_tuples * k, -1), tail(max_tuples * k, -1), next_item(n, -1);
  using Entry = std::pair<double, int64_t>;  // (spread, -tuple id): larger spread first, then older
  std::priority_queue<Entry> heap;
  for (int64_t i = 0; i < n; ++i) {
    sum[i * k] = weights[i];
    head[i * k] = tail[i * k] = i;
    heap.push({weights[i], -i});
  }
  std::vector<int64_t> order(k);
  std::vector<double> tmp_sum(k);
  std::vector<int64_t> tmp_head(k), tmp_tail(k);
  int64_t next = n;
  while (heap.size() > 1) {
    const int64_t a = -heap.top().second;
    heap.pop();
    const int64_t b = -heap.top().second;
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
    heap.push({sum[m * k] - sum[m * k + k - 1], -m});
  }
  const int64_t root = -heap.top().second;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = head[root * k + j]; i >= 0; i = next_item[i]) parts[j].push_back(i);
  if (refine) refine_partition(weights, parts);
  for (auto& p : parts) std::sort(p.begin(), p.end());
  // Heaviest first, so callers get a canonical order.
  std::stable_sort(parts.begin(), parts.end(), [&](const auto& x, const auto& y) {
    return part_weight(weights, x) > part_weight(weights, y);
  });
  return parts;
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
