// Communicator over NCCL for CUDA tensors: one NCCL communicator per group, the unique id
// broadcast over the group's MPI communicator, counts for the variable-size collectives exchanged
// over MPI. Each collective runs on the caller's current CUDA stream (c10's), so it is ordered
// after the kernels that produced its input and before those that read its output, whatever
// stream guard is active; the call returns without waiting. A monitor thread per communicator
// watches an event recorded after each collective: past parallel.timeout_s, or on an NCCL async
// error, it aborts the communicator, says which collective hung and exits the process non-zero.
// Compiled only when a CUDA LibTorch and NCCL are found (TANDEM_WITH_NCCL).
#ifdef TANDEM_WITH_NCCL

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "parallel/communicator.h"
#include "parallel/watchdog.h"

namespace tandem::parallel {

namespace {

#define TANDEM_CUDA_CHECK(call)                                                                        \
  do {                                                                                                 \
    const cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess)                                                                             \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + \
                               " failed: " + cudaGetErrorString(e_));                                  \
  } while (0)

#define TANDEM_NCCL_CHECK(call)                                                                        \
  do {                                                                                                 \
    const ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess)                                                                             \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + \
                               " failed: " + ncclGetErrorString(r_));                                  \
  } while (0)

#define TANDEM_MPI_OK(call)                                                                                      \
  do {                                                                                                           \
    if ((call) != MPI_SUCCESS)                                                                                   \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call " failed"); \
  } while (0)

ncclDataType_t nccl_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return ncclFloat32;
    case torch::kFloat64:
      return ncclFloat64;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kInt64:
      return ncclInt64;
    case torch::kInt32:
      return ncclInt32;
    case torch::kUInt8:
      return ncclUint8;
    case torch::kInt8:
      return ncclInt8;
    default:
      throw std::invalid_argument("NcclCommunicator: unsupported dtype");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

