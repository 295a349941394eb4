// The Llama / Qwen2 self-attention block: q/k/v projections (column parallel, split by heads),
// RoPE, K/V gathered across cp when the micro is context-parallel, grouped-query attention on
// the packed or padded layout, and the o projection (row parallel).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "models/llama/attention_core.h"
#include "models/llama/config.h"
#include "models/llama/rotary.h"
#include "parallel/context_parallel.h"
#include "parallel/tp_layers.h"

namespace tandem::models {

// Everything attention needs about the current forward besides the activations; built once per
// forward and shared by every layer.
struct AttentionLayout {
  RotaryTables rotary;                          // for this rank's rows
  std::vector<AttentionSegment> segments;       // packed: segments over this rank's rows
  const parallel::CpShard* cp_shard = nullptr;  // packed with cp > 1: K/V are gathered over cp
  parallel::Communicator* cp = nullptr;
  int64_t batch = 0, width = 0;                 // padded: rows are (B * T), B = batch, T = width
  torch::Tensor key_valid;                      // padded: (B, T) bool; undefined for packed
  bool padded() const { return key_valid.defined(); }
};

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx);
  torch::Tensor forward(const torch::Tensor& x, const AttentionLayout& layout);  // (N, hidden) -> (N, hidden)

  parallel::ColumnParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  parallel::RowParallelLinear o_proj{nullptr};

 private:
  int64_t head_dim_, local_heads_, local_kv_heads_;
};
TORCH_MODULE(LlamaAttention);

}  // namespace tandem::models
