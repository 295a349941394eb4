// MPI lifetime. The node-local rank comes from a shared-memory split, which works under mpirun
// and srun alike without trusting launcher-specific environment variables.
#include "parallel/runtime.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace tandem::parallel {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiRuntime::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int MpiRuntime::first_failed_rank(bool failed) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // min over ranks of (failed ? rank : size)
  int key = failed ? rank : size, lowest = size;
  MPI_Allreduce(&key, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return lowest < size ? lowest : -1;
}

}  // namespace tandem::parallel
