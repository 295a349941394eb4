// The training loop (DESIGN section 5): run directory, resume, the step over every enabled
// track (one optimizer update per mini-batch over all of them), metrics, checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/tracks/track.h"
#include "parallel/parallel_dims.h"

namespace tandem {

struct TrainOptions {
  std::string resume;       // "", "auto" or a checkpoint directory
  int64_t local_ranks = 1;  // ranks on this node (for the thread count)
  int64_t local_rank = 0;   // this rank on its node (for the CUDA device)
};

class Trainer {
 public:
  Trainer(Config config, const parallel::ParallelDims& dims, TrainerComms comms, TrainOptions options);
  ~Trainer();
  // 0 after the last step; kExitPreempted (stop_signal.h) after a stop signal and its checkpoint.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Run directory of a recipe: <run.out_dir>/<run.name>.
std::string run_directory(const Config& config);

// XXH64 of a resolved recipe's YAML as 16 hex digits: stable across builds and machines (what
// trainer_state.json records and a resume checks against the checkpoint's recipe.yaml).
std::string recipe_hash(const std::string& recipe_yaml);

}  // namespace tandem
