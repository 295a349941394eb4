// The prefixed form runs the kernel twice, once over the prefix (no mask) and once over the own
// keys (causal), and merges the two by their log-sum-exps: out = sum_i exp(lse_i - lse) out_i
// with lse = logaddexp(lse_1, lse_2). Its backward hands each kernel's backward the merged output
// and log-sum-exp, which makes each part's gradient the gradient of the one softmax over both
// spans (the probabilities it rebuilds are exp(s - lse), the row term is dO . out), so no score
// matrix is ever held and nothing is approximated. On CUDA, packed rows of whole sequences in bf16
// or fp16 go to FlashAttention's variable-length kernel (fused_varlen_attention) without
// bucketing; the rest as on the CPU but through scaled_dot_product_attention. On CUDA the prefixed
// form concatenates the two
// spans and passes a bottom-right mask instead (LibTorch's CUDA kernels are reached only through
// scaled_dot_product_attention here, which returns no log-sum-exp); that mask is (L, P + L) bool.
// On CPU a bf16 / fp16 backward over short rows runs the kernel in float32 (backward_dtype).
#include "models/layers/fused_attention.h"

#include <ATen/ops/_flash_attention_forward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>

#include <limits>
#include <stdexcept>

namespace tandem::models {

namespace {

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const char* what) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || k.sizes() != v.sizes() || q.size(0) != k.size(0) ||
      q.size(3) != k.size(3) || k.size(1) < 1 || q.size(1) % k.size(1) != 0)
    throw std::invalid_argument(std::string(what) + ": needs q (B, H, L_q, D) and k, v (B, H_kv, L_k, D), H_kv | H");
}

// 0 where allowed, -inf elsewhere, in q's dtype (the CPU kernel adds the mask to the scores).
torch::Tensor additive_mask(const torch::Tensor& allowed, const torch::Tensor& q) {
  return torch::zeros(allowed.sizes(), q.options())
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// The CPU flash backward's dtype for inputs of `dtype` with `lq` query rows. In bf16 / fp16 the
// kernel's five GEMMs per (q block, kv block) go through the reduced-precision GEMM, whose per-call
// cost dominates short rows (queries under 192 take 32-row blocks): on the Qwen2-0.5B shape (14
// heads, 2 kv heads, head dim 64, 2 threads) 16 x 164 rows take 67 ms in bf16 against 27 ms in
// float32 with the casts, 8 x 256 29 against 22 ms; from 512 rows bf16 is faster (36 vs 40 ms,
// 2,048: 75 vs 101 ms). float32 is also the more accurate: the bf16 kernel rounds the
// probabilities and their gradients to bf16 before its GEMMs and accumulates dK, dV in bf16
// across query blocks (dK's error against float64 there 7.9e-3 relative, float32's 1.9e-3, at the
// bf16 output rounding). The forward stays in the input dtype (bf16 is faster there).
constexpr int64_t kFloat32BackwardBelow = 384;
torch::ScalarType backward_dtype(torch::ScalarType dtype, int64_t lq) {
  const bool reduced = dtype == torch::kBFloat16 || dtype == torch::kHalf;
  return reduced && lq < kFloat32BackwardBelow ? torch::kFloat32 : dtype;
}

// t in `dt`; a batch broadcast with stride 0 (one shared prefix) stays one copy.
torch::Tensor cast(const torch::Tensor& t, torch::ScalarType dt) {
  if (t.scalar_type() == dt) return t;
  if (t.size(0) > 1 && t.stride(0) == 0) return t.narrow(0, 0, 1).to(dt).expand(t.sizes());
  return t.to(dt);
}

// The CPU flash kernel as one autograd node, so that its backward can take backward_dtype.
struct CpuFlashAttention : torch::autograd::Function<CpuFlashAttention> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v, bool causal,
                                                const std::optional<torch::Tensor>& mask) {
    const auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, mask);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["mask"] = mask;  // no gradient: a constant of the layout
    return {out};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3], &lse = s[4];
    const torch::ScalarType dt = backward_dtype(q.scalar_type(), q.size(2));
    std::optional<torch::Tensor> mask = ctx->saved_data["mask"].toOptional<torch::Tensor>();
    if (mask) mask = cast(*mask, dt);
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        cast(grads[0], dt), cast(q, dt), cast(k, dt), cast(v, dt), cast(out, dt), lse, 0.0,
        ctx->saved_data["causal"].toBool(), mask);
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

struct PrefixedAttention : torch::autograd::Function<PrefixedAttention> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                                                const torch::Tensor& kp, const torch::Tensor& vp,
                                                const torch::Tensor& ko, const torch::Tensor& vo) {
    const auto [o1, l1] = at::_scaled_dot_product_flash_attention_for_cpu(q, kp, vp, 0.0, false);  // l: (B, H, L)
    const auto [o2, l2] = at::_scaled_dot_product_flash_attention_for_cpu(q, ko, vo, 0.0, true);
    const torch::Tensor lse = torch::logaddexp(l1, l2);  // (B, H, L), float32 (float64 for float64)
    const torch::ScalarType ct = lse.scalar_type();
    const torch::Tensor out =  // (B, H, L, D)
        (o1.to(ct) * (l1 - lse).exp_().unsqueeze(-1) + o2.to(ct) * (l2 - lse).exp_().unsqueeze(-1)).to(q.scalar_type());
    ctx->save_for_backward({q, kp, vp, ko, vo, out, lse});
    return {out};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &kp = s[1], &vp = s[2], &ko = s[3], &vo = s[4], &out = s[5], &lse = s[6];
    const torch::ScalarType dt = backward_dtype(q.scalar_type(), q.size(2));
    const torch::Tensor g = cast(grads[0], dt), qc = cast(q, dt), oc = cast(out, dt);
    auto [dq1, dkp, dvp] = at::_scaled_dot_product_flash_attention_for_cpu_backward(g, qc, cast(kp, dt), cast(vp, dt),
                                                                                    oc, lse, 0.0, false);
    auto [dq2, dko, dvo] =
        at::_scaled_dot_product_flash_attention_for_cpu_backward(g, qc, cast(ko, dt), cast(vo, dt), oc, lse, 0.0, true);
    return {dq1.add_(dq2).to(q.scalar_type()), dkp.to(kp.scalar_type()), dvp.to(vp.scalar_type()),
            dko.to(ko.scalar_type()), dvo.to(vo.scalar_type())};
  }
};

}  // namespace

