// Fault-injection program for tests/mpi/check_faults.sh: ranks loop on all_reduce with a short
// timeout while one rank is killed, hangs, or throws; the job must end non-zero, never hang.
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "parallel/communicator.h"
#include "parallel/runtime.h"

int main(int argc, char** argv) {
  tandem::parallel::MpiRuntime mpi(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "kill";
  const std::string dir = argc > 2 ? argv[2] : "/tmp";
  const double timeout_s = argc > 3 ? std::stod(argv[3]) : 5.0;
  std::ofstream(dir + "/pid." + std::to_string(mpi.rank())) << getpid() << "\n";
  try {
    auto comm = tandem::parallel::make_mpi_communicator(MPI_COMM_WORLD, "world", timeout_s);
    torch::Tensor t = torch::ones({1 << 16});
    for (int64_t it = 0;; ++it) {
      if (it == 20 && mpi.rank() == 1) {
        if (mode == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
        if (mode == "throw") throw std::runtime_error("injected failure on rank 1");
      }
      comm->all_reduce(t);
      t.fill_(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: error: rank %d: %s\n", mpi.rank(), e.what());
    tandem::parallel::MpiRuntime::abort_job(1);
  }
}
