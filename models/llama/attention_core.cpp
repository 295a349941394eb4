// Head layout: query head h uses kv head h / G (G = H / H_kv), as HF's repeat_kv. Queries are
// grouped per kv head into (H_kv, G * L, D) so the matmuls never expand K/V.
#include "models/llama/attention_core.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "models/llama/rms_norm.h"

namespace tandem::models {

namespace {

// scores (..., L, S) masked where `blocked`, softmax in the compute dtype, back to `dtype`.
torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& blocked, torch::ScalarType dtype) {
  const torch::Tensor s =
      scores.to(compute_dtype(dtype)).masked_fill(blocked, -std::numeric_limits<double>::infinity());
  return torch::softmax(s, -1).to(dtype);
}

// One segment: q (L, H, D) at offsets q_offset.., k / v (S, H_kv, D) with S = q_offset + L.
torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                int64_t q_offset) {
  const int64_t len = q.size(0), heads = q.size(1), dim = q.size(2), span = k.size(0), kv_heads = k.size(1);
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const torch::Tensor qg =  // (H_kv, G*L, D)
      q.view({len, kv_heads, group, dim}).permute({1, 2, 0, 3}).reshape({kv_heads, group * len, dim});
  const torch::Tensor scores =  // (H_kv, G, L, S)
      torch::bmm(qg, k.permute({1, 2, 0})).mul(scale).view({kv_heads, group, len, span});
  const auto idx = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  const torch::Tensor blocked =  // (L, S): key j is after query i
      torch::arange(span, idx).unsqueeze(0) > (torch::arange(len, idx) + q_offset).unsqueeze(1);
  const torch::Tensor probs = masked_softmax(scores, blocked, q.scalar_type());  // (H_kv, G, L, S)
  const torch::Tensor out =
      torch::bmm(probs.view({kv_heads, group * len, span}), v.permute({1, 0, 2}));  // (H_kv, G*L, D)
  return out.view({kv_heads, group, len, dim}).permute({2, 0, 1, 3}).reshape({len, heads, dim});
}

}  // namespace

std::vector<AttentionSegment> segments_from_cu_seqlens(const torch::Tensor& cu_seqlens) {
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t* p = cu.data_ptr<int64_t>();
  std::vector<AttentionSegment> segments;
  for (int64_t b = 0; b + 1 < cu.numel(); ++b)
    if (p[b + 1] > p[b]) segments.push_back({p[b], p[b + 1] - p[b], p[b], 0});
  return segments;
}

torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<AttentionSegment>& segments) {
  std::vector<torch::Tensor> parts;
  int64_t row = 0;
  for (const AttentionSegment& s : segments) {
    if (s.q_begin != row || s.k_begin + s.q_offset + s.length > k.size(0))
      throw std::invalid_argument("packed_attention: segments must cover the query rows in order within K/V");
    const int64_t span = s.q_offset + s.length;
    parts.push_back(segment_attention(q.narrow(0, s.q_begin, s.length), k.narrow(0, s.k_begin, span),
                                      v.narrow(0, s.k_begin, span), s.q_offset));
    row += s.length;
  }
  if (row != q.size(0)) throw std::invalid_argument("packed_attention: segments do not cover every query row");
  if (parts.empty()) return torch::zeros_like(q);
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 0);  // (N, H, D)
}

torch::Tensor padded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid) {
  const int64_t b = q.size(0), t = q.size(1), heads = q.size(2), dim = q.size(3), kv_heads = k.size(2);
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const torch::Tensor qg =  // (B, H_kv, G*T, D)
      q.view({b, t, kv_heads, group, dim}).permute({0, 2, 3, 1, 4}).reshape({b, kv_heads, group * t, dim});
  const torch::Tensor kt = k.permute({0, 2, 3, 1});  // (B, H_kv, D, T)
  const torch::Tensor scores = torch::matmul(qg, kt).mul(scale).view({b, kv_heads, group, t, t});  // (B, H_kv, G, T, T)
  const auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(q.device());
  const torch::Tensor causal = torch::ones({t, t}, bool_opts).tril();                      // (T, T)
  const torch::Tensor self = torch::eye(t, bool_opts);                                     // (T, T)
  const torch::Tensor allowed = causal & (key_valid.view({b, 1, t}) | self.unsqueeze(0));  // (B, T, T)
  const torch::Tensor probs =  // (B, H_kv, G, T, T)
      masked_softmax(scores, ~allowed.view({b, 1, 1, t, t}), q.scalar_type());
  const torch::Tensor out =  // (B, H_kv, G*T, D)
      torch::matmul(probs.view({b, kv_heads, group * t, t}), v.permute({0, 2, 1, 3}));
  return out.view({b, kv_heads, group, t, dim}).permute({0, 3, 1, 2, 4}).reshape({b, t, heads, dim});
}

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid) {
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k.size(1), span = k.size(2);
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const torch::Tensor qg = q.view({n, kv_heads, group, dim});                           // (n, H_kv, G, D)
  const torch::Tensor scores = torch::matmul(qg, k.transpose(2, 3)).mul(scale);         // (n, H_kv, G, S)
  const torch::Tensor blocked = key_valid.logical_not().view({n, 1, 1, span});          // (n, 1, 1, S)
  const torch::Tensor probs = masked_softmax(scores, blocked, q.scalar_type());         // (n, H_kv, G, S)
  return torch::matmul(probs, v).view({n, heads, dim});                                 // (n, H_kv, G, D) -> (n, H, D)
}

}  // namespace tandem::models
