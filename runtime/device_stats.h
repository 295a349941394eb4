// What a benchmark or the trainer asks of the device its tensors live on, without CUDA headers:
// wait for its queued work, its peak tensor memory, and the GEMM rate it delivers right now.
// On the CPU they are no-ops or the host's figures; the CUDA half is compiled only against a CUDA
// LibTorch (TANDEM_WITH_TORCH_CUDA on device_stats.cpp alone).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tandem {

// Blocks until every kernel queued on `device` has finished (a host sync; nothing on the CPU).
void synchronize(torch::Device device);

// The caching allocator's high-water mark of allocated bytes on a CUDA device since the last
// reset (0 on the CPU: see peak_rss_bytes() for the host).
void reset_device_peak(torch::Device device);
int64_t device_peak_bytes(torch::Device device);

// GFLOP/s of an (n x n) x (n x n) product in `dtype` on `device`, the best of `repeats` after a
// warm-up: n = 8192 on a GPU, 2048 on the CPU unless given.
double peak_gflops(torch::Device device, torch::Dtype dtype, int64_t n = 0, int repeats = 3);

}  // namespace tandem
