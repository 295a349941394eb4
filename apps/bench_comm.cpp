// `tandem bench comm` (under mpirun): all-reduce bandwidth of the tensor path
// (MpiCommunicator::all_reduce on a torch::Tensor) beside raw MPI_Allreduce on a plain buffer,
// interleaved per iteration so both see the same machine noise. Prints one JSON line per size.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/bench_util.h"
#include "apps/commands.h"
#include "parallel/communicator.h"

namespace tandem::app {

int run_bench_comm(const BenchCommArgs& a, int rank, int world) {
  auto comm = parallel::make_mpi_communicator(MPI_COMM_WORLD, "world", 600.0);
  for (int64_t mib = a.min_mib; mib <= a.max_mib; mib *= 4) {
    const int64_t n = mib * (1 << 20) / 4;  // float32 elements
    torch::Tensor t = torch::ones({n}, torch::kFloat32);
    std::vector<float> raw(static_cast<size_t>(n), 1.0f);
    const int iters = std::max<int>(3, static_cast<int>(a.iters * 16 / std::max<int64_t>(mib, 16)));
    std::vector<double> tensor_s, raw_s;
    auto time_tensor = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      comm->all_reduce(t);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    auto time_raw = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int it = -1; it < iters; ++it) {  // it = -1: warm-up; the order alternates so neither path
      double dt_tensor, dt_raw;            // always runs second (warmer caches)
      if (it % 2 == 0)
        dt_tensor = time_tensor(), dt_raw = time_raw();
      else
        dt_raw = time_raw(), dt_tensor = time_tensor();
      if (it >= 0) tensor_s.push_back(dt_tensor), raw_s.push_back(dt_raw);
      t.fill_(1), std::fill(raw.begin(), raw.end(), 1.0f);  // keep values finite and equal
    }
    // Bus bandwidth: what each rank moves in a ring all-reduce, 2 (n-1)/n times the buffer.
    const double bytes = static_cast<double>(n) * 4.0;
    const double bus = world > 1 ? 2.0 * (world - 1) / world : 1.0;
    const double gbs_tensor = bytes * bus / median(tensor_s) / 1e9, gbs_raw = bytes * bus / median(raw_s) / 1e9;
    if (rank == 0) {
      nlohmann::json out;
      out["ranks"] = world;
      out["mib"] = mib;
      out["iters"] = iters;
      out["tensor_busbw_gbs"] = gbs_tensor;
      out["raw_mpi_busbw_gbs"] = gbs_raw;
      out["tensor_over_raw"] = gbs_tensor / gbs_raw;
      std::cout << out.dump() << std::endl;
    }
  }
  return 0;
}

}  // namespace tandem::app
