// MpiCommunicator collectives on real ranks, with every dtype the trainer moves.
#include <catch2/catch.hpp>

#include "mpi_test_util.h"

using namespace tandem;
using parallel::ReduceOp;

TEST_CASE("all_reduce sum / max / min over the world", "[mpi][communicator]") {
  auto comm = test::block_communicator(test::world_size());
  const int64_t r = comm->rank(), n = comm->size();
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kInt64, torch::kBFloat16}) {
    torch::Tensor t = torch::full({5}, static_cast<double>(r + 1), torch::TensorOptions().dtype(dtype));
    comm->all_reduce(t, ReduceOp::kSum);
    CHECK(t[0].item<double>() == n * (n + 1) / 2);
    torch::Tensor m = torch::full({3}, static_cast<double>(r), torch::TensorOptions().dtype(dtype));
    comm->all_reduce(m, ReduceOp::kMax);
    CHECK(m[2].item<double>() == n - 1);
    torch::Tensor lo = torch::full({3}, static_cast<double>(r), torch::TensorOptions().dtype(dtype));
    comm->all_reduce(lo, ReduceOp::kMin);
    CHECK(lo[1].item<double>() == 0);
  }
  torch::Tensor strided = torch::ones({4, 4}, torch::kFloat64).t();  // non-contiguous in place
  comm->all_reduce(strided);
  CHECK(strided.sum().item<double>() == 16.0 * n);
}

TEST_CASE("all_gather, all_gather_v, reduce_scatter, broadcast", "[mpi][communicator]") {
  auto comm = test::block_communicator(test::world_size());
  const int64_t r = comm->rank(), n = comm->size();
  torch::Tensor g = comm->all_gather(torch::full({2, 3}, static_cast<double>(r), torch::kFloat64));
  REQUIRE(g.sizes() == torch::IntArrayRef({2 * n, 3}));
  for (int64_t k = 0; k < n; ++k) CHECK(g[2 * k][0].item<double>() == k);
  // Rank k contributes k rows (rank 0 none): a variable gather with an empty part.
  torch::Tensor v = comm->all_gather_v(torch::full({r, 2}, static_cast<int64_t>(r), torch::kInt64));
  CHECK(v.size(0) == n * (n - 1) / 2);
  torch::Tensor rs = comm->reduce_scatter(torch::arange(2 * n, torch::kFloat64));
  REQUIRE(rs.numel() == 2);
  CHECK(rs[0].item<double>() == 2.0 * r * n);
  torch::Tensor b = torch::full({4}, static_cast<double>(r + 10), torch::kFloat32);
  comm->broadcast(b, n - 1);
  CHECK(b[3].item<float>() == static_cast<float>(n - 1 + 10));
  comm->barrier();
}

TEST_CASE("all_to_all_v moves rows to their destination", "[mpi][communicator]") {
  auto comm = test::block_communicator(test::world_size());
  const int64_t r = comm->rank(), n = comm->size();
  // Rank r sends (d + 1) rows to rank d, each row holding (r, d).
  std::vector<int64_t> counts;
  std::vector<int64_t> rows;
  for (int64_t d = 0; d < n; ++d) {
    counts.push_back(d + 1);
    for (int64_t k = 0; k <= d; ++k) rows.insert(rows.end(), {r, d});
  }
  torch::Tensor send = torch::tensor(rows, torch::kInt64).view({-1, 2});
  std::vector<int64_t> recv_counts;
  torch::Tensor got = comm->all_to_all_v(send, counts, &recv_counts);
  CHECK(got.size(0) == n * (r + 1));
  for (int64_t s = 0; s < n; ++s) CHECK(recv_counts[s] == r + 1);
  CHECK((got.select(1, 1) == r).all().item<bool>());
  CHECK_THROWS_AS(comm->all_to_all_v(send, std::vector<int64_t>(n, 0), nullptr), std::invalid_argument);
}

TEST_CASE("a collective given a tensor on another device names both devices", "[mpi][communicator]") {
  auto comm = test::block_communicator(test::world_size());
  CHECK(comm->device() == torch::Device(torch::kCPU));
  torch::Tensor meta = torch::empty({4}, torch::TensorOptions().device(torch::kMeta));
  CHECK_THROWS_WITH(comm->all_reduce(meta), Catch::Contains("meta") && Catch::Contains("on cpu"));
  CHECK_THROWS_WITH(comm->broadcast(meta, 0), Catch::Contains("broadcast") && Catch::Contains("meta"));
  CHECK_THROWS_WITH(comm->all_gather(meta), Catch::Contains("all_gather") && Catch::Contains("meta"));
  CHECK_THROWS_WITH(comm->all_to_all_v(meta, std::vector<int64_t>(comm->size(), 0)), Catch::Contains("meta"));
  comm->barrier();  // every rank threw before any message: the group is still in step
}
