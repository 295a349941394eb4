// Head layout: query head h uses kv head h / G (G = H / H_kv), as HF's repeat_kv. Queries are
// grouped per kv head into (B, H_kv, G * L, D) so the matmuls never expand K/V. Packed segments
// are bucketed by span (longest first) and each bucket is gathered into a padded batch with
// index_select (one autograd node for all buckets, whose backward scatters the gradients back
// into one tensor): a handful of batched ops per layer instead of a dozen per sequence. Padded
// keys are masked to -inf, so they get probability exactly 0 and contribute exactly 0 to outputs
// and gradients.
#include "models/llama/attention_core.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "models/layers/fused_attention.h"
#include "models/layers/rms_norm.h"
#include "models/llama/decode_merge.h"

namespace tandem::models {

namespace {

// scores (..., L, S) masked where `blocked`, softmax in the compute dtype, back to `dtype`. The
// mask is added as 0 / -inf (exactly masked_fill's values): one pass over the scores forward and
// none backward, where masked_fill copies them in both directions. The bias has the mask's
// shape, without the heads.
torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& blocked, torch::ScalarType dtype) {
  const torch::ScalarType ct = compute_dtype(dtype);
  const torch::Tensor bias = torch::zeros(blocked.sizes(), scores.options().dtype(ct))
                                 .masked_fill_(blocked, -std::numeric_limits<double>::infinity());
  return torch::softmax(scores.to(ct) + bias, -1).to(dtype);
}

// q (B, L_q, H, D), k / v (B, L_k, H_kv, D), blocked broadcastable to (B, H_kv, G, L_q, L_k).
// Returns (B, L_q, H, D).
torch::Tensor batched_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& blocked) {
  const int64_t b = q.size(0), lq = q.size(1), heads = q.size(2), dim = q.size(3), lk = k.size(1), kv_heads = k.size(2);
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  // The scale goes on the queries (L_q x D), not on the (L_q, L_k) scores: a pass over the
  // small tensor instead of the large one, in either direction.
  const torch::Tensor qg =  // (B*H_kv, G*L_q, D)
      q.view({b, lq, kv_heads, group, dim}).permute({0, 2, 3, 1, 4}).reshape({b * kv_heads, group * lq, dim}) * scale;
  const torch::Tensor kt = k.permute({0, 2, 3, 1}).reshape({b * kv_heads, dim, lk});   // (B*H_kv, D, L_k)
  const torch::Tensor scores = torch::bmm(qg, kt).view({b, kv_heads, group, lq, lk});  // (B, H_kv, G, L_q, L_k)
  const torch::Tensor probs = masked_softmax(scores, blocked, q.scalar_type());        // (B, H_kv, G, L_q, L_k)
  const torch::Tensor out =                                                            // (B, H_kv, G*L_q, D)
      torch::matmul(probs.view({b, kv_heads, group * lq, lk}), v.permute({0, 2, 1, 3}));
  return out.view({b, kv_heads, group, lq, dim}).permute({0, 3, 1, 2, 4}).reshape({b, lq, heads, dim});
}

// Rows of x (N, ...) at each of several index tensors: x.index_select(0, index_i) for every i.
// The backward scatters every part's gradient into one zero-filled (N, ...) tensor, where one
// index_select per bucket would each zero-fill and then add a whole (N, ...) gradient.
struct GatherRows : torch::autograd::Function<GatherRows> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                at::TensorList indices) {
    torch::autograd::variable_list out;
    for (const auto& index : indices) out.push_back(x.index_select(0, index));
    ctx->save_for_backward(torch::autograd::variable_list(indices.begin(), indices.end()));
    ctx->saved_data["sizes"] = x.sizes();
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto indices = ctx->get_saved_variables();
    torch::autograd::variable_list out(1 + indices.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (!out[0].defined()) out[0] = torch::zeros(ctx->saved_data["sizes"].toIntVector(), grads[i].options());
      out[0].index_add_(0, indices[i], grads[i]);
    }
    return out;
  }
};

