// The NCCL communicator on a GPU ([20], label cuda): every collective on one rank (and on each of
// the world's ranks when each sees its own GPU), and a collective issued right after a kernel on a
// non-default stream returns that kernel's result (the collective runs on the caller's stream).
// Where no GPU or no NCCL is there, each case prints "skipped: ..." and returns.
#include <catch2/catch.hpp>

#include "mpi_test_util.h"
#include "parallel/process_groups.h"

using namespace tandem;
using parallel::ReduceOp;

namespace {

std::unique_ptr<parallel::Communicator> nccl_world_or_skip(std::unique_ptr<parallel::ProcessGroups>& groups) {
  if (!parallel::nccl_available()) {
    WARN("skipped: this tandem was built without NCCL");
    return nullptr;
  }
  const int64_t gpus = torch::cuda::device_count();
  if (gpus < test::world_size()) {
    WARN("skipped: no GPU visible per rank (" << gpus << " GPUs for " << test::world_size() << " ranks)");
    return nullptr;
  }
  const auto dims = parallel::ParallelDims::resolve(test::world_size(), 1, 1, test::world_size());
  groups = std::make_unique<parallel::ProcessGroups>(MPI_COMM_WORLD, dims);
  return parallel::make_nccl_communicator(*groups, parallel::Axis::kWorld, 60, test::world_rank());
}

}  // namespace

TEST_CASE("nccl: every collective, on the communicator's GPU", "[cuda]") {
  std::unique_ptr<parallel::ProcessGroups> groups;
  auto comm = nccl_world_or_skip(groups);
  if (!comm) return;
  const torch::Device gpu = comm->device();
  REQUIRE(gpu.is_cuda());
  const int64_t r = comm->rank(), n = comm->size();
  const auto on = [&](torch::Dtype t) { return torch::TensorOptions(t).device(gpu); };
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kInt64}) {
    torch::Tensor t = torch::full({5}, static_cast<double>(r + 1), on(dtype));
    comm->all_reduce(t, ReduceOp::kSum);
    CHECK(t[0].item<double>() == n * (n + 1) / 2);
    torch::Tensor m = torch::full({3}, static_cast<double>(r), on(dtype));
    comm->all_reduce(m, ReduceOp::kMax);
    CHECK(m[2].item<double>() == n - 1);
  }
  torch::Tensor g = comm->all_gather(torch::full({2, 3}, static_cast<double>(r), on(torch::kFloat64)));
  CHECK(g.size(0) == 2 * n);
  torch::Tensor v = comm->all_gather_v(torch::full({r + 1, 2}, static_cast<int64_t>(r), on(torch::kInt64)));
  CHECK(v.size(0) == n * (n + 1) / 2);
  torch::Tensor rs = comm->reduce_scatter(torch::arange(2 * n, on(torch::kFloat64)));
  CHECK(rs[0].item<double>() == 2.0 * r * n);
  torch::Tensor b = torch::full({4}, static_cast<double>(r + 10), on(torch::kFloat32));
  comm->broadcast(b, n - 1);
  CHECK(b[3].item<float>() == static_cast<float>(n - 1 + 10));
  std::vector<int64_t> counts(static_cast<size_t>(n), 1);
  torch::Tensor a2a = comm->all_to_all_v(torch::full({n, 2}, static_cast<int64_t>(r), on(torch::kInt64)), counts);
  CHECK(a2a.size(0) == n);
  // A host tensor is refused by name, before any message.
  torch::Tensor host = torch::ones({2});
  CHECK_THROWS_WITH(comm->all_reduce(host), Catch::Contains("cpu") && Catch::Contains("cuda"));
  comm->barrier();
}

#if defined(TANDEM_WITH_TORCH_CUDA)
#include <c10/cuda/CUDAGuard.h>

TEST_CASE("nccl: a collective right after a kernel on a pool stream reduces that kernel's result", "[cuda]") {
  std::unique_ptr<parallel::ProcessGroups> groups;
  auto comm = nccl_world_or_skip(groups);
  if (!comm) return;
  const torch::Device gpu = comm->device();
  const int64_t n = comm->size();
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, gpu.index()));  // non-blocking stream
  for (int round = 0; round < 20; ++round) {
    // A long kernel chain whose last write is what the collective must see.
    torch::Tensor x = torch::zeros({1 << 22}, torch::TensorOptions(torch::kFloat32).device(gpu));
    for (int k = 0; k < 8; ++k) x = x + 1;
    comm->all_reduce(x, ReduceOp::kSum);
    CHECK(x.min().item<float>() == static_cast<float>(8 * n));
  }
}
#endif  // TANDEM_WITH_TORCH_CUDA (a CUDA LibTorch)
