// The fused attention entry against an explicit softmax(q k^T / sqrt(D) + mask) v written out
// here (K/V heads repeated as HF's repeat_kv): causal with GQA, key masks with a row that sees no
// key, and the prefixed form (two kernels merged by log-sum-exp) against attention over the
// concatenated span; outputs and gradients in float64 at 1e-12 (LibTorch's flash kernel runs
// float64 too), float32 at 1e-5. Control: SDPA's own causal flag over the concatenation (top-left
// aligned) is another attention, and the comparison tells them apart. A bf16 backward over short
// rows (float32 inside) against float64, with the kernel's own bf16 backward as the control.
#include <catch2/catch.hpp>

#include <limits>

#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>

#include "models/layers/fused_attention.h"

using namespace tandem::models;

namespace {

// q (B, H, L_q, D), k / v (B, H_kv, L_k, D), allowed broadcastable to (B, 1, L_q, L_k).
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& allowed) {
  const int64_t group = q.size(1) / k.size(1);
  const torch::Tensor kr = k.repeat_interleave(group, 1), vr = v.repeat_interleave(group, 1);  // (B, H, L_k, D)
  const torch::Tensor scores = torch::matmul(q, kr.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));
  const torch::Tensor probs =
      torch::softmax(scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(torch::nan_to_num(probs, 0.0), vr);  // a row with no key: zeros, as the kernel
}

torch::Tensor causal_mask(int64_t lq, int64_t lk, int64_t shift) {  // query i sees keys j <= i + shift
  return torch::arange(lk).unsqueeze(0) <= torch::arange(lq).unsqueeze(1) + shift;
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() /
         std::max(1e-300, b.to(torch::kFloat64).abs().max().item<double>());
}

std::vector<torch::Tensor> grads_of(const torch::Tensor& out, const std::vector<torch::Tensor>& inputs,
                                    const torch::Tensor& w) {
  return torch::autograd::grad({(out.to(torch::kFloat64) * w).sum()}, inputs);
}

}  // namespace

TEST_CASE("fused attention: causal GQA and key masks equal the explicit softmax", "[fused_attention]") {
  torch::manual_seed(7);
  const int64_t b = 3, heads = 6, kv_heads = 2, lq = 37, dim = 16;
  for (const auto& [dt, tol] : {std::pair{torch::kFloat64, 1e-12}, std::pair{torch::kFloat32, 1e-5}}) {
    INFO("dtype " << dt);
    const auto o = torch::TensorOptions().dtype(dt);
    const torch::Tensor q = torch::randn({b, heads, lq, dim}, o).requires_grad_(true);
    const torch::Tensor k = torch::randn({b, kv_heads, lq, dim}, o).requires_grad_(true);
    const torch::Tensor v = torch::randn({b, kv_heads, lq, dim}, o).requires_grad_(true);
    const torch::Tensor w = torch::randn({b, heads, lq, dim}, torch::kFloat64);
    // Causal.
    const torch::Tensor out = fused_attention(q, k, v, true);
    const torch::Tensor ref = reference(q, k, v, causal_mask(lq, lq, 0));
    CHECK(max_rel(out, ref) <= tol);
    const auto g = grads_of(out, {q, k, v}, w), gr = grads_of(ref, {q, k, v}, w);
    for (size_t i = 0; i < 3; ++i) CHECK(max_rel(g[i], gr[i]) <= tol);
    // A key mask per batch row on top of causal, where row 1's first key is masked: its query 0
    // sees no key and gets zeros, with finite gradients.
    torch::Tensor key_valid = torch::ones({b, lq}, torch::kBool);
    key_valid.index_put_({0, torch::indexing::Slice(30, torch::indexing::None)}, false);
    key_valid.index_put_({1, 0}, false);
    const torch::Tensor allowed = key_valid.view({b, 1, 1, lq});
    const torch::Tensor masked = fused_attention(q, k, v, true, allowed);
    const torch::Tensor masked_ref = reference(q, k, v, allowed & causal_mask(lq, lq, 0));
    CHECK(max_rel(masked, masked_ref) <= tol);
    CHECK(masked[1].select(1, 0).abs().max().item<double>() == 0.0);
    const auto gm = grads_of(masked, {q, k, v}, w), gmr = grads_of(masked_ref, {q, k, v}, w);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(torch::isfinite(gm[i]).all().item<bool>());
      CHECK(max_rel(gm[i], gmr[i]) <= tol);
    }
    // A full (B, 1, L_q, L_k) mask, not causal (the unified model's form), and no mask at all (the DiT's).
    const torch::Tensor dense = torch::rand({b, 1, lq, lq}) > 0.3 | torch::eye(lq, torch::kBool);
    CHECK(max_rel(fused_attention(q, k, v, false, dense), reference(q, k, v, dense)) <= tol);
    CHECK(max_rel(fused_attention(q, k, v, false), reference(q, k, v, torch::ones({1, 1, 1, 1}, torch::kBool))) <= tol);
  }
}

