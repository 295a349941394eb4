// See device_stats.h.
#include "runtime/device_stats.h"

#include <torch/cuda.h>

#include <algorithm>
#include <chrono>

#if defined(TANDEM_WITH_TORCH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace tandem {

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

void reset_device_peak(torch::Device device) {
#if defined(TANDEM_WITH_TORCH_CUDA)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.has_index() ? device.index() : 0);
#else
  (void)device;
#endif
}

int64_t device_peak_bytes(torch::Device device) {
#if defined(TANDEM_WITH_TORCH_CUDA)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#else
  (void)device;
#endif
  return 0;
}

double peak_gflops(torch::Device device, torch::Dtype dtype, int64_t n, int repeats) {
  if (n <= 0) n = device.is_cuda() ? 8192 : 2048;
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions(dtype).device(device);
  const torch::Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);  // (n, n)
  torch::Tensor c = torch::matmul(a, b);  // warm-up (and the GPU's clocks up)
  synchronize(device);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    c = torch::matmul(a, b);
    synchronize(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(n) * n * n / s / 1e9);
  }
  return best;
}

}  // namespace tandem
