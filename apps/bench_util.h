// Helpers the benchmark commands share: a steady clock and the GEMM rate this machine's BLAS
// delivers right now, printed beside every figure because BLAS speed differs per machine.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "runtime/blas_kernel.h"

namespace tandem::app {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using tandem::gemm_gflops;  // core/blas_kernel.h

}  // namespace tandem::app
