// The host side of a fused decode step with shared prompts (attention_core.cpp's fused_decode):
// the sequences' query rows gathered into their prompt groups, and the two attention parts (own
// rows, group prefix) merged by their log-sum-exps. Each is one pass over a few thousand numbers;
// as tensor ops (a zero row, a cat, an index_select and a permuted copy to gather; for the merge
// those again twice, a logaddexp, two exps, three casts, two products and a sum) they were some
// thirty ATen calls per layer and decode step, each costing more than its arithmetic.
#pragma once

#include <torch/types.h>

namespace tandem::models {

// x (n, H_kv, G, D) per sequence -> (g, H_kv, m_max G, D) per group: row block r of group j is
// sequence gather[j m_max + r] (g m_max int64, n for a padding reader, whose rows are zeros).
torch::Tensor gather_readers(const torch::Tensor& x, const torch::Tensor& gather, int64_t groups, int64_t widest);

// own (n, H_kv, G, D) with own_lse (n, H_kv, G) per sequence, pre (g, H_kv, m_max G, D) with
// pre_lse (g, H_kv, m_max G) per group, place (n) int64 each sequence's group position (g m_max:
// in no group) -> (n, H_kv G, D) in own's dtype: own e^(l1 - l) + pre e^(l2 - l) with l =
// logaddexp(l1, l2), in the log-sum-exps' dtype and rounded once; a sequence in no group keeps own.
// Host tensors, all floating, the outputs in one dtype and the log-sum-exps in float32 or float64.
torch::Tensor merge_by_lse(const torch::Tensor& own, const torch::Tensor& own_lse, const torch::Tensor& pre,
                           const torch::Tensor& pre_lse, const torch::Tensor& place, int64_t widest);

}  // namespace tandem::models