int64_t row_elems(const torch::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm mpi, std::string name, double timeout_s, int cuda_device)
      : name_(std::move(name)), timeout_s_(timeout_s) {
    TANDEM_CUDA_CHECK(cudaSetDevice(cuda_device));
    TANDEM_MPI_OK(MPI_Comm_dup(mpi, &mpi_));
    int r = 0, s = 0;
    TANDEM_MPI_OK(MPI_Comm_rank(mpi_, &r));
    TANDEM_MPI_OK(MPI_Comm_size(mpi_, &s));
    rank_ = r, size_ = s;
    ncclUniqueId id;
    if (rank_ == 0) TANDEM_NCCL_CHECK(ncclGetUniqueId(&id));
    {
      WatchdogScope guard(this->name() + " unique id broadcast", timeout_s_);
      TANDEM_MPI_OK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_));
    }
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
    {
      WatchdogScope guard(this->name() + " ncclCommInitRank", timeout_s_);
      TANDEM_NCCL_CHECK(ncclCommInitRank(&comm_, s, id, r));
    }
    monitor_ = std::thread([this] { monitor(); });
  }
  ~NcclCommunicator() override {
    // Unwinding an error: a collective this rank launched may never be matched by its peers, so
    // waiting for it would end in the deadline's misleading "a peer died". Abort instead, so the
    // error itself is what gets reported.
    if (std::uncaught_exceptions() > 0 && comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      std::lock_guard<std::mutex> lock(mu_);
      for (const Pending& p : pending_) cudaEventDestroy(p.done);
      pending_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (monitor_.joinable()) monitor_.join();  // after every pending collective completed
    if (comm_) ncclCommDestroy(comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&mpi_);
  }
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  std::string name() const override { return "nccl:" + name_; }
  torch::Device device() const override { return device_; }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    torch::Tensor c = cuda_contiguous(t, "all_reduce");
    TANDEM_NCCL_CHECK(
        ncclAllReduce(c.data_ptr(), c.data_ptr(), c.numel(), nccl_type(c.scalar_type()), nccl_op(op), comm_, stream()));
    launched("all_reduce");
    if (!c.is_same(t)) t.copy_(c);
  }

  torch::Tensor all_gather(const torch::Tensor& t) override {
    torch::Tensor c = cuda_contiguous(t, "all_gather");
    std::vector<int64_t> shape = c.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= size_;
    torch::Tensor out = torch::empty(shape, c.options());
    TANDEM_NCCL_CHECK(
        ncclAllGather(c.data_ptr(), out.data_ptr(), c.numel() * c.element_size(), ncclUint8, comm_, stream()));
    launched("all_gather");
    return out;
  }

  torch::Tensor all_gather_v(const torch::Tensor& t) override {
    torch::Tensor c = cuda_contiguous(t.dim() == 0 ? t.reshape({1}) : t, "all_gather_v");
    std::vector<int64_t> rows(size_);
    int64_t mine = c.size(0);
    {
      WatchdogScope guard(name() + " all_gather_v counts", timeout_s_);
      TANDEM_MPI_OK(MPI_Allgather(&mine, 1, MPI_INT64_T, rows.data(), 1, MPI_INT64_T, mpi_));
    }
    const int64_t row_bytes = row_elems(c) * c.element_size();
    std::vector<int64_t> shape = c.sizes().vec();
    shape[0] = std::accumulate(rows.begin(), rows.end(), int64_t{0});
    torch::Tensor out = torch::empty(shape, c.options());
    auto* base = static_cast<uint8_t*>(out.data_ptr());
    TANDEM_NCCL_CHECK(ncclGroupStart());
    int64_t off = 0;
    for (int64_t r = 0; r < size_; ++r) {  // a broadcast rooted at each rank: NCCL has no allgatherv
      TANDEM_NCCL_CHECK(ncclBroadcast(r == rank_ ? c.data_ptr() : nullptr, base + off * row_bytes, rows[r] * row_bytes,
                                      ncclUint8, static_cast<int>(r), comm_, stream()));
      off += rows[r];
    }
    TANDEM_NCCL_CHECK(ncclGroupEnd());
    launched("all_gather_v");
    return out;
  }

  torch::Tensor reduce_scatter(const torch::Tensor& t, ReduceOp op) override {
    torch::Tensor c = cuda_contiguous(t, "reduce_scatter");
    if (c.dim() == 0 || c.size(0) % size_ != 0)
      throw std::invalid_argument("reduce_scatter: dim 0 must be a multiple of the group size");
    std::vector<int64_t> shape = c.sizes().vec();
    shape[0] /= size_;
    torch::Tensor out = torch::empty(shape, c.options());
    TANDEM_NCCL_CHECK(ncclReduceScatter(c.data_ptr(), out.data_ptr(), out.numel(), nccl_type(c.scalar_type()),
                                        nccl_op(op), comm_, stream()));
    launched("reduce_scatter");
    return out;
  }

  void broadcast(torch::Tensor& t, int64_t root) override {
    torch::Tensor c = cuda_contiguous(t, "broadcast");
    TANDEM_NCCL_CHECK(ncclBroadcast(c.data_ptr(), c.data_ptr(), c.numel() * c.element_size(), ncclUint8,
                                    static_cast<int>(root), comm_, stream()));
    launched("broadcast");
    if (!c.is_same(t)) t.copy_(c);
  }

  torch::Tensor all_to_all_v(const torch::Tensor& send, const std::vector<int64_t>& send_counts,
                             std::vector<int64_t>* recv_counts) override {
    torch::Tensor c = cuda_contiguous(send, "all_to_all_v");
    if (static_cast<int64_t>(send_counts.size()) != size_)
      throw std::invalid_argument("all_to_all_v: need one send count per rank");
    std::vector<int64_t> recv(size_);
    {
      WatchdogScope guard(name() + " all_to_all_v counts", timeout_s_);
      TANDEM_MPI_OK(MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, recv.data(), 1, MPI_INT64_T, mpi_));
    }
    const int64_t row_bytes = row_elems(c) * c.element_size();
    std::vector<int64_t> shape = c.sizes().vec();
    shape[0] = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    torch::Tensor out = torch::empty(shape, c.options());
    auto* sbase = static_cast<uint8_t*>(c.data_ptr());
    auto* rbase = static_cast<uint8_t*>(out.data_ptr());
    int64_t s_off = 0, r_off = 0;
    TANDEM_NCCL_CHECK(ncclGroupStart());  // variable all-to-all as grouped point-to-point
    for (int64_t r = 0; r < size_; ++r) {
      if (send_counts[r] > 0)
        TANDEM_NCCL_CHECK(ncclSend(sbase + s_off * row_bytes, send_counts[r] * row_bytes, ncclUint8,
                                   static_cast<int>(r), comm_, stream()));
      if (recv[r] > 0)
        TANDEM_NCCL_CHECK(
            ncclRecv(rbase + r_off * row_bytes, recv[r] * row_bytes, ncclUint8, static_cast<int>(r), comm_, stream()));
      s_off += send_counts[r];
      r_off += recv[r];
    }
    TANDEM_NCCL_CHECK(ncclGroupEnd());
    launched("all_to_all_v");
    if (recv_counts) *recv_counts = recv;
    return out;
  }

  void barrier() override {
    WatchdogScope guard(name() + " barrier", timeout_s_);
    TANDEM_MPI_OK(MPI_Barrier(mpi_));
  }

 private:
  torch::Tensor cuda_contiguous(const torch::Tensor& t, const char* what) {
    check_device(*this, t, what);
    return t.is_contiguous() ? t : t.contiguous();
  }

  // The caller's current stream on this communicator's device: the collective is one more kernel
  // in its order (the caching allocator's stream for every tensor made here, too).
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(device_.index()).stream(); }

  // Records an event after the collective just enqueued and hands it to the monitor thread.
  void launched(const char* what) {
    cudaEvent_t done = nullptr;
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventRecord(done, stream()));
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s_));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back({done, deadline, what});
    }
    wake_.notify_all();
  }

  // Sleeps while nothing is pending; otherwise checks the oldest collective every 1 ms (one
  // thread, whatever the number of calls; the callers never wait on it), and past its deadline,
  // or on an async error, aborts. The deadline counts from the launch, so work queued before the
  // collective counts too: parallel.timeout_s must exceed a step's longest kernel queue.
  void monitor() {
    cudaSetDevice(device_.index());  // this thread's own current device: the events' and the communicator's
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing left
      const Pending p = pending_.front();
      lock.unlock();
      const cudaError_t q = cudaEventQuery(p.done);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess || (q != cudaSuccess && q != cudaErrorNotReady)) {
        const std::string why = async != ncclSuccess ? std::string("NCCL async error: ") + ncclGetErrorString(async)
                                                     : std::string("CUDA error: ") + cudaGetErrorString(q);
        std::fprintf(stderr, "tandem: error: collective '%s %s' failed: %s; exiting so the launcher stops the job\n",
                     name().c_str(), p.what, why.c_str());
        std::fflush(stderr);
        ncclCommAbort(comm_);
        std::_Exit(1);
      }
      if (q == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() > p.deadline) {
          std::fprintf(stderr,
                       "tandem: error: collective '%s %s' did not complete within parallel.timeout_s=%.1f s (a peer "
                       "rank died or hangs); exiting so the launcher stops the job\n",
                       name().c_str(), p.what, timeout_s_);
          std::fflush(stderr);
          ncclCommAbort(comm_);
          std::_Exit(kTimeoutExitCode);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lock.lock();
        continue;
      }
      cudaEventDestroy(p.done);
      lock.lock();
      pending_.pop_front();
    }
  }

  struct Pending {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point deadline;
    const char* what;  // a literal
  };

  MPI_Comm mpi_ = MPI_COMM_NULL;
  ncclComm_t comm_ = nullptr;
  torch::Device device_{torch::kCUDA, 0};
  std::mutex mu_;  // guards pending_ and stopping_
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::thread monitor_;
  std::string name_;
  double timeout_s_;
  int64_t rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const ProcessGroups& groups, Axis axis, double timeout_s,
                                                     int cuda_device) {
  static const char* kNames[] = {"world", "dp", "cp", "tp", "dp_cp"};
  return std::make_unique<NcclCommunicator>(groups.comm(axis), kNames[static_cast<int>(axis)], timeout_s, cuda_device);
}

bool nccl_available() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace tandem::parallel

#else  // built without CUDA + NCCL

#include "common/error.h"
#include "parallel/communicator.h"

namespace tandem::parallel {

std::unique_ptr<Communicator> make_nccl_communicator(const ProcessGroups&, Axis, double, int) {
  throw UserError(
      "parallel.backend: this tandem was built without NCCL (CUDA toolkit + NCCL not found at build "
      "time); use parallel.backend: mpi or rebuild with CUDA");
}

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }
std::string cuda_runtime_version() { return ""; }

}  // namespace tandem::parallel

#endif  // TANDEM_WITH_NCCL
