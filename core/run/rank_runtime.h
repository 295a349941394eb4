// run.device, run.dtype and run.threads resolved for one rank, in one place, so train ranks and
// rollout ranks pick devices, dtypes and thread counts the same way.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "core/config/config.h"
#include "runtime/cpu_threads.h"

namespace tandem {

struct RankRuntime {
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;  // the compute dtype of the models
  bool master_weights = false;           // run.dtype bfloat16: float32 master weights and optimizer state
  CpuBudget cpus;                        // what the thread count was derived from (for the start-up log)
};

// The dtype models compute in: bfloat16 for both bfloat16 modes.
torch::Dtype compute_dtype(DType dtype);

// Picks the device (cuda:local_rank mod devices under auto / cuda; UserError when cuda is asked
// for and none is visible) and the dtype, and sets the intra-op thread count deliberately: under
// mpirun LibTorch would start one thread per rank (or per core). With OpenBLAS's OpenMP build this
// also sizes the BLAS pool (it follows omp_get_max_threads).
RankRuntime setup_rank_runtime(const RunConfig& run, int64_t local_rank, int64_t local_ranks);

}  // namespace tandem
