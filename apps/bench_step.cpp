// `tandem bench step --track ar|image`: one track's training throughput at micro sizes 1, 2, 4,
// 8 side by side (same rollout, same weights): image samples/s, AR tokens/s. This is what
// per-track micro geometry buys: each track can run at its own best size.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/bench_util.h"
#include "apps/commands.h"
#include "common/error.h"
#include "core/ar_track.h"
#include "core/blas_kernel.h"
#include "core/image_track.h"
#include "parallel/process_groups.h"
#include "parallel/runtime.h"

namespace tandem::app {


int run_bench_step(const BenchStepArgs& a, int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  if (mpi.size() != 1) throw UserError("bench step runs on one process (no mpirun)");
  if (a.track != "ar" && a.track != "image") throw UserError("--track must be ar or image");
  Config config = load_config(a.config_path, a.overrides);
  config.tracks.ar.enabled = a.track == "ar";
  config.tracks.image.enabled = a.track == "image";
  config.tracks.ar.warmstart.steps = 0;
  config.tracks.image.pretrain.steps = 0;
  config.tracks.image.pretrain.path.reset();
  config.train.num_mini_batches = 1;
  torch::set_num_threads(a.threads);
  const auto dims = parallel::ParallelDims::resolve(1, 1, 1, 1);
  parallel::ProcessGroups groups(MPI_COMM_WORLD, dims);
  auto comm = parallel::make_mpi_communicator(groups, parallel::Axis::kWorld, 600);
  TrainerComms comms{comm.get(), comm.get(), comm.get(), comm.get(), comm.get(), comm.get(), comm.get(), comm.get()};
  nlohmann::json out;
  out["track"] = a.track;
  out["threads"] = torch::get_num_threads();
  out["blas"] = blas_description();
  out["gemm_gflops"] = gemm_gflops();
  for (int64_t mbs : {1, 2, 4, 8}) {
    Config c = config;
    c.train.micro_batch_size = mbs;
    c.train.max_tokens_per_micro.reset();
    c.tracks.ar.micro_batch_size = c.tracks.image.micro_batch_size = mbs;
    c.tracks.ar.max_tokens_per_micro.reset();
    c.tracks.image.max_tokens_per_micro.reset();
    std::unique_ptr<Track> track;
    if (a.track == "ar") track = std::make_unique<ArTrack>(c, comms, torch::kCPU, torch::kFloat32);
    else track = std::make_unique<ImageTrack>(c, comms, torch::kCPU, torch::kFloat32);
    MetricMap m;
    track->prepare(0, m);  // the same rollout for every size: same seed, same initial weights
    std::vector<double> times;
    for (int rep = 0; rep < a.repeats; ++rep) {
      MetricMap mm;
      const auto t0 = std::chrono::steady_clock::now();
      track->accumulate(0, 1.0, mm);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (auto& p : track->parameters()) p.mutable_grad() = torch::Tensor();
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    MetricMap fm;
    track->finish(fm);
    const std::string key = "micro_" + std::to_string(mbs);
    if (a.track == "ar") out[key]["tokens_per_s"] = fm["train/action_tokens"] / a.repeats / t;
    else out[key]["samples_per_s"] = static_cast<double>(c.tracks.image.rollout.prompts_per_step *
                                                      c.tracks.image.rollout.group_size) / t;
    out[key]["seconds"] = t;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace tandem::app