TEST_CASE("fused attention: the prefixed form is bottom-right causal attention over prefix + own keys",
          "[fused_attention]") {
  torch::manual_seed(9);
  const int64_t b = 4, heads = 4, kv_heads = 2, l = 23, p = 41, dim = 8;
  for (const auto& [dt, tol] : {std::pair{torch::kFloat64, 1e-12}, std::pair{torch::kFloat32, 1e-5}}) {
    INFO("dtype " << dt);
    const auto o = torch::TensorOptions().dtype(dt);
    const torch::Tensor q = torch::randn({b, heads, l, dim}, o).requires_grad_(true);
    const torch::Tensor kp1 = torch::randn({1, kv_heads, p, dim}, o).requires_grad_(true);  // one shared prefix
    const torch::Tensor vp1 = torch::randn({1, kv_heads, p, dim}, o).requires_grad_(true);
    const torch::Tensor ko = torch::randn({b, kv_heads, l, dim}, o).requires_grad_(true);
    const torch::Tensor vo = torch::randn({b, kv_heads, l, dim}, o).requires_grad_(true);
    const torch::Tensor w = torch::randn({b, heads, l, dim}, torch::kFloat64);
    const torch::Tensor kp = kp1.expand({b, kv_heads, p, dim}), vp = vp1.expand({b, kv_heads, p, dim});
    const torch::Tensor out = fused_prefixed_attention(q, kp, vp, ko, vo);
    const torch::Tensor kc = torch::cat({kp, ko}, 2), vc = torch::cat({vp, vo}, 2);  // (B, H_kv, P + L, D)
    const torch::Tensor ref = reference(q, kc, vc, causal_mask(l, p + l, p));
    CHECK(max_rel(out, ref) <= tol);
    const std::vector<torch::Tensor> inputs{q, kp1, vp1, ko, vo};
    const auto g = grads_of(out, inputs, w), gr = grads_of(ref, inputs, w);
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("gradient " << i << " (q, kp, vp, ko, vo)");
      CHECK(max_rel(g[i], gr[i]) <= tol);
    }
    // Control: SDPA's own causal flag aligns at the top left, which is another attention.
    CHECK(max_rel(fused_attention(q, kc, vc, true), ref) > 1e-2);
  }
}

TEST_CASE("fused attention: which dtypes fuse, and the kernel names", "[fused_attention]") {
  CHECK(use_fused_attention(AttentionKernel::kAuto, torch::kFloat32));
  CHECK(use_fused_attention(AttentionKernel::kAuto, torch::kBFloat16));
  CHECK_FALSE(use_fused_attention(AttentionKernel::kAuto, torch::kFloat64));  // the materialised reference
  CHECK(use_fused_attention(AttentionKernel::kFused, torch::kFloat64));
  CHECK_FALSE(use_fused_attention(AttentionKernel::kMaterialised, torch::kFloat32));
  for (const auto kernel : {AttentionKernel::kAuto, AttentionKernel::kFused, AttentionKernel::kMaterialised})
    CHECK(parse_attention_kernel(attention_kernel_name(kernel)) == kernel);
  CHECK_FALSE(parse_attention_kernel("flash").has_value());
  const torch::Tensor q = torch::randn({1, 3, 4, 8}), k = torch::randn({1, 2, 4, 8});
  CHECK_THROWS_AS(fused_attention(q, k, k, true), std::invalid_argument);  // 2 kv heads do not divide 3
}

