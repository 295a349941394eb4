// Communicator over MPI for CPU tensors. Reductions run in the tensor's own dtype where MPI has
// one (bfloat16 / float16 go through float32); data movement is bytes. Every call checks its
// status and names file:line and MPI's error string; each is bounded by the watchdog.
#include <mpi.h>

#include <climits>
#include <numeric>
#include <stdexcept>

#include "parallel/communicator.h"
#include "parallel/watchdog.h"

namespace tandem::parallel {

namespace {

#define TANDEM_MPI_CHECK(call)                                                                         \
  do {                                                                                                 \
    const int rc_ = (call);                                                                            \
    if (rc_ != MPI_SUCCESS) {                                                                          \
      char msg_[MPI_MAX_ERROR_STRING];                                                                 \
      int len_ = 0;                                                                                    \
      MPI_Error_string(rc_, msg_, &len_);                                                              \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + \
                               " failed: " + std::string(msg_, len_));                                 \
    }                                                                                                  \
  } while (0)

MPI_Datatype reduce_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return MPI_FLOAT;
    case torch::kFloat64:
      return MPI_DOUBLE;
    case torch::kInt64:
      return MPI_INT64_T;
    case torch::kInt32:
      return MPI_INT32_T;
    case torch::kUInt8:
      return MPI_UINT8_T;
    case torch::kInt8:
      return MPI_INT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX)
    throw std::invalid_argument(std::string(what) + ": count " + std::to_string(n) +
                                " exceeds MPI's int range; split the tensor");
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  // The variable-size collectives move CPU tensors only (no staging: their users are host-side).
  void require_cpu(const torch::Tensor& t, const char* what) const {
    check_device(*this, t, what);
    if (!t.device().is_cpu())
      throw std::invalid_argument(name() + " " + what + ": the tensor is on " + t.device().str() +
                                  " but this collective moves tensors on cpu only; move it there first");
  }

  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s) : name_(std::move(name)), timeout_s_(timeout_s) {
    TANDEM_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
    TANDEM_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    int r = 0, s = 0;
    TANDEM_MPI_CHECK(MPI_Comm_rank(comm_, &r));
    TANDEM_MPI_CHECK(MPI_Comm_size(comm_, &s));
    rank_ = r, size_ = s;
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  std::string name() const override { return "mpi:" + name_; }
  torch::Device device() const override { return torch::kCPU; }

  void all_reduce(torch::Tensor& t, ReduceOp op) override {
    check_device(*this, t, "all_reduce");
    if (!t.device().is_cpu()) {  // backend mpi with a CUDA model: stage through host memory
      torch::Tensor host = t.to(torch::kCPU);
      all_reduce(host, op);
      t.copy_(host);
      return;
    }
    MPI_Datatype type = reduce_type(t.scalar_type());
    if (type == MPI_DATATYPE_NULL) {  // bfloat16 / half / bool: reduce a float32 copy
      torch::Tensor f = t.to(torch::kFloat32);
      all_reduce(f, op);
      t.copy_(f);
      return;
    }
    torch::Tensor c = t.is_contiguous() ? t : t.contiguous();
    WatchdogScope guard(name() + " all_reduce", timeout_s_);
    TANDEM_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, c.data_ptr(), to_int(c.numel(), "all_reduce"), type, mpi_op(op), comm_));
    if (!c.is_same(t)) t.copy_(c);
  }

  torch::Tensor all_gather(const torch::Tensor& t) override {
    require_cpu(t, "all_gather");
    torch::Tensor c = t.contiguous();
    std::vector<int64_t> shape = c.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= size_;
    torch::Tensor out = torch::empty(shape, c.options());
    const int bytes = to_int(c.numel() * c.element_size(), "all_gather");
    WatchdogScope guard(name() + " all_gather", timeout_s_);
    TANDEM_MPI_CHECK(MPI_Allgather(c.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, comm_));
    return out;
  }

  torch::Tensor all_gather_v(const torch::Tensor& t) override {
    require_cpu(t, "all_gather_v");
    torch::Tensor c = t.dim() == 0 ? t.reshape({1}).contiguous() : t.contiguous();
    torch::Tensor rows = torch::tensor({c.size(0)}, torch::kInt64);
    torch::Tensor all_rows = all_gather(rows);  // (size)
    const int64_t row_bytes =
        c.size(0) > 0 ? c.numel() / c.size(0) * c.element_size() : row_elems(c) * c.element_size();
    std::vector<int> counts(size_), displs(size_);
    int64_t total_rows = 0;
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t n = all_rows[r].item<int64_t>();
      counts[r] = to_int(n * row_bytes, "all_gather_v");
      displs[r] = to_int(total_rows * row_bytes, "all_gather_v");
      total_rows += n;
    }
    std::vector<int64_t> shape = c.sizes().vec();
    shape[0] = total_rows;
    torch::Tensor out = torch::empty(shape, c.options());
    WatchdogScope guard(name() + " all_gather_v", timeout_s_);
    TANDEM_MPI_CHECK(MPI_Allgatherv(c.data_ptr(), counts[rank_], MPI_BYTE, out.data_ptr(), counts.data(), displs.data(),
                                    MPI_BYTE, comm_));
    return out;
  }

  torch::Tensor reduce_scatter(const torch::Tensor& t, ReduceOp op) override {
    require_cpu(t, "reduce_scatter");
    if (t.dim() == 0 || t.size(0) % size_ != 0)
      throw std::invalid_argument("reduce_scatter: dim 0 must be a multiple of the group size");
    MPI_Datatype type = reduce_type(t.scalar_type());
    if (type == MPI_DATATYPE_NULL) return reduce_scatter(t.to(torch::kFloat32), op).to(t.scalar_type());
    torch::Tensor c = t.contiguous();
    std::vector<int64_t> shape = c.sizes().vec();
    shape[0] /= size_;
    torch::Tensor out = torch::empty(shape, c.options());
    WatchdogScope guard(name() + " reduce_scatter", timeout_s_);
    TANDEM_MPI_CHECK(MPI_Reduce_scatter_block(c.data_ptr(), out.data_ptr(), to_int(out.numel(), "reduce_scatter"), type,
                                              mpi_op(op), comm_));
    return out;
  }

  void broadcast(torch::Tensor& t, int64_t root) override {
    check_device(*this, t, "broadcast");
    if (!t.device().is_cpu()) {
      torch::Tensor host = t.to(torch::kCPU);
      broadcast(host, root);
      t.copy_(host);
      return;
    }
    torch::Tensor c = t.is_contiguous() ? t : t.contiguous();
    WatchdogScope guard(name() + " broadcast", timeout_s_);
    TANDEM_MPI_CHECK(MPI_Bcast(c.data_ptr(), to_int(c.numel() * c.element_size(), "broadcast"), MPI_BYTE,
                               static_cast<int>(root), comm_));
    if (!c.is_same(t)) t.copy_(c);
  }

  torch::Tensor all_to_all_v(const torch::Tensor& send, const std::vector<int64_t>& send_counts,
                             std::vector<int64_t>* recv_counts) override {
    require_cpu(send, "all_to_all_v");
    if (static_cast<int64_t>(send_counts.size()) != size_)
      throw std::invalid_argument("all_to_all_v: need one send count per rank");
    torch::Tensor c = send.contiguous();
    const int64_t total = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
    if (c.dim() == 0 || c.size(0) != total)
      throw std::invalid_argument("all_to_all_v: send has " + std::to_string(c.dim() ? c.size(0) : 0) +
                                  " rows but send_counts add to " + std::to_string(total));
    torch::Tensor counts = torch::tensor(send_counts, torch::kInt64);
    torch::Tensor incoming = all_to_all_counts(counts);  // (size): rows each rank sends me
    const int64_t row_bytes = row_elems(c) * c.element_size();
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    int64_t s_off = 0, r_off = 0;
    std::vector<int64_t> recv(size_);
    for (int64_t r = 0; r < size_; ++r) {
      recv[r] = incoming[r].item<int64_t>();
      sc[r] = to_int(send_counts[r] * row_bytes, "all_to_all_v");
      sd[r] = to_int(s_off * row_bytes, "all_to_all_v");
      rc[r] = to_int(recv[r] * row_bytes, "all_to_all_v");
      rd[r] = to_int(r_off * row_bytes, "all_to_all_v");
      s_off += send_counts[r];
      r_off += recv[r];
    }
    std::vector<int64_t> shape = c.sizes().vec();
    shape[0] = r_off;
    torch::Tensor out = torch::empty(shape, c.options());
    {
      WatchdogScope guard(name() + " all_to_all_v", timeout_s_);
      TANDEM_MPI_CHECK(MPI_Alltoallv(c.data_ptr(), sc.data(), sd.data(), MPI_BYTE, out.data_ptr(), rc.data(), rd.data(),
                                     MPI_BYTE, comm_));
    }
    if (recv_counts) *recv_counts = recv;
    return out;
  }

  void barrier() override {
    WatchdogScope guard(name() + " barrier", timeout_s_);
    TANDEM_MPI_CHECK(MPI_Barrier(comm_));
  }

 private:
  static int64_t row_elems(const torch::Tensor& t) {
    int64_t n = 1;
    for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
    return n;
  }
  torch::Tensor all_to_all_counts(const torch::Tensor& counts) {
    torch::Tensor out = torch::empty_like(counts);
    WatchdogScope guard(name() + " all_to_all counts", timeout_s_);
    TANDEM_MPI_CHECK(MPI_Alltoall(counts.data_ptr(), 1, MPI_INT64_T, out.data_ptr(), 1, MPI_INT64_T, comm_));
    return out;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  double timeout_s_;
  int64_t rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const std::string& name, double timeout_s) {
  return std::make_unique<MpiCommunicator>(comm, name, timeout_s);
}

std::unique_ptr<Communicator> make_mpi_communicator(const ProcessGroups& groups, Axis axis, double timeout_s) {
  static const char* kNames[] = {"world", "dp", "cp", "tp", "dp_cp"};
  return make_mpi_communicator(groups.comm(axis), kNames[static_cast<int>(axis)], timeout_s);
}

}  // namespace tandem::parallel
