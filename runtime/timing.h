// Wall-clock seconds for the step metrics (time/*); steady_clock, so never negative.
#pragma once

#include <chrono>

namespace tandem {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tandem
