// A track is one policy trained in the step (AR GRPO or image FlowGRPO). The trainer drives
// every enabled track through the same phases so that a unified step accumulates
// weight_ar * L_ar + weight_image * L_image and takes one optimizer update over both.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/run/metrics.h"
#include "parallel/communicator.h"

namespace tandem {

// The communicators a track needs, passed explicitly. The first five move CPU tensors
// (metadata, samples, metrics); the last three move the model's tensors (the same MPI
// communicators on CPU runs, NCCL ones on CUDA).
struct TrainerComms {
  parallel::Communicator* world = nullptr;
  parallel::Communicator* dp = nullptr;
  parallel::Communicator* cp = nullptr;
  parallel::Communicator* tp = nullptr;
  parallel::Communicator* dp_cp = nullptr;
  parallel::Communicator* model_tp = nullptr;  // tensor-parallel layers
  parallel::Communicator* model_cp = nullptr;  // context-parallel attention
  parallel::Communicator* grad = nullptr;      // gradients are summed over dp x cp here
  // parallel.rollout_ranks > 0: every rank of the job, train and rollout (samples and weights
  // cross here; rollout_bridge.h). Null when every rank does both.
  parallel::Communicator* bridge = nullptr;
};

class Track {
 public:
  virtual ~Track() = default;
  virtual std::string name() const = 0;  // "ar" or "image": the metric prefix
  virtual std::vector<torch::Tensor> parameters() = 0;
  // Per parameters() entry: split over tp? (The gradient norm sums those parts over tp.)
  virtual std::vector<bool> tp_sharded() { return std::vector<bool>(parameters().size(), false); }
  // tracks.<name>.weight: this track's loss weight when several tracks share the update.
  virtual double weight() const = 0;

  // Rollout, rewards, advantages, exchange, schedule, old / reference log-probs of `step`.
  // Adds this phase's metrics (unprefixed) to `metrics`.
  virtual void prepare(int64_t step, MetricMap& metrics) = 0;
  // Forward/backward of this rank's micros of mini-batch `mini`, gradients scaled by `weight`.
  // Sets loss_finite() for the mini-batch.
  virtual void accumulate(int64_t mini, double weight, MetricMap& metrics) = 0;
  // False when a micro of the last accumulate() had a non-finite loss on this rank: the trainer
  // then skips the update on every rank (reduce_and_step agrees over ranks).
  bool loss_finite() const { return loss_finite_; }
  // After the last mini: the step's metrics of the update (loss, clip fraction, ...).
  virtual void finish(MetricMap& metrics) = 0;

  // Checkpoint I/O into / out of `dir` (a staging or committed checkpoint directory).
  virtual void save(const std::string& dir) = 0;
  virtual void load(const std::string& dir) = 0;
  virtual nlohmann::json state() const = 0;  // e.g. the data cursor
  virtual void restore(const nlohmann::json& state) = 0;

  // Called after every backward of a training micro (mixed precision moves the gradient into
  // its float32 master there, master_weights.h). Unset: nothing runs.
  void set_after_backward(std::function<void()> fn) { after_backward_ = std::move(fn); }

  // Start-up hooks, called by the trainer in this order; each does nothing unless the track has
  // the phase. pretrain: train the track's own model before RL, or load pretrained weights
  // (fresh: a new run; on a resume the checkpoint then overwrites them). `text` is a track whose
  // supervised warm-start steps this one may interleave with its own (one shared model); true
  // when it ran them, so the trainer does not run them again.
  virtual bool pretrain(bool fresh, Track* text) { return false; }
  virtual int64_t warmstart_steps() const { return 0; }
  virtual double warmstart_step(int64_t step) { return 0; }  // step `step` of it; its loss
  virtual double warmstart() { return 0; }                   // every step; the last loss
  // The stop signal that ended warmstart() before its last step (every train rank alike), or 0.
  virtual int warmstart_stop_signal() const { return 0; }
  // The KL reference becomes the current policy (the one RL starts from).
  virtual void refresh_reference() {}
  // Rank 0, before RL, every log_every * 10 steps and at the end: what the track shows of its
  // policy (the image grid). Returns a line for the log, or "".
  virtual std::string write_samples(const std::string& run_dir, int64_t completed) { return ""; }
  // Held-out evaluation (the recipe's eval section) after `completed` steps, collective over the
  // track's ranks: its metrics (eval/...), unprefixed; empty when the track has none.
  virtual MetricMap evaluate(const std::string& run_dir, int64_t completed) { return {}; }
  // The last step's first `groups` groups on this rank as readable records (prompt, response,
  // reward, advantage, length), for samples/step_N.jsonl; empty when the track has none.
  virtual std::vector<nlohmann::json> sample_records(int64_t groups) const { return {}; }
  // parallel.rollout_ranks: the start (step, cursor, weights) and each newer version of the
  // weights go out to the rollout ranks (rollout_bridge.h says when).
  virtual void publish_start(int64_t start_step) {}
  virtual void publish_weights(int64_t version) {}

 protected:
  void after_backward() const {
    if (after_backward_) after_backward_();
  }
  bool loss_finite_ = true;

 private:
  std::function<void()> after_backward_;
};

}  // namespace tandem
