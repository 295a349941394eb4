// Mixed precision as Megatron and FSDP's MixedPrecision do it: the model computes in bfloat16
// while the optimizer steps float32 master copies of its parameters. Each backward's bfloat16
// gradient is added into a float32 one at once (so micro-batches accumulate in float32), the
// reduction over ranks and the clipping run on the float32 gradients, and after each update the
// model takes the master rounded to bfloat16. Without it, an update below half a bfloat16 ulp
// (lr 1e-6 on weights of size ~0.02) rounds away and the weight never moves.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace tandem {

class MasterWeights {
 public:
  // model_params: the model's (bfloat16) parameter tensors, each once.
  explicit MasterWeights(std::vector<torch::Tensor> model_params);

  // The float32 copies, same shapes and order: what the optimizer, the gradient reduction and
  // the clipping see. Their .grad is the float32 accumulator.
  const std::vector<torch::Tensor>& master() const { return master_; }

  // After a backward: master.grad += float32(model.grad); model.grad cleared.
  void accumulate_grads();
  // After an optimizer step: model = master rounded to the model's dtype.
  void copy_to_model();
  // Runs fn while the model's parameters hold the float32 master itself (shared storage): a save
  // writes the master, a load fills it, a phase with its own optimizer (warm-start, pretraining)
  // trains it. Afterwards the model holds the master rounded again.
  void with_master_in_model(const std::function<void()>& fn);

 private:
  std::vector<torch::Tensor> model_;   // the model's parameters (bfloat16)
  std::vector<torch::Tensor> master_;  // float32 copies
};

}  // namespace tandem