TEST_CASE(
    "fused attention: a bf16 backward over short rows runs in float32, at the bf16 rounding of its gradients "
    "(the bf16 kernel's is 3-4x that)",
    "[fused_attention]") {
  torch::manual_seed(11);
  // The Qwen2-0.5B head shape (head dim 64, 7 query heads a kv head), rows of a short response.
  const int64_t b = 2, heads = 14, kv_heads = 2, lq = 164, p = 100, dim = 64;
  const auto bf = torch::TensorOptions().dtype(torch::kBFloat16);
  const torch::Tensor q = torch::randn({b, heads, lq, dim}, bf).requires_grad_(true);
  const torch::Tensor k = torch::randn({b, kv_heads, lq, dim}, bf).requires_grad_(true);
  const torch::Tensor v = torch::randn({b, kv_heads, lq, dim}, bf).requires_grad_(true);
  const torch::Tensor kp = torch::randn({b, kv_heads, p, dim}, bf).requires_grad_(true);
  const torch::Tensor vp = torch::randn({b, kv_heads, p, dim}, bf).requires_grad_(true);
  const torch::Tensor w = torch::randn({b, heads, lq, dim}, torch::kBFloat16);  // the upstream gradient
  // Relative (Frobenius) error of each gradient against float64 autograd through the reference.
  const auto errors = [&](const std::vector<torch::Tensor>& got, const torch::Tensor& ref_out,
                          const std::vector<torch::Tensor>& ref_in) {
    const auto want = torch::autograd::grad({(ref_out * w.to(torch::kFloat64)).sum()}, ref_in);
    std::vector<double> e;
    for (size_t i = 0; i < got.size(); ++i)
      e.push_back((got[i].to(torch::kFloat64) - want[i]).norm().item<double>() / want[i].norm().item<double>());
    return e;
  };
  const auto f64 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64).requires_grad_(true); };
  // Causal.
  const std::vector<torch::Tensor> d = {f64(q), f64(k), f64(v)};
  const auto fused = torch::autograd::grad({(fused_attention(q, k, v, true) * w).sum()}, {q, k, v});
  const std::vector<double> e_fused = errors(fused, reference(d[0], d[1], d[2], causal_mask(lq, lq, 0)), d);
  // Control: the kernel's own bf16 backward on the same forward.
  const auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q.detach(), k.detach(), v.detach(), 0.0, true);
  const auto [bq, bk, bv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(w, q.detach(), k.detach(),
                                                                                     v.detach(), o, lse, 0.0, true);
  const std::vector<double> e_bf16 = errors({bq, bk, bv}, reference(d[0], d[1], d[2], causal_mask(lq, lq, 0)), d);
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient " << i << " (q, k, v): fused " << e_fused[i] << ", the bf16 kernel " << e_bf16[i]);
    CHECK(e_fused[i] < 3e-3);  // bf16's unit roundoff is 2^-9 = 1.95e-3
  }
  CHECK(e_bf16[1] > 5e-3);  // dK and dV accumulated in bf16 across query blocks
  CHECK(e_bf16[2] > 5e-3);
  // The prefixed form (a shared prompt's responses) the same way.
  const std::vector<torch::Tensor> dp = {f64(q), f64(kp), f64(vp), f64(k), f64(v)};
  const auto fused_p =
      torch::autograd::grad({(fused_prefixed_attention(q, kp, vp, k, v) * w).sum()}, {q, kp, vp, k, v});
  const torch::Tensor ref_p =
      reference(dp[0], torch::cat({dp[1], dp[3]}, 2), torch::cat({dp[2], dp[4]}, 2), causal_mask(lq, p + lq, p));
  const std::vector<double> e_p = errors(fused_p, ref_p, dp);
  for (size_t i = 0; i < e_p.size(); ++i) {
    INFO("prefixed gradient " << i << " (q, kp, vp, ko, vo): " << e_p[i]);
    CHECK(e_p[i] < 3e-3);
  }
  // A key mask (the padded layout's), where row 1's first key is masked: its query 0 sees no key.
  torch::Tensor key_valid = torch::ones({b, lq}, torch::kBool);
  key_valid.index_put_({0, torch::indexing::Slice(150, torch::indexing::None)}, false);
  key_valid.index_put_({1, 0}, false);
  const torch::Tensor allowed = key_valid.view({b, 1, 1, lq});
  const auto fused_m = torch::autograd::grad({(fused_attention(q, k, v, true, allowed) * w).sum()}, {q, k, v});
  const std::vector<double> e_m = errors(fused_m, reference(d[0], d[1], d[2], allowed & causal_mask(lq, lq, 0)), d);
  for (size_t i = 0; i < 3; ++i) {
    INFO("masked gradient " << i << " (q, k, v): " << e_m[i]);
    CHECK(torch::isfinite(fused_m[i]).all().item<bool>());
    CHECK(e_m[i] < 3e-3);
  }
}
