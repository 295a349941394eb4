// Helpers for MPI tests: communicators over sub-groups of the world, and checks that hold on
// every rank.
#pragma once

#include <mpi.h>

#include <memory>

#include "parallel/communicator.h"
#include "parallel/parallel_context.h"
#include "parallel/process_groups.h"

namespace tandem::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Splits the world into consecutive blocks of `size` ranks; returns this rank's block.
inline MPI_Comm block_comm(int size) {
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() / size, world_rank() % size, &c);
  return c;
}

inline std::unique_ptr<parallel::Communicator> block_communicator(int size, double timeout_s = 60) {
  MPI_Comm c = block_comm(size);
  auto comm = parallel::make_mpi_communicator(c, "block" + std::to_string(size), timeout_s);
  MPI_Comm_free(&c);
  return comm;
}

struct Layout {
  int64_t tp = 1, cp = 1;
};

// Communicators of one {dp, cp, tp} layout over the whole world, and the model's context.
struct Groups {
  std::unique_ptr<parallel::ProcessGroups> groups;
  std::unique_ptr<parallel::Communicator> tp, cp;
  parallel::ParallelContext ctx;
  explicit Groups(Layout l) {
    const auto dims = parallel::ParallelDims::resolve(-1, l.cp, l.tp, world_size());
    groups = std::make_unique<parallel::ProcessGroups>(MPI_COMM_WORLD, dims);
    tp = parallel::make_mpi_communicator(*groups, parallel::Axis::kTp, 60);
    cp = parallel::make_mpi_communicator(*groups, parallel::Axis::kCp, 60);
    ctx = parallel::ParallelContext::from(tp.get(), cp.get());
  }
};

}  // namespace tandem::test
