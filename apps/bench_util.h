// Helpers the benchmark commands share: a steady clock and the GEMM rate this machine's BLAS
// delivers right now, printed beside every figure because BLAS speed differs per machine.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "models/llama/lora.h"
#include "runtime/blas_kernel.h"

namespace tandem::app {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using tandem::gemm_gflops;  // core/blas_kernel.h

// The median of repeated measurements: the mean of the middle two for an even count (the upper
// one alone would report the slower of two runs as typical); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The adapters `bench rollout` and `bench train` time with --lora-rank R: rank R on every linear
// layer with alpha 2R, the guidance of the peers' LoRA-for-RL recipes.
inline models::LoraSpec bench_lora_spec(int64_t rank) {
  return {rank, 2.0 * static_cast<double>(rank), models::lora_linear_names()};
}

}  // namespace tandem::app
