// The device check every collective makes before touching a tensor (communicator.h).
#include "parallel/communicator.h"

#include <stdexcept>

namespace tandem::parallel {

void check_device(const Communicator& comm, const torch::Tensor& t, const char* what) {
  const torch::Device want = comm.device();
  const torch::Device got = t.device();
  if (got == want || (want.is_cpu() && got.is_cuda())) return;
  throw std::invalid_argument(comm.name() + " " + what + ": the tensor is on " + got.str() +
                              " but this communicator moves tensors on " + want.str() + "; move it there first");
}

}  // namespace tandem::parallel
