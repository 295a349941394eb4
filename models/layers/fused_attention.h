// The one fused scaled dot-product attention every model calls: LibTorch's flash kernels, which
// never hold an (L_q, L_k) score matrix (memory linear in the sequence, forward and backward). On
// CPU the flash kernel itself (_scaled_dot_product_flash_attention_for_cpu, GQA native); on CUDA
// scaled_dot_product_attention with enable_gqa, which picks FlashAttention or the memory-efficient
// kernel. Plus the prefixed form (queries that see all of a prefix, then their own keys
// causally), two kernel calls merged by their log-sum-exps. float64 stays on each model's
// materialised attention, the reference the fused kernels are tested against.
#pragma once

#include <torch/torch.h>

#include <utility>

#include "models/layers/attention_kernel.h"

namespace tandem::models {

bool use_fused_attention(AttentionKernel choice, torch::ScalarType dtype);

// q (B, H, L_q, D); k, v (B, H_kv, L_k, D) with H a multiple of H_kv (query head h reads kv head
// h / (H / H_kv), as HF's repeat_kv); any strides with a contiguous last dim, a stride-0 batch
// included. causal: query i sees keys j <= i (top-left aligned, as SDPA). allowed: undefined or
// bool broadcastable to (B, 1, L_q, L_k), true where a query may see a key. Returns
// (B, H, L_q, D); a query that may see no key gets zeros (and passes no gradient).
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                              const torch::Tensor& allowed = {});

// q (B, H, L, D) sees every key of kp / vp (B, H_kv, P, D), P >= 1, then the keys of ko / vo
// (B, H_kv, L, D) causally: query i sees own keys j <= i. That is causal attention over the
// concatenated span aligned at the bottom right, without building the span: a shared prompt's
// response, or a context-parallel shard whose earlier positions live on other ranks. kp / vp may
// be one prefix expanded over the batch (stride 0). Returns (B, H, L, D).
torch::Tensor fused_prefixed_attention(const torch::Tensor& q, const torch::Tensor& kp, const torch::Tensor& vp,
                                       const torch::Tensor& ko, const torch::Tensor& vo);

// CPU, no autograd (decoding): the flash kernel's output and its log-sum-exp, for a caller that
// merges attention over several key sets by their log-sum-exps (a decode step's shared prompt and
// its own rows). Shapes and `allowed` as fused_attention's, not causal; every query must see at
// least one key (the kernel gives a query that sees none zeros and lse 0, not -inf). Returns out
// (B, H, L, D) in q's dtype and lse (B, H, L) in float32 (float64 for float64). Throws
// std::invalid_argument on another device.
std::pair<torch::Tensor, torch::Tensor> fused_attention_lse(const torch::Tensor& q, const torch::Tensor& k,
                                                            const torch::Tensor& v, const torch::Tensor& allowed = {});

// CUDA, bf16 / fp16: FlashAttention's variable-length kernel (at::_flash_attention_forward,
// differentiable) on packed rows. q (N, H, D), k, v (N, H_kv, D), H_kv | H; cu (B+1) int32 on
// q's device: sequence b is rows [cu[b], cu[b+1]), causal within itself; max_len its longest.
// window > 0: key j is seen from query i when i - window < j <= i (HF's sliding window). Returns
// (N, H, D). Throws std::invalid_argument on another device or dtype.
torch::Tensor fused_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& cu, int64_t max_len, int64_t window = 0);

}  // namespace tandem::models
