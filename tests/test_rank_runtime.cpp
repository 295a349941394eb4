// setup_rank_runtime: the recipe's dtype, a deliberate thread count, and a clear error for a CUDA
// request on a machine without one.
#include <catch2/catch.hpp>

#include "core/run/rank_runtime.h"

using namespace tandem;

TEST_CASE("rank runtime: dtype and thread count from the recipe; cuda without a GPU is refused", "[runtime]") {
  const int before = torch::get_num_threads();
  RunConfig run;
  run.device = Device::kCpu;
  run.threads = 1;
  run.dtype = DType::kFloat64;
  RankRuntime r = setup_rank_runtime(run, 0, 1);
  CHECK(r.device.is_cpu());
  CHECK(r.dtype == torch::kFloat64);
  CHECK(torch::get_num_threads() == 1);
  run.dtype = DType::kBFloat16;
  CHECK(setup_rank_runtime(run, 0, 1).dtype == torch::kBFloat16);
  run.dtype = DType::kFloat32;
  run.threads = 0;  // auto: this process's CPUs shared by 1 local rank
  r = setup_rank_runtime(run, 0, 1);
  CHECK(r.dtype == torch::kFloat32);
  CHECK(torch::get_num_threads() == intra_op_threads(r.cpus, 1));
  if (!torch::cuda::is_available()) {
    run.device = Device::kCuda;
    CHECK_THROWS_WITH(setup_rank_runtime(run, 0, 1), Catch::Contains("run.device: cuda requested"));
  }
  torch::set_num_threads(before);
}
