// Helpers the benchmark commands share: a steady clock and the GEMM rate this machine's BLAS
// delivers right now, printed beside every figure because BLAS speed differs per machine.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace tandem::app {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best-of-`repeats` float32 (n, n) x (n, n) torch::mm rate in GFLOP/s on the current threads.
inline double gemm_gflops(int64_t n = 512, int repeats = 5) {
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c = torch::mm(a, b);  // warm-up
  const int inner = n >= 2048 ? 1 : 10;
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < inner; ++i) c = torch::mm(a, b);
    best = std::min(best, seconds_since(t0) / inner);
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best / 1e9;
}

}  // namespace tandem::app
