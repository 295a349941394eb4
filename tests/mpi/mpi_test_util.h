// Helpers for MPI tests: communicators over sub-groups of the world, and checks that hold on
// every rank.
#pragma once

#include <mpi.h>

#include <memory>

#include "parallel/communicator.h"

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

}  // namespace tandem::test
