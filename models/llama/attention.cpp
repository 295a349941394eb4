// Self-attention: project, rotate, (gather K/V over cp | store / read the KV cache), attend,
// project back.
#include "models/llama/attention.h"

#include <cmath>

namespace tandem::models {

void plan_layout(AttentionLayout& layout, int64_t q_rows, int64_t k_rows, int64_t heads, torch::Device device) {
  layout.packed_plan = plan_packed_attention(layout.segments, q_rows, k_rows, heads, device, layout.fused,
                                             kBucketSpanRatio, layout.window);
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c, const parallel::ParallelContext& ctx)
    : head_dim_(c.head_dim()),
      local_heads_(c.num_heads / ctx.tp_size),
      local_kv_heads_(c.num_kv_heads / ctx.tp_size),
      tp_(ctx.tp_enabled() ? ctx.tp : nullptr) {
  const int64_t d = head_dim_;
  q_proj =
      register_module("q_proj", parallel::ColumnParallelLinear(c.hidden_size, c.num_heads * d, c.qkv_bias, ctx, d));
  k_proj =
      register_module("k_proj", parallel::ColumnParallelLinear(c.hidden_size, c.num_kv_heads * d, c.qkv_bias, ctx, d));
  v_proj =
      register_module("v_proj", parallel::ColumnParallelLinear(c.hidden_size, c.num_kv_heads * d, c.qkv_bias, ctx, d));
  o_proj = register_module("o_proj", parallel::RowParallelLinear(c.num_heads * d, c.hidden_size, false, ctx, d));
  if (c.qk_norm) {
    const bool gemma = c.block == DecoderBlock::kGemma3;
    q_norm = register_module("q_norm", RMSNorm(d, c.rms_eps, gemma));
    k_norm = register_module("k_norm", RMSNorm(d, c.rms_eps, gemma));
  }
  if (c.query_pre_attn_scalar > 0 && c.query_pre_attn_scalar != static_cast<double>(d))
    q_factor_ = std::sqrt(static_cast<double>(d) / c.query_pre_attn_scalar);
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const AttentionLayout& layout, LayerKv* kv) {
  const int64_t n = x.size(0), d = head_dim_;
  const auto qkv = parallel::fused_column_parallel(x, {q_proj.get(), k_proj.get(), v_proj.get()});
  torch::Tensor q = qkv[0].view({n, local_heads_, d});     // (N, H_l, D)
  torch::Tensor k = qkv[1].view({n, local_kv_heads_, d});  // (N, H_kv_l, D)
  if (q_norm) {
    q = q_norm->apply(q, tp_ ? parallel::copy_to_tp(q_norm->weight, tp_) : q_norm->weight);
    k = k_norm->apply(k, tp_ ? parallel::copy_to_tp(k_norm->weight, tp_) : k_norm->weight);
  }
  q = apply_rotary(q, layout.rotary);
  if (q_factor_ != 1.0) q = q * q_factor_;
  k = apply_rotary(k, layout.rotary);
  torch::Tensor v = qkv[2].view({n, local_kv_heads_, d});  // (N, H_kv_l, D)
  torch::Tensor out;                                       // (N, H_l, D)
  if (kv != nullptr && layout.decode()) {
    store_decode(*kv, k, v, layout.cache_rows);
    const int64_t span = layout.cache_key_valid.size(1);
    out = decode_attention(q, kv->k.narrow(0, 0, n).narrow(2, 0, span), kv->v.narrow(0, 0, n).narrow(2, 0, span),
                           layout.cache_key_valid, kv->pk, kv->pv, layout.prefixes, layout.fused);
  } else if (layout.padded()) {
    const int64_t b = layout.batch, t = layout.width;
    out = padded_attention(q.view({b, t, local_heads_, d}), k.view({b, t, local_kv_heads_, d}),
                           v.view({b, t, local_kv_heads_, d}), layout.key_valid, layout.fused, layout.window)
              .reshape({n, local_heads_, d});
  } else {
    torch::Tensor kv_full;  // (N_full, H_kv_l, 2D) under cp
    if (layout.cp_shard != nullptr) {
      kv_full = parallel::cp_gather_kv(torch::cat({k, v}, -1), *layout.cp_shard, layout.cp);
      k = kv_full.narrow(-1, 0, d);  // (N_full, H_kv_l, D)
      v = kv_full.narrow(-1, d, d);
    }
    // A prefill attends to its own fresh K/V exactly as the training forward does; the cache
    // only keeps them for the decode steps.
    if (kv != nullptr) store_prefill(*kv, k, v, layout.segments, layout.cache_slots, layout.cache_prefixes);
    out = packed_attention(q, k, v, layout.packed_plan);
    // A cp rank without rows (a micro of 1- or 2-token sequences) computes no attention, so its
    // output would not depend on the gathered K/V and its backward would skip the gather's
    // reduce-scatter that the other ranks wait in. A zero term keeps the collective on every rank.
    if (kv_full.defined() && n == 0) out = out + kv_full.sum() * 0;
  }
  return o_proj(out.reshape({n, local_heads_ * d}));  // (N, hidden)
}

}  // namespace tandem::models