std::vector<torch::Tensor> gather_rows(const torch::Tensor& x, const std::vector<torch::Tensor>& indices) {
  if (indices.empty()) return {};
  return GatherRows::apply(x, at::TensorList(indices));  // a TensorList, so autograd sees the indices as inputs
}

torch::Tensor index_tensor(const std::vector<int64_t>& values, torch::Device device) {
  return torch::tensor(values, torch::kInt64).to(device);
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

std::vector<AttentionSegment> segments_with_prefixes(const torch::Tensor& cu_seqlens, const torch::Tensor& prefix_of) {
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU).to(torch::kInt64).contiguous();
  const torch::Tensor pre = prefix_of.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t b = cu.numel() - 1;
  if (pre.numel() != b) throw std::invalid_argument("packed input: prefix_of must have one entry per sequence");
  const int64_t* c = cu.data_ptr<int64_t>();
  const int64_t* p = pre.data_ptr<int64_t>();
  std::vector<AttentionSegment> segments;
  for (int64_t i = 0; i < b; ++i) {
    if (c[i + 1] <= c[i]) continue;
    if (p[i] < 0) {
      segments.push_back({c[i], c[i + 1] - c[i], c[i], 0});
      continue;
    }
    if (p[i] >= b || p[i] == i || p[p[i]] >= 0)
      throw std::invalid_argument("packed input: sequence " + std::to_string(i) + " names prefix " +
                                  std::to_string(p[i]) + ", which is not a sequence without a prefix of its own");
    segments.push_back({c[i], c[i + 1] - c[i], c[p[i]], c[p[i] + 1] - c[p[i]], c[i]});
  }
  return segments;
}

