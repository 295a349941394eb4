// Scaled dot-product attention with grouped-query heads for both layouts: block-diagonal causal
// over packed segments (one small matmul per segment, never an (N, N) mask) and batched causal
// with a key-padding mask for (B, T) batches; plus the one-query-per-sequence attention over a
// KV cache for decoding. Softmax in float32 (float64 for float64).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace tandem::models {

// Query rows [q_begin, q_begin + length) sit at positions q_offset.. of one sequence whose K/V
// rows start at k_begin; they attend causally to K/V rows [k_begin, k_begin + q_offset + length).
struct AttentionSegment {
  int64_t q_begin = 0;
  int64_t length = 0;
  int64_t k_begin = 0;
  int64_t q_offset = 0;
};

// One segment per sequence of cu_seqlens ((B+1) offsets; empty sequences are skipped).
std::vector<AttentionSegment> segments_from_cu_seqlens(const torch::Tensor& cu_seqlens);

// q (N, H, D); k, v (N_kv, H_kv, D); segments cover q's rows in order. Returns (N, H, D).
torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<AttentionSegment>& segments);

// q (B, T, H, D); k, v (B, T, H_kv, D); key_valid (B, T) bool. Returns (B, T, H, D); rows of
// padding attend at least to themselves so nothing is NaN.
torch::Tensor padded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid);

// Decoding: one query per sequence against that sequence's cached keys. q (n, H, D); k, v
// (n, H_kv, S, D) (strided views of a KvCache are fine); key_valid (n, S) bool marks each
// sequence's cached positions. Returns (n, H, D).
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid);

}  // namespace tandem::models
