// Reproduces oneMKL's vector-math first-call race (runtime/blas_kernel.h, warm_vector_math) in a
// fresh process: RoPE-like float64 angles through ATen's parallel cos, first call against second.
// `warm` makes the first VML call on this thread alone first, as tandem's main() does; `cold`
// does not. tests/check_vml_first_call.sh runs it many times and counts.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/blas_kernel.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s THREADS warm|cold\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const std::string mode = argv[2];
  torch::set_num_threads(threads);
  (void)tandem::gemm_gflops(256, 1);  // as tandem's startup line: MKL's GEMM runs first
  if (mode == "warm") tandem::warm_vector_math();
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor pos = torch::arange(0, 320, opts).remainder(13);                             // (N)
  const torch::Tensor inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, 32, 2, opts) / 32.0);  // (D/2)
  const torch::Tensor angles = (pos.unsqueeze(1) * inv_freq.unsqueeze(0)).unsqueeze(1);            // (N, 1, D/2)
  const torch::Tensor first = angles.cos(), second = angles.cos();                                 // (N, 1, D/2)
  if (torch::equal(first, second)) {
    std::printf("same\n");
    return 0;
  }
  std::printf("differ (max |first - second| %.3g)\n", (first - second).abs().max().item<double>());
  return 1;
}