PackedAttentionPlan plan_packed_attention(const std::vector<AttentionSegment>& segments, int64_t q_rows, int64_t k_rows,
                                          int64_t heads, torch::Device device, bool fused, double span_ratio,
                                          int64_t window) {
  int64_t row = 0;
  for (const AttentionSegment& s : segments) {
    const bool split = s.k_own >= 0;  // prefix rows at k_begin, own rows at k_own
    if (s.q_begin != row || s.length <= 0 || s.q_offset < 0 || s.k_begin < 0 ||
        (split ? s.k_begin + s.q_offset > k_rows || s.k_own + s.length > k_rows
               : s.k_begin + s.q_offset + s.length > k_rows))
      throw std::invalid_argument("packed_attention: segments must cover the query rows in order within K/V");
    row += s.length;
  }
  if (row != q_rows) throw std::invalid_argument("packed_attention: segments do not cover every query row");
  PackedAttentionPlan plan;
  bool plain = fused && device.is_cuda() && q_rows == k_rows && !segments.empty();
  for (const AttentionSegment& s : segments) plain = plain && s.q_offset == 0 && s.k_own < 0 && s.k_begin == s.q_begin;
  if (plain) {
    std::vector<int32_t> cu{0};
    for (const AttentionSegment& s : segments) {
      cu.push_back(static_cast<int32_t>(s.q_begin + s.length));
      plan.varlen_max = std::max(plan.varlen_max, s.length);
    }
    plan.varlen_cu = torch::tensor(cu, torch::kInt32).to(device);
    plan.varlen_window = window;
  }
  // A window no segment reaches past is the full attention; one that bites needs the mask.
  bool bites = false;
  for (const AttentionSegment& s : segments) bites = bites || (window > 0 && s.q_offset + s.length > window);
  if (!bites) window = 0;
  if (bites) fused = false;
  plan.window = window;
  plan.rows = q_rows;
  plan.fused = fused;
  // Materialised buckets hold a segment's whole key span (prefix included) and mask it; fused
  // ones hold its own rows only (the prefix is read in place), so they are sized by length.
  const auto width = [&](size_t i) { return segments[i].length + (fused ? 0 : segments[i].q_offset); };
  const auto own_row = [&](const AttentionSegment& s, int64_t pos) {  // K/V row of position q_offset + pos
    return s.k_own >= 0 ? s.k_own + pos : s.k_begin + s.q_offset + pos;
  };
  // Segments that may share a bucket: all of them materialised; fused, those without a prefix,
  // and those of each prefix (its K/V rows) apart.
  std::vector<std::vector<size_t>> families;
  if (!fused) {
    families.emplace_back();
    for (size_t i = 0; i < segments.size(); ++i) families[0].push_back(i);
  } else {
    std::vector<std::pair<int64_t, int64_t>> prefixes;  // (k_begin, q_offset), first appearance order
    families.emplace_back();
    for (size_t i = 0; i < segments.size(); ++i) {
      const AttentionSegment& s = segments[i];
      if (s.q_offset == 0) {
        families[0].push_back(i);
        continue;
      }
      const auto key = std::make_pair(s.k_begin, s.q_offset);
      const size_t f = static_cast<size_t>(std::find(prefixes.begin(), prefixes.end(), key) - prefixes.begin());
      if (f == prefixes.size()) prefixes.push_back(key), families.emplace_back();
      families[1 + f].push_back(i);
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(q_rows));
  int64_t out_row = 0;  // rows of the bucket-concatenated output so far
  for (std::vector<size_t>& family : families) {
    std::stable_sort(family.begin(), family.end(), [&](size_t a, size_t b) { return width(a) > width(b); });
    for (size_t first = 0; first < family.size();) {
      // Widest first: the bucket's widths are its first segment's.
      const int64_t lk = width(family[first]);
      int64_t lq = 0;
      size_t end = first;
      while (end < family.size() && width(family[end]) >= span_ratio * static_cast<double>(lk)) {
        const int64_t next_lq = std::max(lq, segments[family[end]].length);
        if (!fused && end > first && static_cast<int64_t>(end - first + 1) * heads * next_lq * lk > kBucketMaxScores)
          break;
        lq = next_lq, ++end;
      }
      PackedAttentionPlan::Bucket bucket;
      bucket.batch = static_cast<int64_t>(end - first), bucket.q_len = lq, bucket.k_len = lk;
      std::vector<int64_t> q_index, k_index, real_rows, offsets, spans, lasts;
      bool dense = true;  // every segment a whole sequence of length lq, consecutive in the rows
      const AttentionSegment& lead = segments[family[first]];
      for (size_t j = first; j < end; ++j) {
        const AttentionSegment& s = segments[family[j]];
        const int64_t b = static_cast<int64_t>(j - first), span = s.q_offset + s.length;
        dense = dense && s.q_offset == 0 && s.k_own < 0 && s.k_begin == s.q_begin && s.length == lq &&
                s.q_begin == lead.q_begin + b * lq;
        for (int64_t i = 0; i < lq; ++i) q_index.push_back(s.q_begin + std::min(i, s.length - 1));
        for (int64_t i = 0; i < lk; ++i) {
          if (fused) {  // own rows only; padding repeats the last real key
            k_index.push_back(own_row(s, std::min(i, s.length - 1)));
            continue;
          }
          const int64_t pos = std::min(i, span - 1);  // padding repeats the last real key
          k_index.push_back(pos >= s.q_offset ? own_row(s, pos - s.q_offset) : s.k_begin + pos);
        }
        for (int64_t i = 0; i < s.length; ++i) {
          real_rows.push_back(b * lq + i);
          order[static_cast<size_t>(s.q_begin + i)] = out_row++;
        }
        offsets.push_back(s.q_offset), spans.push_back(span), lasts.push_back(s.length - 1);
      }
      const auto idx = torch::TensorOptions().dtype(torch::kInt64).device(device);
      if (!fused) {
        // A padding row is a copy of its segment's last query (q_index) and gets that row's mask:
        // masked by its own index, a row past the last one by a window or more sees no key at
        // all, and the softmax of an all -inf row is NaN, which its backward spreads to every key
        // of the segment (the forward drops the row, the gradient does not).
        const torch::Tensor kj = torch::arange(lk, idx).view({1, 1, lk});  // key j of a row
        const torch::Tensor off = index_tensor(offsets, device).view({-1, 1, 1}),
                            sp = index_tensor(spans, device).view({-1, 1, 1});
        const torch::Tensor qi =  // (B, L_q, 1): query i of a row, padding at the last real one
            torch::minimum(torch::arange(lq, idx).view({1, lq, 1}), index_tensor(lasts, device).view({-1, 1, 1}));
        torch::Tensor blocked = (kj > qi + off) | (kj >= sp);  // (B, L_q, L_k)
        if (window > 0) blocked = blocked | (kj <= qi + off - window);
        bucket.blocked = blocked.view({bucket.batch, 1, 1, lq, lk});  // (B, 1, 1, L_q, L_k)
      } else if (lead.q_offset > 0) {
        bucket.p_index = torch::arange(lead.k_begin, lead.k_begin + lead.q_offset, idx);  // (P)
      }
      if (dense && lk == lq) {
        bucket.q_start = lead.q_begin;
      } else {
        bucket.q_index = index_tensor(q_index, device);
        bucket.k_index = index_tensor(k_index, device);
      }
      if (static_cast<int64_t>(real_rows.size()) != bucket.batch * lq)
        bucket.real_rows = index_tensor(real_rows, device);
      plan.buckets.push_back(std::move(bucket));
      first = end;
    }
  }
  bool identity = true;
  for (int64_t r = 0; r < q_rows && identity; ++r) identity = order[static_cast<size_t>(r)] == r;
  if (!identity) plan.order = index_tensor(order, device);
  return plan;
}

torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const PackedAttentionPlan& plan) {
  if (q.size(0) != plan.rows) throw std::invalid_argument("packed_attention: the plan is for another row count");
  if (plan.buckets.empty()) return torch::zeros_like(q);
  // FlashAttention takes head dims up to 256 in multiples of 8; others run the buckets.
  if (plan.varlen_cu.defined() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf) &&
      q.size(2) % 8 == 0 && q.size(2) <= 256)
    return fused_varlen_attention(q, k, v, plan.varlen_cu, plan.varlen_max, plan.varlen_window);  // (N, H, D)
  const int64_t heads = q.size(1), dim = q.size(2), kv_heads = k.size(1);
  // The gathered buckets' rows, in bucket order; a fused prefix bucket adds its prefix rows to
  // the K/V list after its own, so every gather is one autograd node per tensor.
  std::vector<torch::Tensor> q_index, k_index;
  for (const auto& b : plan.buckets) {
    if (b.q_start < 0) q_index.push_back(b.q_index), k_index.push_back(b.k_index);
    if (b.p_index.defined()) k_index.push_back(b.p_index);
  }
  const std::vector<torch::Tensor> q_parts = gather_rows(q, q_index), k_parts = gather_rows(k, k_index),
                                   v_parts = gather_rows(v, k_index);
  std::vector<torch::Tensor> parts;
  size_t gathered_q = 0, gathered_k = 0;
  for (const auto& b : plan.buckets) {
    torch::Tensor qb, kb, vb;  // (B, L_q, H, D), (B, L_k, H_kv, D)
    if (b.q_start >= 0) {
      qb = q.narrow(0, b.q_start, b.batch * b.q_len).view({b.batch, b.q_len, heads, dim});
      kb = k.narrow(0, b.q_start, b.batch * b.k_len).view({b.batch, b.k_len, kv_heads, dim});
      vb = v.narrow(0, b.q_start, b.batch * b.k_len).view({b.batch, b.k_len, kv_heads, dim});
    } else {
      qb = q_parts[gathered_q++].view({b.batch, b.q_len, heads, dim});
      kb = k_parts[gathered_k].view({b.batch, b.k_len, kv_heads, dim});
      vb = v_parts[gathered_k++].view({b.batch, b.k_len, kv_heads, dim});
    }
    torch::Tensor out;  // (B, L_q, H, D)
    if (!plan.fused) {
      out = batched_attention(qb, kb, vb, b.blocked);
    } else if (b.p_index.defined()) {
      const int64_t p = b.p_index.size(0);
      const auto prefix = [&](const torch::Tensor& rows) {  // (P, H_kv, D) -> (B, H_kv, P, D), stride-0 batch
        return rows.view({1, p, kv_heads, dim}).transpose(1, 2).expand({b.batch, kv_heads, p, dim});
      };
      const torch::Tensor kp = prefix(k_parts[gathered_k]), vp = prefix(v_parts[gathered_k++]);
      out =
          fused_prefixed_attention(qb.transpose(1, 2), kp, vp, kb.transpose(1, 2), vb.transpose(1, 2)).transpose(1, 2);
    } else {
      // Padding sits at the end of each row: a real query i sees keys j <= i, all real.
      out = fused_attention(qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2), true).transpose(1, 2);
    }
    out = out.reshape({b.batch * b.q_len, heads, dim});
    parts.push_back(b.real_rows.defined() ? out.index_select(0, b.real_rows) : out);
  }
  torch::Tensor out = parts.size() == 1 ? parts[0] : torch::cat(parts, 0);  // (N, H, D), bucket order
  return plan.order.defined() ? out.index_select(0, plan.order) : out;
}

torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const std::vector<AttentionSegment>& segments) {
  return packed_attention(q, k, v, plan_packed_attention(segments, q.size(0), k.size(0), q.size(1), q.device(), false));
}

torch::Tensor padded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, bool fused, int64_t window) {
  const int64_t b = q.size(0), t = q.size(1);
  const auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(q.device());
  const bool bites = window > 0 && t > window;
  torch::Tensor band;  // (T, T): key column j seen from query column i when j > i - window
  if (bites) band = torch::ones({t, t}, bool_opts).triu(1 - window);
  if (fused) {  // causal plus the key mask: a real token sees no padding, whichever side it sits
    torch::Tensor allowed = key_valid.view({b, 1, 1, t});  // (B, 1, 1, T) or (B, 1, T, T)
    if (bites) allowed = allowed & band.view({1, 1, t, t});
    return fused_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), true, allowed).transpose(1, 2);
  }
  torch::Tensor causal = torch::ones({t, t}, bool_opts).tril();  // (T, T)
  if (bites) causal = causal & band;
  const torch::Tensor self = torch::eye(t, bool_opts);                                     // (T, T)
  const torch::Tensor allowed = causal & (key_valid.view({b, 1, t}) | self.unsqueeze(0));  // (B, T, T)
  return batched_attention(q, k, v, ~allowed.view({b, 1, 1, t, t}));                       // (B, T, H, D)
}

