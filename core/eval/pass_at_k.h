// The unbiased pass@k estimator of Chen et al. 2021 (Codex): with n samples of a prompt of which c
// are correct, pass@k = 1 - C(n - c, k) / C(n, k), the chance that k of the n drawn without
// replacement hold a correct one. Computed as a product, never as binomials (which overflow).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

// 1 - prod_{i = n - c + 1}^{n} (1 - k / i); 1 when n - c < k. Throws std::invalid_argument unless
// 0 <= c <= n and 1 <= k <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

// The mean of pass_at_k over prompts, each with `n` samples and correct[j] of them correct.
double mean_pass_at_k(int64_t n, const std::vector<int64_t>& correct, int64_t k);

}  // namespace tandem
