// The fused attention entry against an explicit softmax(q k^T / sqrt(D) + mask) v written out
// here (K/V heads repeated as HF's repeat_kv): causal with GQA, key masks with a row that sees no
// key, and the prefixed form (two kernels merged by log-sum-exp) against attention over the
// concatenated span; outputs and gradients in float64 at 1e-12 (LibTorch's flash kernel runs
// float64 too), float32 at 1e-5. Control: SDPA's own causal flag over the concatenation (top-left
// aligned) is another attention, and the comparison tells them apart.
#include <catch2/catch.hpp>

#include <limits>

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