namespace {

// The groups' rows of a prefix store (P_slots, H_kv, P_cap, D): (g, H_kv, P, D), a view when the
// slots are consecutive (the usual case), else a gather.
torch::Tensor prefix_rows(const torch::Tensor& store, const PrefixIndex& groups) {
  const torch::Tensor slots =
      groups.first >= 0 ? store.narrow(0, groups.first, groups.groups) : store.index_select(0, groups.slots);
  return slots.narrow(2, 0, groups.longest);
}

// (n, H_kv, G, X) per sequence -> (g, H_kv, m_max G, X) per group, padding readers zero rows.
torch::Tensor to_groups(const torch::Tensor& x, const PrefixIndex& groups) {
  const int64_t kv_heads = x.size(1), group = x.size(2), g = groups.groups, m_max = groups.widest;
  const torch::Tensor padded = torch::cat({x, torch::zeros({1, kv_heads, group, x.size(3)}, x.options())});
  return padded.index_select(0, groups.gather)
      .view({g, m_max, kv_heads, group, x.size(3)})
      .permute({0, 2, 1, 3, 4})
      .reshape({g, kv_heads, m_max * group, x.size(3)});
}

// The inverse: (g, H_kv, m_max G, X) -> (n, H_kv, G, X); a sequence in no group gets `fill`.
torch::Tensor to_sequences(const torch::Tensor& x, const PrefixIndex& groups, int64_t group, double fill) {
  const int64_t kv_heads = x.size(1), g = groups.groups, m_max = groups.widest;
  const torch::Tensor rows = x.view({g, kv_heads, m_max, group, x.size(3)})
                                 .permute({0, 2, 1, 3, 4})
                                 .reshape({g * m_max, kv_heads, group, x.size(3)});
  const torch::Tensor none = torch::full({1, kv_heads, group, x.size(3)}, fill, x.options());
  return torch::cat({rows, none}).index_select(0, groups.place);
}

// Decoding on the CPU flash kernel: the G query heads of a kv head are that head's G query rows,
// so one kernel call covers all sequences' own rows and one all groups' prefixes (the prompt's
// keys read once per group, as in the materialised form); the two parts merge by their
// log-sum-exps. No score tensor is built and no K/V is copied; the queries' regrouping and the
// merge are host loops (decode_merge.h).
torch::Tensor fused_decode(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& key_valid, const torch::Tensor& pk, const torch::Tensor& pv,
                           const PrefixIndex& groups) {
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k.size(1), span = k.size(2);
  const int64_t group = heads / kv_heads;
  const torch::Tensor qg = q.view({n, kv_heads, group, dim});  // (n, H_kv, G, D)
  auto [own, own_lse] =
      fused_attention_lse(qg, k, v, key_valid.view({n, 1, 1, span}));  // (n, H_kv, G, D), (n, H_kv, G)
  if (groups.groups == 0) return own.reshape({n, heads, dim});
  const int64_t g = groups.groups, longest = groups.longest;
  auto [pre, pre_lse] =  // (g, H_kv, m_max G, D), (g, H_kv, m_max G)
      fused_attention_lse(gather_readers(qg, groups.gather, g, groups.widest), prefix_rows(pk, groups),
                          prefix_rows(pv, groups), groups.beyond.logical_not().view({g, 1, 1, longest}));
  return merge_by_lse(own, own_lse, pre, pre_lse, groups.place, groups.widest);  // (n, H, D)
}

}  // namespace

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, bool fused) {
  if (fused && q.device().is_cpu()) return fused_decode(q, k, v, key_valid, {}, {}, PrefixIndex{});
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k.size(1), span = k.size(2);
  const int64_t group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const torch::Tensor qg = q.view({n, kv_heads, group, dim});                    // (n, H_kv, G, D)
  const torch::Tensor scores = torch::matmul(qg, k.transpose(2, 3)).mul(scale);  // (n, H_kv, G, S)
  const torch::Tensor blocked = key_valid.logical_not().view({n, 1, 1, span});   // (n, 1, 1, S)
  const torch::Tensor probs = masked_softmax(scores, blocked, q.scalar_type());  // (n, H_kv, G, S)
  return torch::matmul(probs, v).view({n, heads, dim});                          // (n, H_kv, G, D) -> (n, H, D)
}