bool use_fused_attention(AttentionKernel choice, torch::ScalarType dtype) {
  switch (choice) {
    case AttentionKernel::kFused:
      return true;
    case AttentionKernel::kMaterialised:
      return false;
    case AttentionKernel::kAuto:
      break;
  }
  return dtype != torch::kFloat64;
}

std::optional<AttentionKernel> parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionKernel::kAuto;
  if (name == "fused") return AttentionKernel::kFused;
  if (name == "materialised") return AttentionKernel::kMaterialised;
  return std::nullopt;
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kFused:
      return "fused";
    case AttentionKernel::kMaterialised:
      return "materialised";
    case AttentionKernel::kAuto:
      break;
  }
  return "auto";
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                              const torch::Tensor& allowed) {
  check_shapes(q, k, v, "fused_attention");
  if (q.is_cuda()) {
    // SDPA on CUDA refuses a mask together with is_causal (the math kernel, which GQA in float32
    // falls to, says so), so the causal part goes into the mask: query i sees keys j <= i.
    std::optional<torch::Tensor> mask;
    bool is_causal = causal;
    if (allowed.defined()) {
      mask = allowed;
      if (causal) {
        const int64_t lq = q.size(2), lk = k.size(2);
        mask = allowed & torch::ones({lq, lk}, allowed.options().dtype(torch::kBool)).tril();  // (.., L_q, L_k)
        is_causal = false;
      }
    }
    return at::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, std::nullopt, /*enable_gqa=*/true);
  }
  std::optional<torch::Tensor> mask;
  if (allowed.defined()) mask = additive_mask(allowed, q);
  return CpuFlashAttention::apply(q, k, v, causal, mask)[0];
}

torch::Tensor fused_prefixed_attention(const torch::Tensor& q, const torch::Tensor& kp, const torch::Tensor& vp,
                                       const torch::Tensor& ko, const torch::Tensor& vo) {
  check_shapes(q, kp, vp, "fused_prefixed_attention");
  check_shapes(q, ko, vo, "fused_prefixed_attention");
  const int64_t l = q.size(2), p = kp.size(2);
  if (ko.size(2) != l || p < 1)
    throw std::invalid_argument(
        "fused_prefixed_attention: own keys must match the queries and the prefix be non-empty");
  if (q.is_cuda()) {
    const auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(q.device());
    const torch::Tensor allowed =  // (L, P + L): query i sees the prefix and own keys j <= i
        torch::arange(p + l, bool_opts.dtype(torch::kInt64)).unsqueeze(0) <=
        torch::arange(l, bool_opts.dtype(torch::kInt64)).unsqueeze(1) + p;
    return at::scaled_dot_product_attention(q, torch::cat({kp, ko}, 2), torch::cat({vp, vo}, 2), allowed, 0.0, false,
                                            std::nullopt, /*enable_gqa=*/true);
  }
  return PrefixedAttention::apply(q, kp, vp, ko, vo)[0];
}

std::pair<torch::Tensor, torch::Tensor> fused_attention_lse(const torch::Tensor& q, const torch::Tensor& k,
                                                            const torch::Tensor& v, const torch::Tensor& allowed) {
  check_shapes(q, k, v, "fused_attention_lse");
  if (!q.device().is_cpu())
    throw std::invalid_argument("fused_attention_lse: the CPU flash kernel, got tensors on " + q.device().str());
  std::optional<torch::Tensor> mask;
  if (allowed.defined()) mask = additive_mask(allowed, q);
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false, mask);
  return {out, lse};
}

torch::Tensor fused_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& cu, int64_t max_len, int64_t window) {
  if (!q.is_cuda() || (q.scalar_type() != torch::kBFloat16 && q.scalar_type() != torch::kHalf))
    throw std::invalid_argument("fused_varlen_attention: needs bf16 or fp16 tensors on a GPU, got " +
                                std::string(c10::toString(q.scalar_type())) + " on " + q.device().str());
  if (q.dim() != 3 || k.dim() != 3 || k.sizes() != v.sizes() || q.size(0) != k.size(0) || q.size(2) != k.size(2) ||
      q.size(1) % k.size(1) != 0)
    throw std::invalid_argument("fused_varlen_attention: needs q (N, H, D) and k, v (N, H_kv, D), H_kv | H");
  // FlashAttention's window counts keys inclusively: (left, right) = (window - 1, 0) is HF's.
  std::optional<int64_t> left, right;
  if (window > 0) left = window - 1, right = 0;
  return std::get<0>(at::_flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, /*is_causal=*/true,
                                                  /*return_debug_mask=*/false, std::nullopt, left, right));
}

}  // namespace tandem::models
