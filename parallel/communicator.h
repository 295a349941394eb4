// Collectives over LibTorch tensors behind one interface, so core/ never calls MPI or NCCL.
// MpiCommunicator moves CPU tensors; NcclCommunicator (built when CUDA + NCCL are found) moves
// CUDA tensors. Every collective is bounded by a timeout: past it the process reports which
// collective hung and exits non-zero, which makes the launcher take the whole job down.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel/process_groups.h"

namespace tandem::parallel {

enum class ReduceOp { kSum, kMax, kMin };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  virtual std::string name() const = 0;  // e.g. "mpi:dp"
  // Where the tensors it moves live: cpu for MPI (which also stages CUDA tensors through host
  // memory for parallel.backend: mpi on a GPU), the group's GPU for NCCL.
  virtual torch::Device device() const = 0;

  virtual void all_reduce(torch::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;  // in place
  // (n, ...) on every rank -> (size * n, ...), rank-major.
  virtual torch::Tensor all_gather(const torch::Tensor& t) = 0;
  // (n_r, ...) with n_r varying by rank -> (sum n_r, ...), rank-major.
  virtual torch::Tensor all_gather_v(const torch::Tensor& t) = 0;
  // (size * n, ...) -> (n, ...): this rank's slice of the reduction.
  virtual torch::Tensor reduce_scatter(const torch::Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  virtual void broadcast(torch::Tensor& t, int64_t root) = 0;  // in place; same shape everywhere
  // send (sum send_counts, ...) split along dim 0: rows [offset_r, offset_r + send_counts[r]) go to
  // rank r. Returns the received rows, rank-major, and their per-source counts.
  virtual torch::Tensor all_to_all_v(const torch::Tensor& send, const std::vector<int64_t>& send_counts,
                                     std::vector<int64_t>* recv_counts = nullptr) = 0;
  virtual void barrier() = 0;
};

// Throws std::invalid_argument naming the collective, the tensor's device and the communicator's
// when `t` is not on comm.device() (MPI: or on a CUDA device, which it stages).
void check_device(const Communicator& comm, const torch::Tensor& t, const char* what);

// The group of `axis` over MPI, with collectives bounded by timeout_s.
std::unique_ptr<Communicator> make_mpi_communicator(const ProcessGroups& groups, Axis axis, double timeout_s);
// A communicator over an arbitrary MPI communicator (duplicated; used by tests and benchmarks).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const std::string& name, double timeout_s);

// The group of `axis` over NCCL on CUDA device `cuda_device` (made current); the unique id is
// broadcast over MPI. Throws UserError when tandem was built without NCCL (see nccl_available()).
std::unique_ptr<Communicator> make_nccl_communicator(const ProcessGroups& groups, Axis axis, double timeout_s,
                                                     int cuda_device);

bool nccl_available();  // compiled with NCCL support
// The NCCL and CUDA runtime versions of the libraries loaded now ("2.28.9", "13.0"); "" without NCCL.
std::string nccl_version();
std::string cuda_runtime_version();

}  // namespace tandem::parallel
