// The Llama / Qwen2 / Qwen3 / Mistral / Gemma 3 self-attention block: q/k/v projections (column parallel,
// split by heads), Qwen3's and Gemma's per-head q/k RMSNorm, RoPE, K/V gathered across cp when the micro is
// context-parallel, grouped-query attention on the packed or padded layout (or over a KV cache when decoding), and the
// o projection (row parallel).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "models/layers/rms_norm.h"
#include "models/layers/rotary.h"
#include "models/llama/attention_core.h"
#include "models/llama/config.h"
#include "models/llama/kv_cache.h"
#include "parallel/context_parallel.h"
#include "parallel/tp_layers.h"

namespace tandem::models {

// Everything attention needs about the current forward besides the activations; built once per
// forward and shared by every layer.
struct AttentionLayout {
  RotaryTables rotary;                          // for this rank's rows
  std::vector<AttentionSegment> segments;       // packed: segments over this rank's rows
  PackedAttentionPlan packed_plan;              // packed: how the segments run (see plan_layout)
  const parallel::CpShard* cp_shard = nullptr;  // packed with cp > 1: K/V are gathered over cp
  parallel::Communicator* cp = nullptr;
  int64_t batch = 0, width = 0;  // padded: rows are (B * T), B = batch, T = width
  torch::Tensor key_valid;       // padded: (B, T) bool; undefined for packed
  bool fused = false;            // packed / padded: the fused kernels (models/layers/fused_attention.h)
  int64_t window = 0;            // > 0: this view's sliding window (Mistral's sliding_window)
  // Gemma 3: the view of the layers with the window (their RoPE base, plan, masks and window),
  // beside this one of the full-attention layers; null: every layer uses this view.
  std::shared_ptr<AttentionLayout> sliding;
  bool padded() const { return key_valid.defined(); }

  // Incremental decoding (cp is never used). Prefill: a packed forward whose segment i also
  // stores its K/V in the empty cache slot cache_slots[i] (a prefix slot with cache_prefixes).
  // Decode: row i is the next token of slot i, stored at the slot's row cache_rows[i]; it
  // attends to its prefix group's rows, if any, and to the slot's own where cache_key_valid.
  KvCache* cache = nullptr;
  std::vector<int64_t> cache_slots;  // prefill
  bool cache_prefixes = false;       // prefill: into the prefix store
  torch::Tensor cache_rows;          // decode: (n) int64
  torch::Tensor cache_key_valid;     // decode: (n, S) bool, S = the longest slot after this step
  PrefixIndex prefixes;              // decode: the slots that read each shared prefix
  bool decode() const { return cache != nullptr && cache_rows.defined(); }
};

// Builds layout.packed_plan from layout.segments (fused as layout.fused, windowed as layout.window): q_rows this rank's
// rows, k_rows the K/V rows attention sees (the whole micro under cp), heads the local query heads.
void plan_layout(AttentionLayout& layout, int64_t q_rows, int64_t k_rows, int64_t heads, torch::Device device);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx);
  // (N, hidden) -> (N, hidden). `kv` is this layer's cache when layout.cache is set.
  torch::Tensor forward(const torch::Tensor& x, const AttentionLayout& layout, LayerKv* kv = nullptr);

  parallel::ColumnParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  parallel::RowParallelLinear o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3, Gemma 3 (config.qk_norm): over each head's D, before RoPE

 private:
  int64_t head_dim_, local_heads_, local_kv_heads_;
  // Gemma 3's query_pre_attn_scalar, as a factor on the rotated queries: the attention kernels scale
  // by 1 / sqrt(head_dim), so q * sqrt(head_dim / scalar) gives 1 / sqrt(scalar). 1: none.
  double q_factor_ = 1.0;
  parallel::Communicator* tp_ = nullptr;  // the q/k norms' weights are replicated over tp
};
TORCH_MODULE(LlamaAttention);

}  // namespace tandem::models
