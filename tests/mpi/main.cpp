// Catch2 main for the MPI test binary: runs under real mpirun; every rank runs every test case,
// and a failing rank fails the whole job (non-zero exit from mpirun).
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "runtime/blas_kernel.h"
#include "runtime/host_memory.h"

int main(int argc, char** argv) {
  tandem::keep_freed_host_memory();
  tandem::reproducible_blas();
  MPI_Init(&argc, &argv);
  torch::set_num_threads(1);  // ranks share this machine's cores
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Catch::Session session;
  if (rank != 0) session.configData().outputFilename = "%debug";  // only rank 0 reports
  int rc = session.run(argc, argv);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
