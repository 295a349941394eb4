// train.overlap: the AR step mini-batch by mini-batch. While the sampler generates mini-batch
// c + 1's groups on this thread, a second thread computes mini-batch c's old (and reference)
// log-probs. A mini-batch is a contiguous slice of the step's groups (build_schedule), so
// scheduling each slice alone with one mini-batch gives exactly the whole step's schedule: the
// same micros, layouts and denominators, hence the same numbers as train.overlap: false.
// Only this thread calls collectives; the worker thread runs forwards and nothing else. On CUDA
// (a LibTorch with c10_cuda) the worker's kernels go to a second stream from the pool: it first
// waits on an event recorded on this thread's stream when the worker starts (so the previous
// optimizer step and every upload before it are done), it is synchronized before the join, and
// its results are recorded on this thread's stream, which frees them (else the caching allocator
// could hand their blocks to the pool stream while this stream still reads them).
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include "core/batch/step_plan.h"
#include "core/tracks/ar_track.h"
#include "runtime/timing.h"

#include <c10/core/Event.h>

#if defined(TANDEM_WITH_TORCH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem {

struct ArTrack::Chunk {
  RolloutDirectory directory;
  Schedule schedule;  // one mini-batch
  std::vector<ArSample> mine;
  std::vector<std::vector<torch::Tensor>> old_logp, ref_logp;  // [0][micro] (N)
  double entropy[2] = {0, 0};
  double old_s = 0, ref_s = 0;
};

