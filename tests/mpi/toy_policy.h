// A small policy for layout-invariance tests: token embedding, a causal prefix-mean context
// that stays inside each sequence (so packing mistakes change the result, like attention),
// and a linear head. Works on both the packed THD and the padded layout.
#pragma once

#include <torch/torch.h>

#include "core/grpo/policy_update.h"

namespace tandem::test {

class ToyPolicy : public PolicyModel {
 public:
  ToyPolicy(int64_t vocab, int64_t hidden, uint64_t seed, torch::Dtype dtype = torch::kFloat64) {
    torch::manual_seed(seed);
    const auto o = torch::TensorOptions().dtype(dtype);
    embed_ = (torch::randn({vocab, hidden}, o) * 0.5).requires_grad_(true);               // (V, H)
    w_ = (torch::randn({hidden, hidden}, o) / std::sqrt(hidden)).requires_grad_(true);    // (H, H)
    head_ = (torch::randn({hidden, vocab}, o) / std::sqrt(hidden)).requires_grad_(true);  // (H, V)
  }
  std::vector<torch::Tensor> parameters() override { return {embed_, w_, head_}; }

  Output forward_packed(const PackedBatch& b, bool with_entropy) override {
    const torch::Tensor ids = b.input_ids.view({-1});                                          // (N)
    const torch::Tensor h = embed_.index_select(0, ids);                                       // (N, H)
    const torch::Tensor c = h.cumsum(0);                                                       // (N, H)
    const torch::Tensor c0 = torch::cat({torch::zeros({1, h.size(1)}, h.options()), c});       // (N+1, H)
    const torch::Tensor starts = b.cu_seqlens.to(torch::kInt64).index_select(0, b.seq_index);  // (N)
    const torch::Tensor prefix = c - c0.index_select(0, starts);  // (N, H) sum within the sequence
    const torch::Tensor pos = b.position_ids.view({-1}).to(h.scalar_type()).unsqueeze(1) + 1;  // (N, 1)
    return head(h, prefix / pos, b.targets, with_entropy);
  }

  Output forward_padded(const PaddedBatch& b, bool with_entropy) override {
    const int64_t rows = b.input_ids.size(0), t = b.input_ids.size(1);
    const torch::Tensor h = embed_.index_select(0, b.input_ids.reshape({-1})).view({rows, t, -1});  // (B, T, H)
    const torch::Tensor prefix = h.cumsum(1);                                                       // (B, T, H)
    const torch::Tensor pos = b.position_ids.to(h.scalar_type()).unsqueeze(2) + 1;                  // (B, T, 1)
    Output o =
        head(h.reshape({rows * t, -1}), (prefix / pos).reshape({rows * t, -1}), b.targets.reshape({-1}), with_entropy);
    o.logp = o.logp.view({rows, t});
    if (o.entropy.defined()) o.entropy = o.entropy.view({rows, t});
    return o;
  }

 private:
  Output head(const torch::Tensor& h, const torch::Tensor& ctx, const torch::Tensor& targets, bool with_entropy) {
    const torch::Tensor z = torch::tanh(h.matmul(w_) + ctx);  // (N, H)
    const torch::Tensor logits = z.matmul(head_);             // (N, V)
    const torch::Tensor lp = torch::log_softmax(logits, -1);  // (N, V)
    Output o;
    o.logp = lp.gather(1, targets.unsqueeze(1)).squeeze(1);  // (N)
    if (with_entropy) o.entropy = -(lp.exp() * lp).sum(-1);  // (N)
    return o;
  }
  torch::Tensor embed_, w_, head_;
};

}  // namespace tandem::test
