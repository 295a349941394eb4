// `tandem bench step --track ar|image`: one track's training throughput at micro sizes 1, 2, 4,
// 8 side by side (same rollout, same weights): image samples/s, AR tokens/s. This is what
// per-track micro geometry buys: each track can run at its own best size. --track shared times
// both tracks of one unified model (a recipe with tracks.image.model.arch shared) and reports the
// step time with each track at its own best size against the best single size for both.
#include <chrono>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/bench_util.h"
#include "apps/commands.h"
#include "common/error.h"
#include "core/tracks/ar_track.h"
#include "core/tracks/image_track.h"
#include "parallel/process_groups.h"
#include "parallel/runtime.h"
#include "runtime/blas_kernel.h"
#include "runtime/host_memory.h"
#include "runtime/peak_memory.h"

namespace tandem::app {

int run_bench_step(const BenchStepArgs& a, int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  if (mpi.size() != 1) throw UserError("bench step runs on one process (no mpirun)");
  if (a.track != "ar" && a.track != "image" && a.track != "shared")
    throw UserError("--track must be ar, image or shared");
  Config config = load_config(a.config_path, a.overrides);
  const bool shared = a.track == "shared";
  if (shared && config.tracks.image.model.arch != ImageArch::kShared)
    throw UserError("--track shared needs a recipe with tracks.image.model.arch: shared (e.g. configs/shared.yaml)");
  config.tracks.ar.enabled = a.track == "ar" || shared || config.tracks.image.model.arch == ImageArch::kShared;
  config.tracks.image.enabled = a.track == "image" || shared;
  validate(config, 1);
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
  out["host_memory"] = host_memory_description();
  out["gemm_gflops"] = gemm_gflops();
  // Median seconds of `repeats` accumulate() calls of one prepared track, after one untimed call
  // that measures the peak tensor memory of its micros (they run one after the other).
  auto time_track = [&](Track& track, MetricMap& fm, double& peak_mib) {
    {
      PeakMemoryScope scope;
      MetricMap mm;
      track.accumulate(0, 1.0, mm);
      peak_mib = static_cast<double>(scope.peak_bytes()) / (1 << 20);
      for (auto& p : track.parameters()) p.mutable_grad() = torch::Tensor();
    }
    std::vector<double> times;
    for (int rep = 0; rep < a.repeats; ++rep) {
      MetricMap mm;
      const auto t0 = std::chrono::steady_clock::now();
      track.accumulate(0, 1.0, mm);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (auto& p : track.parameters()) p.mutable_grad() = torch::Tensor();
    }
    std::sort(times.begin(), times.end());
    track.finish(fm);
    return times[times.size() / 2];
  };
  const double image_samples =
      static_cast<double>(config.tracks.image.rollout.prompts_per_step * config.tracks.image.rollout.group_size);
  struct Cell {
    double seconds = 0, peak_mib = 0;
  };
  std::map<int64_t, std::pair<Cell, Cell>> cells;  // micro size -> (ar, image)
  const std::vector<int64_t> sizes =
      shared ? std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64} : std::vector<int64_t>{1, 2, 4, 8};
  for (int64_t mbs : sizes) {
    Config c = config;
    c.train.micro_batch_size = mbs;
    c.train.max_tokens_per_micro.reset();
    c.tracks.ar.micro_batch_size = c.tracks.image.micro_batch_size = mbs;
    c.tracks.ar.max_tokens_per_micro.reset();
    c.tracks.image.max_tokens_per_micro.reset();
    const std::string key = "micro_" + std::to_string(mbs);
    // The same rollout for every size: same seed, same initial weights.
    std::unique_ptr<ArTrack> ar;
    if (c.tracks.ar.enabled) ar = std::make_unique<ArTrack>(c, comms, torch::kCPU, torch::kFloat32);
    std::unique_ptr<ImageTrack> image;
    const bool on_shared_model = c.tracks.image.model.arch == ImageArch::kShared;
    if (c.tracks.image.enabled)
      image = std::make_unique<ImageTrack>(c, comms, torch::kCPU, torch::kFloat32,
                                           on_shared_model ? ar->unified_model() : models::UnifiedModel{nullptr},
                                           on_shared_model ? &ar->tokenizer() : nullptr);
    MetricMap m, fm_ar, fm_image;
    if (a.track != "image") ar->prepare(0, m);
    if (a.track != "ar") image->prepare(0, m);
    if (a.track != "image") {
      Cell& c = cells[mbs].first;
      c.seconds = time_track(*ar, fm_ar, c.peak_mib);
      out[key][shared ? "ar_tokens_per_s" : "tokens_per_s"] =
          fm_ar["train/action_tokens"] / (a.repeats + 1) / c.seconds;
      out[key][shared ? "ar_seconds" : "seconds"] = c.seconds;
      out[key][shared ? "ar_peak_mib" : "peak_mib"] = c.peak_mib;
    }
    if (a.track != "ar") {
      Cell& c = cells[mbs].second;
      c.seconds = time_track(*image, fm_image, c.peak_mib);
      out[key][shared ? "image_samples_per_s" : "samples_per_s"] = image_samples / c.seconds;
      out[key][shared ? "image_seconds" : "seconds"] = c.seconds;
      out[key][shared ? "image_peak_mib" : "peak_mib"] = c.peak_mib;
    }
  }
  if (shared) {
    // Under a per-micro memory budget (the peak tensor memory of a track's micros): the best one
    // micro size for both tracks against each track at its own best size. Without a budget
    // every size is allowed.
    const double budget = a.memory_budget_mib > 0 ? a.memory_budget_mib : std::numeric_limits<double>::infinity();
    std::optional<int64_t> common, best_ar, best_image;
    for (const auto& [mbs, c] : cells) {
      const bool ar_fits = c.first.peak_mib <= budget, image_fits = c.second.peak_mib <= budget;
      if (ar_fits && image_fits &&
          (!common ||
           c.first.seconds + c.second.seconds < cells[*common].first.seconds + cells[*common].second.seconds))
        common = mbs;
      if (ar_fits && (!best_ar || c.first.seconds < cells[*best_ar].first.seconds)) best_ar = mbs;
      if (image_fits && (!best_image || c.second.seconds < cells[*best_image].second.seconds)) best_image = mbs;
    }
    if (!common || !best_ar || !best_image)
      throw UserError("--memory-budget-mib " + std::to_string(a.memory_budget_mib) +
                      ": no micro size fits it for both tracks; raise it (see the *_peak_mib figures)");
    const double one = cells[*common].first.seconds + cells[*common].second.seconds;
    const double own = cells[*best_ar].first.seconds + cells[*best_image].second.seconds;
    out["memory_budget_mib"] = a.memory_budget_mib > 0 ? nlohmann::json(a.memory_budget_mib) : nlohmann::json();
    out["one_micro_size"] = {{"micro_batch_size", *common}, {"seconds", one}};
    out["per_track"] = {{"ar_micro_batch_size", *best_ar}, {"image_micro_batch_size", *best_image}, {"seconds", own}};
    out["per_track_speedup"] = one / own;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace tandem::app
