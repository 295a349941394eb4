// See pass_at_k.h.
#include "core/eval/pass_at_k.h"

#include <stdexcept>
#include <string>

namespace tandem {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n)
    throw std::invalid_argument("pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n " + std::to_string(n) + ", c " +
                                std::to_string(c) + ", k " + std::to_string(k));
  if (n - c < k) return 1.0;
  double fail = 1.0;  // C(n - c, k) / C(n, k)
  for (int64_t i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - fail;
}

double mean_pass_at_k(int64_t n, const std::vector<int64_t>& correct, int64_t k) {
  if (correct.empty()) return 0.0;
  double sum = 0;
  for (const int64_t c : correct) sum += pass_at_k(n, c, k);
  return sum / static_cast<double>(correct.size());
}

}  // namespace tandem
