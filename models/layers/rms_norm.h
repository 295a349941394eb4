// RMSNorm as in HF LlamaRMSNorm: normalised in float32 (float64 for float64 inputs), cast back,
// then scaled by the weight; or as Gemma3RMSNorm (plus_one): scaled by (1 + weight) in float32,
// then cast back, its weight starting at zeros.
#pragma once

#include <torch/torch.h>

namespace tandem::models {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, bool plus_one = false);
  torch::Tensor forward(const torch::Tensor& x);  // (..., dim) -> (..., dim)
  // The same with `weight` in place of this->weight: a replicated weight passed through
  // parallel::copy_to_tp, so its gradient sums over the tp ranks that each saw other heads.
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& weight);

  torch::Tensor weight;  // (dim)

 private:
  double eps_;
  bool plus_one_;
};
TORCH_MODULE(RMSNorm);

// float64 stays float64; every narrower float type computes in float32.
torch::ScalarType compute_dtype(torch::ScalarType dtype);

}  // namespace tandem::models