PrefixIndex prefix_index(const std::vector<PrefixGroup>& groups, int64_t n, const torch::Device& device, int64_t window,
                         const std::vector<int64_t>& positions) {
  PrefixIndex x;
  x.groups = static_cast<int64_t>(groups.size());
  if (x.groups == 0) return x;
  for (const PrefixGroup& grp : groups) {
    // A query that sees no key has no softmax: the flash kernel would return zeros with lse 0.
    if (grp.length < 1 || grp.members.empty())
      throw std::invalid_argument("prefix_index: prefix " + std::to_string(grp.prefix) +
                                  " needs at least one row and one reader");
    x.widest = std::max<int64_t>(x.widest, grp.members.size()), x.longest = std::max(x.longest, grp.length);
  }
  const int64_t g = x.groups, m_max = x.widest;
  std::vector<int64_t> gather(static_cast<size_t>(g * m_max), n), place(static_cast<size_t>(n), g * m_max);
  std::vector<int64_t> ids, lengths;
  for (int64_t j = 0; j < g; ++j) {
    const std::vector<int64_t>& members = groups[j].members;
    for (size_t r = 0; r < members.size(); ++r) {
      const int64_t i = members[r];
      gather[j * m_max + r] = i, place[i] = j * m_max + static_cast<int64_t>(r);
    }
    ids.push_back(groups[j].prefix), lengths.push_back(groups[j].length);
  }
  bool consecutive = true;
  for (int64_t j = 1; j < g; ++j) consecutive = consecutive && ids[j] == ids[0] + j;
  x.first = consecutive ? ids[0] : -1;
  const auto idx = torch::TensorOptions().dtype(torch::kInt64).device(device);
  x.slots = torch::tensor(ids, torch::kInt64).to(device);
  x.gather = torch::tensor(gather, torch::kInt64).to(device);
  x.place = torch::tensor(place, torch::kInt64).to(device);
  x.beyond =
      torch::arange(x.longest, idx).unsqueeze(0) >= torch::tensor(lengths, torch::kInt64).to(device).unsqueeze(1);
  if (window > 0) {
    if (static_cast<int64_t>(positions.size()) != n)
      throw std::invalid_argument("prefix_index: a sliding window needs every sequence's position");
    bool bites = false;  // prefix key p is out of reader i's window when p <= position_i - window
    std::vector<int64_t> last_unseen(static_cast<size_t>(g * m_max), -1);
    for (int64_t r = 0; r < g * m_max; ++r)
      if (gather[r] < n) {
        last_unseen[r] = positions[gather[r]] - window;
        bites = bites || last_unseen[r] >= 0;
      }
    if (bites)
      x.outside = (torch::arange(x.longest, idx).view({1, x.longest}) <=
                   torch::tensor(last_unseen, torch::kInt64).to(device).view({-1, 1}))
                      .view({g, 1, m_max, 1, x.longest});
  }
  return x;
}

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, const torch::Tensor& pk, const torch::Tensor& pv,
                               const PrefixIndex& groups, bool fused) {
  if (groups.groups == 0) return decode_attention(q, k, v, key_valid, fused);
  if (fused && q.device().is_cpu() && !groups.outside.defined())
    return fused_decode(q, k, v, key_valid, pk, pv, groups);
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k.size(1), span = k.size(2);
  const int64_t group = heads / kv_heads, g = groups.groups, m_max = groups.widest, longest = groups.longest;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const double kInf = std::numeric_limits<double>::infinity();
  const torch::ScalarType ct = compute_dtype(q.scalar_type());
  const torch::Tensor keys_t =  // (g, H_kv, D, P)
      prefix_rows(pk, groups).transpose(2, 3);
  const torch::Tensor values = prefix_rows(pv, groups);  // (g, H_kv, P, D)
  const auto by_group = [&](const torch::Tensor& x) { return to_groups(x, groups); };
  const auto by_seq = [&](const torch::Tensor& x, double fill) { return to_sequences(x, groups, group, fill); };
  const torch::Tensor qg = q.view({n, kv_heads, group, dim}).mul(scale);  // (n, H_kv, G, D), scaled once
  // Two softmax parts merged by their maxima and sums (the big score tensors never move):
  // the own rows per sequence, and the prefix rows per group, one (m_max G x D) x (D x P)
  // product per group and kv head (the stored keys' transposed view as the GEMM's B).
  const torch::Tensor own = torch::matmul(qg, k.transpose(2, 3))  // (n, H_kv, G, S)
                                .to(ct)
                                .masked_fill(key_valid.logical_not().view({n, 1, 1, span}), -kInf);
  torch::Tensor pre = torch::matmul(by_group(qg), keys_t)
                          .to(ct)
                          .masked_fill(  // (g, H_kv, m_max G, P)
                              groups.beyond.view({g, 1, 1, longest}), -kInf);
  if (groups.outside.defined())  // the sliding window, per reader
    pre = pre.masked_fill(groups.outside.expand({g, 1, m_max, group, longest}).reshape({g, 1, m_max * group, longest}),
                          -kInf);
  const torch::Tensor top =  // (n, H_kv, G, 1): the larger of the two parts' maxima
      torch::maximum(std::get<0>(own.max(-1, true)), by_seq(std::get<0>(pre.max(-1, true)), -kInf));
  const torch::Tensor own_e = (own - top).exp_();                                    // (n, H_kv, G, S)
  const torch::Tensor pre_e = (pre - by_group(top)).exp_();                          // (g, H_kv, m_max G, P)
  const torch::Tensor total = own_e.sum(-1, true) + by_seq(pre_e.sum(-1, true), 0);  // (n, H_kv, G, 1)
  const torch::Tensor out = torch::matmul(own_e.to(q.scalar_type()), v).to(ct) +     // (n, H_kv, G, D)
                            by_seq(torch::matmul(pre_e.to(q.scalar_type()), values).to(ct), 0);
  return out.div_(total).to(q.scalar_type()).view({n, heads, dim});
}

}  // namespace tandem::models
