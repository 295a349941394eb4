// Rectified-flow pretraining of the image policy on the built-in shapes dataset (the starting
// point FlowGRPO assumes: a model that already draws the classes).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "models/layers/flow_model.h"
#include "parallel/communicator.h"

namespace tandem {

struct FlowPretrainSummary {
  double first_loss = 0;
  double final_loss = 0;  // mean over the last 10% of steps
};

// tracks.image.pretrain.steps of flow matching: x_t = (1 - s) x0 + s eps with s from a
// logit-normal(0, 1) (SD3's choice), target v = eps - x0, labels dropped to the null class with
// label_dropout. Each dp rank takes its slice of every batch; gradients are summed over `grad`.
// With save_dir, rank 0 writes model.safetensors, loss.jsonl and samples.png there.
// `between(step)` (when set) runs after each step's update: a shared model's text warm-start
// interleaves its steps there. `params`: what it trains, model.parameters() when empty (a LoRA
// policy's caller passes the base, adapters off).
FlowPretrainSummary pretrain_flow(models::FlowModel& model, std::vector<torch::Tensor> params, const Config& config,
                                  parallel::Communicator& dp, parallel::Communicator& grad,
                                  const std::optional<std::string>& save_dir,
                                  const std::function<void(int64_t)>& between = {});

}  // namespace tandem
