// See rank_runtime.h.
#include "core/run/rank_runtime.h"

#include "common/error.h"

namespace tandem {

torch::Dtype compute_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return torch::kFloat64;
    case DType::kBFloat16:
    case DType::kBFloat16Pure:
      return torch::kBFloat16;
    default:
      return torch::kFloat32;
  }
}

RankRuntime setup_rank_runtime(const RunConfig& run, int64_t local_rank, int64_t local_ranks) {
  RankRuntime r;
  if (run.device == Device::kCuda || (run.device == Device::kAuto && torch::cuda::is_available())) {
    if (!torch::cuda::is_available())
      throw UserError("run.device: cuda requested but no CUDA device is visible to this LibTorch build");
    r.device = torch::Device(torch::kCUDA, static_cast<int>(local_rank % torch::cuda::device_count()));
  }
  r.dtype = compute_dtype(run.dtype);
  r.master_weights = run.dtype == DType::kBFloat16;
  r.cpus = cpu_budget();
  const int64_t threads = run.threads > 0 ? run.threads : intra_op_threads(r.cpus, local_ranks);
  torch::set_num_threads(static_cast<int>(threads));
  return r;
}

}  // namespace tandem
