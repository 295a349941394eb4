// A track is one policy trained in the step (AR GRPO or image FlowGRPO). The trainer drives
// every enabled track through the same phases so that a unified step accumulates
// weight_ar * L_ar + weight_image * L_image and takes one optimizer update over both.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/metrics.h"
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

  // Rollout, rewards, advantages, exchange, schedule, old / reference log-probs of `step`.
  // Adds this phase's metrics (unprefixed) to `metrics`.
  virtual void prepare(int64_t step, MetricMap& metrics) = 0;
  // Forward/backward of this rank's micros of mini-batch `mini`, gradients scaled by `weight`.
  virtual void accumulate(int64_t mini, double weight, MetricMap& metrics) = 0;
  // After the last mini: the step's metrics of the update (loss, clip fraction, ...).
  virtual void finish(MetricMap& metrics) = 0;

  // Checkpoint I/O into / out of `dir` (a staging or committed checkpoint directory).
  virtual void save(const std::string& dir) = 0;
  virtual void load(const std::string& dir) = 0;
  virtual nlohmann::json state() const = 0;          // e.g. the data cursor
  virtual void restore(const nlohmann::json& state) = 0;

  // Called after every backward of a training micro (mixed precision moves the gradient into
  // its float32 master there, master_weights.h). Unset: nothing runs.
  void set_after_backward(std::function<void()> fn) { after_backward_ = std::move(fn); }

 protected:
  void after_backward() const {
    if (after_backward_) after_backward_();
  }

 private:
  std::function<void()> after_backward_;
};

}  // namespace tandem