std::vector<ArSample> ArTrack::prepare_overlapped(int64_t step, MetricMap& metrics) {
  const ArTrackConfig& ar = config_.tracks.ar;
  const int64_t minis = config_.train.num_mini_batches;
  const int64_t per_mini = ar.rollout.prompts_per_step / minis;  // validated to divide
  const auto shard = tasks::next_step_shard(*prompts_, ar.rollout.prompts_per_step, dp_rank_, dp_size_);
  ScheduleOptions one = schedule_options();
  one.num_mini_batches = 1;

  // The forward thread runs on as many threads as training does, not on a share of them: BLAS and
  // LibTorch's reductions partition their sums by thread count, and the old log-probs must be the
  // training forward's to the bit (first ratio exactly 1). The sampler runs on the same count:
  // OpenBLAS (OpenMP build) keeps one process-wide thread count that each call resets to its
  // caller's, so a sampler on fewer threads could make a concurrent forward GEMM run on its count
  // (seen once in ~10 runs at 3 threads, float64). The rank oversubscribes its cores while both run.
  const int threads = torch::get_num_threads();
  const int forward_threads = threads, sample_threads = threads;
  torch::set_num_threads(sample_threads);
  metrics["overlap/sample_threads"] = sample_threads;
  metrics["overlap/forward_threads"] = forward_threads;

  std::vector<Chunk> chunks(static_cast<size_t>(minis));
  std::vector<ArSample> local;
  std::thread worker;
  std::exception_ptr failure;
  double exchange_s = 0, wait_s = 0;
  auto join = [&] {
    const auto t = std::chrono::steady_clock::now();
    if (worker.joinable()) worker.join();
    wait_s += seconds_since(t);
  };
  try {
    for (int64_t c = 0; c < minis; ++c) {
      std::vector<tasks::ShardPrompt> part;
      for (const auto& p : shard)
        if (p.slot / per_mini == c) part.push_back(p);
      std::vector<ArSample> samples = part.empty() ? std::vector<ArSample>{} : generate_groups(step, part, metrics);
      if (!samples.empty()) set_advantages(samples);  // groups are whole within a chunk
      const auto t0 = std::chrono::steady_clock::now();
      Chunk& chunk = chunks[static_cast<size_t>(c)];
      const std::vector<SampleCost> costs = costs_of(samples);
      StepPlan<ArSample> plan = plan_and_exchange(samples, costs, one, *comms_.dp);
      chunk.directory = std::move(plan.directory), chunk.schedule = std::move(plan.schedule);
      chunk.mine = std::move(plan.mine);
      exchange_s += seconds_since(t0);
      local.insert(local.end(), std::make_move_iterator(samples.begin()), std::make_move_iterator(samples.end()));
      join();  // one forward thread at a time: the pools stay at their sizes
      if (failure) std::rethrow_exception(failure);
      std::shared_ptr<c10::Event> ready;  // CUDA: this stream's work so far, the last optimizer step included
#if defined(TANDEM_WITH_TORCH_CUDA)
      if (device_.is_cuda()) {
        ready = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
        ready->record(c10::cuda::getCurrentCUDAStream(device_.index()));
      }
#endif
      worker = std::thread([this, &chunk, &failure, forward_threads, ready] {
        try {
          torch::set_num_threads(forward_threads);  // this thread's own OpenMP pool
#if defined(TANDEM_WITH_TORCH_CUDA)
          std::optional<c10::cuda::CUDAStreamGuard> stream;
          if (device_.is_cuda()) {
            stream.emplace(c10::cuda::getStreamFromPool(false, device_.index()));
            ready->block(stream->current_stream());
          }
#endif
          const auto t1 = std::chrono::steady_clock::now();
          if (config_.tracks.ar.algo.old_logp == OldLogp::kRecompute)
            chunk.old_logp = forward_micros(*policy_, chunk.schedule, chunk.directory, chunk.mine, chunk.entropy);
          chunk.old_s = seconds_since(t1);
          const auto t2 = std::chrono::steady_clock::now();
          if (reference_)
            chunk.ref_logp = forward_micros(*reference_, chunk.schedule, chunk.directory, chunk.mine, nullptr);
#if defined(TANDEM_WITH_TORCH_CUDA)
          if (stream) stream->current_stream().synchronize();  // results complete before the join
#endif
          chunk.ref_s = seconds_since(t2);
        } catch (...) {
          failure = std::current_exception();
        }
      });
    }
    join();
  } catch (...) {
    join();
    torch::set_num_threads(threads);
    throw;
  }
  torch::set_num_threads(threads);
  if (failure) std::rethrow_exception(failure);
#if defined(TANDEM_WITH_TORCH_CUDA)
  if (device_.is_cuda()) {
    const c10::Stream main = c10::cuda::getCurrentCUDAStream(device_.index());
    for (const Chunk& chunk : chunks)
      for (const auto* logps : {&chunk.old_logp, &chunk.ref_logp})
        for (const auto& mini : *logps)
          for (const torch::Tensor& t : mini)
            if (t.defined() && t.is_cuda()) t.record_stream(main);
  }
#endif
  if (ar.rollout.dump) dump(step, local);

  // The whole step's directory, schedule and samples, as the plain path builds them.
  directory_ = RolloutDirectory{};
  schedule_ = Schedule{};
  schedule_.dp = dp_size_;
  schedule_.cost_model = one.cost_model;
  mine_.clear();
  old_logp_.clear();
  ref_logp_.clear();
  double entropy[2] = {0, 0}, old_s = 0, ref_s = 0;
  for (auto& chunk : chunks) {
    const int64_t offset = static_cast<int64_t>(directory_.ids.size());
    directory_.ids.insert(directory_.ids.end(), chunk.directory.ids.begin(), chunk.directory.ids.end());
    directory_.costs.insert(directory_.costs.end(), chunk.directory.costs.begin(), chunk.directory.costs.end());
    MiniBatchPlan plan = std::move(chunk.schedule.minis.at(0));
    for (auto& rank : plan.ranks)
      for (auto& micro : rank.micros)
        for (auto& position : micro.samples) position += offset;
    schedule_.minis.push_back(std::move(plan));
    mine_.insert(mine_.end(), std::make_move_iterator(chunk.mine.begin()), std::make_move_iterator(chunk.mine.end()));
    if (!chunk.old_logp.empty()) old_logp_.push_back(std::move(chunk.old_logp.at(0)));
    if (!chunk.ref_logp.empty()) ref_logp_.push_back(std::move(chunk.ref_logp.at(0)));
    entropy[0] += chunk.entropy[0], entropy[1] += chunk.entropy[1];
    old_s += chunk.old_s, ref_s += chunk.ref_s;
  }
  if (ar.algo.old_logp == OldLogp::kRecompute) reduce_entropy(entropy, metrics);
  metrics["time/exchange_s"] = exchange_s;
  metrics["time/old_logp_s"] = old_s;  // on the forward thread, hidden behind sampling
  metrics["time/ref_logp_s"] = ref_s;
  metrics["overlap/wait_s"] = wait_s;  // sampling thread waiting for the forward thread
  return local;
}

}  // namespace tandem
