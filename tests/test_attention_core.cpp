// Bucketed packed attention against a per-segment reference written out here (explicit causal
// mask, K/V heads repeated as HF's repeat_kv): outputs and gradients in float64 for whole
// sequences and for cp-style segments (query offsets into a longer K/V span), across bucket
// ratios (1 = one bucket per span, 0 = as few buckets as the score cap allows), on the
// materialised plan and on the fused one (the flash kernels run float64 too, so the same 1e-12
// holds); float32 and bfloat16 fused against the float64 reference at stated tolerances; plus
// controls where a wrong query offset must change the result. And a decode step with shared
// prefixes, materialised and fused, against one written out.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "models/llama/attention_core.h"

using namespace tandem::models;

namespace {

// One segment at a time: q (L, H, D) attends to k / v (S, H_kv, D) causally at offset o.
// window > 0: key position j is also hidden from query position i when j <= i - window (HF's rule).
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const std::vector<AttentionSegment>& segments, int64_t window = 0) {
  const int64_t heads = q.size(1), group = heads / k.size(1);
  std::vector<torch::Tensor> parts;
  for (const auto& s : segments) {
    const int64_t span = s.q_offset + s.length;
    const torch::Tensor qs = q.narrow(0, s.q_begin, s.length).transpose(0, 1);                          // (H, L, D)
    const torch::Tensor ks = k.narrow(0, s.k_begin, span).repeat_interleave(group, 1).transpose(0, 1);  // (H, S, D)
    const torch::Tensor vs = v.narrow(0, s.k_begin, span).repeat_interleave(group, 1).transpose(0, 1);  // (H, S, D)
    torch::Tensor scores = torch::matmul(qs, ks.transpose(1, 2)) / std::sqrt(static_cast<double>(q.size(2)));
    const torch::Tensor i = torch::arange(s.length).unsqueeze(1) + s.q_offset, j = torch::arange(span).unsqueeze(0);
    scores = scores.masked_fill(j > i, -std::numeric_limits<double>::infinity());  // (H, L, S)
    if (window > 0) scores = scores.masked_fill(j <= i - window, -std::numeric_limits<double>::infinity());
    parts.push_back(torch::matmul(torch::softmax(scores, -1), vs).transpose(0, 1));  // (L, H, D)
  }
  return torch::cat(parts, 0);
}

struct Case {
  std::vector<AttentionSegment> segments;
  int64_t q_rows = 0, k_rows = 0;
};

// Whole sequences of random lengths in [lo, hi], packed back to back.
Case whole_sequences(std::mt19937& rng, int64_t count, int64_t lo, int64_t hi) {
  Case c;
  std::uniform_int_distribution<int64_t> len(lo, hi);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t l = len(rng);
    c.segments.push_back({c.q_rows, l, c.q_rows, 0});
    c.q_rows += l;
  }
  c.k_rows = c.q_rows;
  return c;
}

// cp-style: each query segment is a later chunk of a longer sequence whose K/V span starts at
// k_begin, so it sees keys before its own rows.
Case offset_segments(std::mt19937& rng, int64_t count) {
  Case c;
  std::uniform_int_distribution<int64_t> len(1, 9), off(0, 12);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t l = len(rng), o = off(rng);
    c.segments.push_back({c.q_rows, l, c.k_rows, o});
    c.q_rows += l;
    c.k_rows += o + l + 2;  // spare rows between spans must never be read
  }
  return c;
}

void check_case(const Case& c, double ratio, bool fused = false) {
  torch::manual_seed(3);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor q = torch::randn({c.q_rows, 4, 8}, f64).requires_grad_(true);  // (N, H, D)
  const torch::Tensor k = torch::randn({c.k_rows, 2, 8}, f64).requires_grad_(true);  // (N_kv, H_kv, D)
  const torch::Tensor v = torch::randn({c.k_rows, 2, 8}, f64).requires_grad_(true);
  const torch::Tensor w = torch::randn({c.q_rows, 4, 8}, f64);  // a fixed upstream gradient
  const auto plan = plan_packed_attention(c.segments, c.q_rows, c.k_rows, 4, torch::kCPU, fused, ratio);
  const torch::Tensor out = packed_attention(q, k, v, plan);
  const auto g = torch::autograd::grad({(out * w).sum()}, {q, k, v});
  const torch::Tensor ref = reference_attention(q, k, v, c.segments);
  const auto gr = torch::autograd::grad({(ref * w).sum()}, {q, k, v});
  INFO("ratio " << ratio << ", fused " << fused << ", buckets " << plan.buckets.size() << ", segments "
                << c.segments.size());
  CHECK((out - ref).abs().max().item<double>() < 1e-12);
  for (int i = 0; i < 3; ++i) CHECK((g[i] - gr[i]).abs().max().item<double>() < 1e-12);
}

}  // namespace

TEST_CASE("packed attention: buckets equal the per-segment reference, outputs and gradients", "[attention]") {
  std::mt19937 rng(11);
  const Case short_rows = whole_sequences(rng, 40, 1, 24), long_tail = whole_sequences(rng, 12, 2, 90);
  const Case cp_like = offset_segments(rng, 15);
  for (const bool fused : {false, true})
    for (double ratio : {1.0, kBucketSpanRatio, 0.0}) {
      check_case(short_rows, ratio, fused);
      check_case(long_tail, ratio, fused);
      check_case(cp_like, ratio, fused);
    }
}

TEST_CASE("packed attention: fused float32 and bfloat16 against the float64 reference", "[attention][fused]") {
  // Many segments of mixed lengths, GQA (4 query heads on 2 kv heads), cp-style offsets.
  std::mt19937 rng(17);
  const Case whole = whole_sequences(rng, 30, 1, 70), cp_like = offset_segments(rng, 20);
  for (const Case* c : {&whole, &cp_like}) {
    torch::manual_seed(5);
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    const torch::Tensor q = torch::randn({c->q_rows, 4, 16}, f64), k = torch::randn({c->k_rows, 2, 16}, f64);
    const torch::Tensor v = torch::randn({c->k_rows, 2, 16}, f64), w = torch::randn({c->q_rows, 4, 16}, f64);
    const auto grads = [&](torch::ScalarType dt, bool fused) {
      const torch::Tensor qd = q.to(dt).requires_grad_(true), kd = k.to(dt).requires_grad_(true),
                          vd = v.to(dt).requires_grad_(true);
      const auto plan = plan_packed_attention(c->segments, c->q_rows, c->k_rows, 4, torch::kCPU, fused);
      const torch::Tensor out = packed_attention(qd, kd, vd, plan);
      auto g = torch::autograd::grad({(out.to(torch::kFloat64) * w).sum()}, {qd, kd, vd});
      std::vector<torch::Tensor> r{out.to(torch::kFloat64)};
      for (auto& x : g) r.push_back(x.to(torch::kFloat64));
      return r;
    };
    const auto ref = grads(torch::kFloat64, false);
    // Stated tolerances, relative to each tensor's largest entry: float32 1e-5, bfloat16 3e-2 (its
    // 8-bit mantissa on inputs and outputs; softmax and accumulation run in float32 in both paths).
    for (const auto& [dt, tol] : {std::pair{torch::kFloat32, 1e-5}, std::pair{torch::kBFloat16, 3e-2}}) {
      const auto fused = grads(dt, true), materialised = grads(dt, false);
      for (size_t i = 0; i < ref.size(); ++i) {
        INFO("dtype " << dt << ", tensor " << i << " (out, dq, dk, dv)");
        const double scale = ref[i].abs().max().item<double>();
        CHECK((fused[i] - ref[i]).abs().max().item<double>() <= tol * scale);
        CHECK((materialised[i] - ref[i]).abs().max().item<double>() <= tol * scale);
      }
    }
  }
}

TEST_CASE("packed attention: the fused plan groups a prefix's segments and reads the prefix in place",
          "[attention][fused]") {
  const torch::Tensor cu = torch::tensor({0, 5, 9, 10, 16, 19}, torch::kInt64);
  const torch::Tensor prefix_of = torch::tensor({-1, 0, 0, 0, -1}, torch::kInt64);
  const auto plan = plan_packed_attention(segments_with_prefixes(cu, prefix_of), 19, 19, 4, torch::kCPU, true, 0.0);
  // Plain sequences (the prompt, the lone one) in one bucket; the three responses in one prefix bucket.
  REQUIRE(plan.buckets.size() == 2);
  CHECK_FALSE(plan.buckets[0].p_index.defined());
  CHECK_FALSE(plan.buckets[0].blocked.defined());
  REQUIRE(plan.buckets[1].p_index.defined());
  CHECK(plan.buckets[1].batch == 3);
  CHECK(plan.buckets[1].q_len == 6);
  CHECK(plan.buckets[1].k_len == 6);  // own rows only: the prompt is not copied per response
  CHECK(torch::equal(plan.buckets[1].p_index, torch::arange(5, torch::kInt64)));
}

TEST_CASE("packed attention: bucket count follows the span ratio; equal lengths need no gather", "[attention]") {
  std::mt19937 rng(5);
  const Case c = whole_sequences(rng, 64, 8, 24);
  const auto dev = torch::kCPU;
  CHECK(plan_packed_attention(c.segments, c.q_rows, c.k_rows, 4, dev, false, 0.0).buckets.size() == 1);
  const auto fine = plan_packed_attention(c.segments, c.q_rows, c.k_rows, 4, dev, false, 1.0);
  CHECK(fine.buckets.size() >= 10);  // one per distinct length
  const auto mid = plan_packed_attention(c.segments, c.q_rows, c.k_rows, 4, dev, false, kBucketSpanRatio);
  CHECK(mid.buckets.size() < fine.buckets.size());
  CHECK(mid.buckets.size() <= 5);

  std::vector<AttentionSegment> equal;
  for (int64_t i = 0; i < 6; ++i) equal.push_back({i * 7, 7, i * 7, 0});
  const auto dense = plan_packed_attention(equal, 42, 42, 4, dev);
  REQUIRE(dense.buckets.size() == 1);
  CHECK(dense.buckets[0].q_start == 0);  // q / k / v used in place
  CHECK_FALSE(dense.buckets[0].real_rows.defined());
  CHECK_FALSE(dense.order.defined());
}

TEST_CASE("packed attention: the score cap splits long sequences into separate buckets", "[attention]") {
  std::vector<AttentionSegment> segments;
  const int64_t len = 2048;  // 4 heads * 2048^2 = 16M scores each: two fit under the cap, not three
  for (int64_t i = 0; i < 3; ++i) segments.push_back({i * len, len, i * len, 0});
  const auto plan = plan_packed_attention(segments, 3 * len, 3 * len, 4, torch::kCPU);
  REQUIRE(plan.buckets.size() == 2);
  CHECK(plan.buckets[0].batch * 4 * len * len <= kBucketMaxScores);
}

TEST_CASE("packed attention: control, a wrong query offset changes the output", "[attention]") {
  std::mt19937 rng(2);
  Case c = offset_segments(rng, 6);
  torch::manual_seed(1);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor q = torch::randn({c.q_rows, 4, 8}, f64), k = torch::randn({c.k_rows, 2, 8}, f64);
  const torch::Tensor v = torch::randn({c.k_rows, 2, 8}, f64);
  const torch::Tensor ref = reference_attention(q, k, v, c.segments);
  std::vector<AttentionSegment> shifted = c.segments;
  for (auto& s : shifted) s.q_offset = std::max<int64_t>(0, s.q_offset - 1);
  const torch::Tensor wrong = packed_attention(q, k, v, shifted);
  CHECK((wrong - ref).abs().max().item<double>() > 1e-3);
  const auto fused = [&](const std::vector<AttentionSegment>& s) {
    return packed_attention(q, k, v, plan_packed_attention(s, c.q_rows, c.k_rows, 4, torch::kCPU, true));
  };
  CHECK((fused(c.segments) - ref).abs().max().item<double>() < 1e-12);
  CHECK((fused(shifted) - ref).abs().max().item<double>() > 1e-3);
}

TEST_CASE("packed attention: segments that miss rows or leave K/V are refused", "[attention]") {
  std::vector<AttentionSegment> gap{{0, 3, 0, 0}, {4, 2, 4, 0}};
  CHECK_THROWS_AS(plan_packed_attention(gap, 6, 6, 2, torch::kCPU), std::invalid_argument);
  std::vector<AttentionSegment> outside{{0, 3, 2, 2}};
  CHECK_THROWS_AS(plan_packed_attention(outside, 3, 6, 2, torch::kCPU), std::invalid_argument);
}

TEST_CASE("packed attention: responses sharing a prompt equal each response after its own copy (float64)",
          "[attention][share]") {
  // Shared layout: [prompt' (5 rows)] [response 1 (4)] [response 2 (1)] [response 3 (6)] [alone (3)]; each
  // response continues the prompt. The reference lays every response after its own copy of the prompt.
  const torch::Tensor cu = torch::tensor({0, 5, 9, 10, 16, 19}, torch::kInt64);
  const torch::Tensor prefix_of = torch::tensor({-1, 0, 0, 0, -1}, torch::kInt64);
  const std::vector<AttentionSegment> shared = segments_with_prefixes(cu, prefix_of);
  REQUIRE(shared.size() == 5);
  CHECK(shared[2].k_begin == 0);
  CHECK(shared[2].q_offset == 5);
  CHECK(shared[2].k_own == 9);
  torch::manual_seed(3);
  const int64_t n = 19, heads = 4, kv_heads = 2, dim = 8;
  const torch::Tensor q = torch::randn({n, heads, dim}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor k = torch::randn({n, kv_heads, dim}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor v = torch::randn({n, kv_heads, dim}, torch::kFloat64).requires_grad_(true);
  // The unshared rows: prompt' + response i for each response, then the lone sequence.
  std::vector<int64_t> rows, firsts{0}, owner;  // owner: the shared row each unshared row's output stands for
  const std::vector<std::pair<int64_t, int64_t>> responses{{5, 4}, {9, 1}, {10, 6}};
  std::vector<int64_t> lengths;
  for (size_t r = 0; r < responses.size(); ++r) {
    for (int64_t i = 0; i < 5; ++i) rows.push_back(i), owner.push_back(r == 0 ? i : -1);
    for (int64_t i = 0; i < responses[r].second; ++i)
      rows.push_back(responses[r].first + i), owner.push_back(responses[r].first + i);
    lengths.push_back(5 + responses[r].second);
  }
  for (int64_t i = 16; i < 19; ++i) rows.push_back(i), owner.push_back(i);
  lengths.push_back(3);
  std::vector<AttentionSegment> alone;
  int64_t at = 0;
  for (int64_t len : lengths) alone.push_back({at, len, at, 0}), at += len;
  const torch::Tensor index = torch::tensor(rows, torch::kInt64);
  for (const auto& [ratio, fused] : {std::pair{1.0, false}, std::pair{0.0, false}, std::pair{kBucketSpanRatio, false},
                                     std::pair{1.0, true}, std::pair{0.0, true}}) {
    INFO("span ratio " << ratio << ", fused " << fused);
    for (auto* t : {&q, &k, &v}) const_cast<torch::Tensor*>(t)->mutable_grad() = torch::Tensor();
    const torch::Tensor out =
        packed_attention(q, k, v, plan_packed_attention(shared, n, n, heads, torch::kCPU, fused, ratio));
    const torch::Tensor ref = reference_attention(q.index_select(0, index), k.index_select(0, index),
                                                  v.index_select(0, index), alone);  // (N_unshared, H, D)
    std::vector<int64_t> pick_ref, pick_out;
    for (size_t r = 0; r < owner.size(); ++r)
      if (owner[r] >= 0) pick_ref.push_back(static_cast<int64_t>(r)), pick_out.push_back(owner[r]);
    const torch::Tensor a = out.index_select(0, torch::tensor(pick_out)),
                        b = ref.index_select(0, torch::tensor(pick_ref));
    CHECK((a - b).abs().max().item<double>() <= 1e-12 * b.abs().max().item<double>());
    // Gradients: the same weighted loss of each row's output once.
    const torch::Tensor w = torch::randn(a.sizes(), torch::kFloat64);
    const auto grads = [&](const torch::Tensor& loss) {
      const auto g = torch::autograd::grad({loss}, {q, k, v});
      return std::vector<torch::Tensor>{g[0], g[1], g[2]};
    };
    const auto ga = grads((a * w).sum()), gb = grads((b * w).sum());
    for (size_t i = 0; i < 3; ++i)
      CHECK((ga[i] - gb[i]).abs().max().item<double>() <= 1e-12 * gb[i].abs().max().item<double>());
  }
  // Control: a response pointed at the wrong prompt (the lone sequence) attends to other rows.
  torch::Tensor wrong = prefix_of.clone();
  wrong[2] = 4;
  const torch::Tensor bad = packed_attention(q, k, v, segments_with_prefixes(cu, wrong));
  const torch::Tensor good = packed_attention(q, k, v, shared);
  CHECK((bad.narrow(0, 9, 1) - good.narrow(0, 9, 1)).abs().max().item<double>() > 1e-3);
  // A prefix that itself has a prefix is refused.
  CHECK_THROWS_AS(segments_with_prefixes(cu, torch::tensor({-1, 0, 1, 0, -1}, torch::kInt64)), std::invalid_argument);
}

TEST_CASE("a sliding window: packed (whole and cp-style segments) and padded equal the written-out rule",
          "[attention]") {
  std::mt19937 rng(11);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t heads = 4, kv_heads = 2, dim = 8;
  for (const Case& c : {whole_sequences(rng, 6, 1, 17), offset_segments(rng, 5)}) {
    torch::manual_seed(5);
    const torch::Tensor q = torch::randn({c.q_rows, heads, dim}, f64), k = torch::randn({c.k_rows, kv_heads, dim}, f64),
                        v = torch::randn({c.k_rows, kv_heads, dim}, f64);
    for (const int64_t window : {1, 3, 6}) {
      for (const bool fused : {false, true}) {
        INFO("window " << window << " fused " << fused);
        const auto plan =
            plan_packed_attention(c.segments, c.q_rows, c.k_rows, heads, torch::kCPU, fused, kBucketSpanRatio, window);
        CHECK(plan.window == window);
        CHECK_FALSE(plan.fused);  // these segments outgrow every window: the materialised plan takes it
        const torch::Tensor want = reference_attention(q, k, v, c.segments, window);
        CHECK(torch::allclose(packed_attention(q, k, v, plan), want, 0, 1e-12));
        // Control: the same plan without the window is a different attention.
        CHECK_FALSE(torch::allclose(packed_attention(q, k, v, c.segments), want, 0, 1e-6));
      }
    }
    // A window no segment outgrows is the full attention, and keeps the fused kernels.
    const auto wide =
        plan_packed_attention(c.segments, c.q_rows, c.k_rows, heads, torch::kCPU, true, kBucketSpanRatio, 1000);
    CHECK(wide.fused);
    CHECK(wide.window == 0);
    CHECK(torch::allclose(packed_attention(q, k, v, wide), reference_attention(q, k, v, c.segments), 0, 1e-12));
  }
  // Padded (B, T) rows, left padding on row 1: both kernels against the packed reference per row.
  const int64_t b = 2, t = 9, window = 3;
  torch::manual_seed(6);
  const torch::Tensor q = torch::randn({b, t, heads, dim}, f64), k = torch::randn({b, t, kv_heads, dim}, f64),
                      v = torch::randn({b, t, kv_heads, dim}, f64);
  torch::Tensor valid = torch::ones({b, t}, torch::kBool);
  valid[1].narrow(0, 0, 4).fill_(false);  // row 1: 4 padding tokens, then 5 real ones
  for (const bool fused : {false, true}) {
    INFO("padded, fused " << fused);
    const torch::Tensor out = padded_attention(q, k, v, valid, fused, window);  // (B, T, H, D)
    for (int64_t row = 0; row < b; ++row) {
      const int64_t start = row == 0 ? 0 : 4, len = t - start;
      const std::vector<AttentionSegment> one{{0, len, 0, 0}};
      const torch::Tensor want = reference_attention(q[row].narrow(0, start, len), k[row].narrow(0, start, len),
                                                     v[row].narrow(0, start, len), one, window);
      CHECK(torch::allclose(out[row].narrow(0, start, len), want, 0, 1e-12));
    }
    CHECK_FALSE(torch::allclose(padded_attention(q, k, v, valid, fused)[0], out[0], 0, 1e-6));  // control
  }
}

// A bucket pads its shorter segments' query rows to the longest; a padding row past its segment's
// last row by a window or more once saw no key (all -inf), and its NaN softmax reached every
// key's gradient through the backward, though the forward dropped the row.
TEST_CASE("a sliding window's packed gradients equal the written-out rule's, padding rows included", "[attention]") {
  std::mt19937 rng(13);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t heads = 4, kv_heads = 2, dim = 8;
  Case two;  // lengths 16 and 12 share a bucket (12 >= 0.75 * 16): rows 12.. of the second are padding
  two.segments = {{0, 16, 0, 0}, {16, 12, 16, 0}};
  two.q_rows = two.k_rows = 28;
  for (const Case& c : {two, whole_sequences(rng, 6, 1, 17), offset_segments(rng, 5)}) {
    torch::manual_seed(7);
    const torch::Tensor q = torch::randn({c.q_rows, heads, dim}, f64).requires_grad_(true);  // (N, H, D)
    const torch::Tensor k = torch::randn({c.k_rows, kv_heads, dim}, f64).requires_grad_(true);
    const torch::Tensor v = torch::randn({c.k_rows, kv_heads, dim}, f64).requires_grad_(true);
    const torch::Tensor w = torch::randn({c.q_rows, heads, dim}, f64);  // a loss weight per output
    for (const int64_t window : {1, 3, 4}) {
      INFO("window " << window << ", " << c.segments.size() << " segments");
      const auto plan =
          plan_packed_attention(c.segments, c.q_rows, c.k_rows, heads, torch::kCPU, false, kBucketSpanRatio, window);
      const auto got = torch::autograd::grad({(packed_attention(q, k, v, plan) * w).sum()}, {q, k, v});
      const auto want =
          torch::autograd::grad({(reference_attention(q, k, v, c.segments, window) * w).sum()}, {q, k, v});
      for (size_t i = 0; i < 3; ++i) {
        CHECK(torch::isfinite(got[i]).all().item<bool>());
        CHECK(torch::allclose(got[i], want[i], 0, 1e-12 * std::max(1.0, want[i].abs().max().item<double>())));
      }
    }
  }
}

namespace {

// One decode step written out: sequence i's query (H, D) against its group's prefix rows
// [0, length) and its own valid rows, one softmax, K/V heads repeated as HF's repeat_kv.
torch::Tensor reference_decode(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_valid, const torch::Tensor& pk, const torch::Tensor& pv,
                               const std::vector<PrefixGroup>& groups) {
  const int64_t n = q.size(0), group = q.size(1) / k.size(1);
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor own = key_valid[i].nonzero().squeeze(1);
    torch::Tensor ks = k[i].index_select(1, own), vs = v[i].index_select(1, own);  // (H_kv, S_i, D)
    for (const PrefixGroup& grp : groups)
      if (std::find(grp.members.begin(), grp.members.end(), i) != grp.members.end()) {
        ks = torch::cat({pk[grp.prefix].narrow(1, 0, grp.length), ks}, 1);
        vs = torch::cat({pv[grp.prefix].narrow(1, 0, grp.length), vs}, 1);
      }
    ks = ks.repeat_interleave(group, 0), vs = vs.repeat_interleave(group, 0);  // (H, S, D)
    const torch::Tensor scores =
        torch::matmul(q[i].unsqueeze(1), ks.transpose(1, 2)) / std::sqrt(static_cast<double>(q.size(2)));
    rows.push_back(torch::matmul(torch::softmax(scores, -1), vs).squeeze(1));  // (H, D)
  }
  return torch::stack(rows);  // (n, H, D)
}

}  // namespace

TEST_CASE("decode attention: materialised and fused (float64, float32, bfloat16) equal the written-out step",
          "[attention][fused]") {
  torch::manual_seed(11);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t n = 6, heads = 4, kv_heads = 2, dim = 8, span = 5, prefix_slots = 4, prefix_cap = 7;
  const torch::Tensor q = torch::randn({n, heads, dim}, f64);
  const torch::Tensor k = torch::randn({n + 2, kv_heads, span + 3, dim}, f64).narrow(0, 0, n).narrow(2, 0, span);
  const torch::Tensor v = torch::randn({n + 2, kv_heads, span + 3, dim}, f64).narrow(0, 0, n).narrow(2, 0, span);
  const std::vector<int64_t> own_lengths{5, 1, 3, 2, 5, 4};  // each sequence's cached rows, the new one included
  const torch::Tensor key_valid =
      torch::arange(span).unsqueeze(0) < torch::tensor(own_lengths, torch::kInt64).unsqueeze(1);  // (n, S)
  const torch::Tensor pk = torch::randn({prefix_slots, kv_heads, prefix_cap, dim}, f64);
  const torch::Tensor pv = torch::randn({prefix_slots, kv_heads, prefix_cap, dim}, f64);
  // Slots 2 and 0 (a gather), or 1 and 2 (a view); prefixes of different lengths; readers padded
  // to the widest group; sequences 2 and 5 read no prefix.
  const std::vector<std::vector<PrefixGroup>> layouts{
      {{2, 6, {0, 3, 4}}, {0, 3, {1}}}, {{1, 7, {0, 1}}, {2, 2, {3, 4}}}, {}};
  for (size_t c = 0; c < layouts.size(); ++c) {
    const std::vector<PrefixGroup>& groups = layouts[c];
    const PrefixIndex index = prefix_index(groups, n, torch::kCPU);
    const torch::Tensor ref = reference_decode(q, k, v, key_valid, pk, pv, groups);
    INFO("layout " << c);
    CHECK((decode_attention(q, k, v, key_valid, pk, pv, index, false) - ref).abs().max().item<double>() < 1e-12);
    CHECK((decode_attention(q, k, v, key_valid, pk, pv, index, true) - ref).abs().max().item<double>() < 1e-12);
    for (const auto& [dtype, tol] : {std::pair{torch::kFloat32, 1e-5}, std::pair{torch::kBFloat16, 3e-2}}) {
      const auto t = [&](const torch::Tensor& x) { return x.to(dtype); };
      const torch::Tensor out = decode_attention(t(q), t(k), t(v), key_valid, t(pk), t(pv), index, true);
      INFO("dtype " << c10::toString(dtype));
      CHECK(out.scalar_type() == dtype);
      CHECK((out.to(torch::kFloat64) - ref).abs().max().item<double>() < tol);
    }
    if (c == 0) {  // control: the shorter prefix's keys past its length must stay hidden
      PrefixIndex unmasked = index;
      unmasked.beyond = torch::zeros_like(index.beyond);
      CHECK((decode_attention(q, k, v, key_valid, pk, pv, unmasked, true) - ref).abs().max().item<double>() > 1e-3);
    }
  }
}

TEST_CASE("decode attention: fused over several kernel blocks (600 own keys, 256 query rows per group)",
          "[attention][fused]") {
  torch::manual_seed(12);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // 64 query heads over one kv head: a group of 4 readers is 256 query rows for the prefix call.
  const int64_t n = 5, heads = 64, kv_heads = 1, dim = 8, span = 600, prefix_cap = 700;
  const torch::Tensor q = torch::randn({n, heads, dim}, f64);
  const torch::Tensor k = torch::randn({n, kv_heads, span, dim}, f64), v = torch::randn({n, kv_heads, span, dim}, f64);
  const torch::Tensor key_valid =
      torch::arange(span).unsqueeze(0) < torch::tensor({600, 513, 1, 77, 600}, torch::kInt64).unsqueeze(1);  // (n, S)
  const torch::Tensor pk = torch::randn({2, kv_heads, prefix_cap, dim}, f64);
  const torch::Tensor pv = torch::randn({2, kv_heads, prefix_cap, dim}, f64);
  const std::vector<PrefixGroup> groups{{1, 650, {0, 1, 2, 3}}};  // sequence 4 reads no prefix
  const PrefixIndex index = prefix_index(groups, n, torch::kCPU);
  const torch::Tensor ref = reference_decode(q, k, v, key_valid, pk, pv, groups);
  CHECK((decode_attention(q, k, v, key_valid, pk, pv, index, true) - ref).abs().max().item<double>() < 1e-12);
  const auto f32 = [](const torch::Tensor& x) { return x.to(torch::kFloat32); };
  CHECK((decode_attention(f32(q), f32(k), f32(v), key_valid, f32(pk), f32(pv), index, true).to(torch::kFloat64) - ref)
            .abs()
            .max()
            .item<double>() < 1e-5);
  CHECK_THROWS_WITH(prefix_index({{0, 0, {0}}}, n, torch::kCPU), Catch::Contains("at least one row"));
}

TEST_CASE("decode attention: a sliding window that reaches a shared prompt stays materialised under fused",
          "[attention][fused]") {
  torch::manual_seed(13);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t n = 3, heads = 4, kv_heads = 2, dim = 8, span = 4, window = 6;
  const torch::Tensor q = torch::randn({n, heads, dim}, f64);
  const torch::Tensor k = torch::randn({n, kv_heads, span, dim}, f64), v = torch::randn({n, kv_heads, span, dim}, f64);
  const torch::Tensor key_valid = torch::ones({n, span}, torch::kBool);
  const torch::Tensor pk = torch::randn({1, kv_heads, 8, dim}, f64), pv = torch::randn({1, kv_heads, 8, dim}, f64);
  const std::vector<PrefixGroup> groups{{0, 8, {0, 1, 2}}};
  const std::vector<int64_t> positions{11, 11, 11};  // prefix keys 0..5 are out of the window
  const PrefixIndex windowed = prefix_index(groups, n, torch::kCPU, window, positions);
  REQUIRE(windowed.outside.defined());
  const torch::Tensor materialised = decode_attention(q, k, v, key_valid, pk, pv, windowed, false);
  CHECK(torch::equal(decode_attention(q, k, v, key_valid, pk, pv, windowed, true), materialised));
  // Control: the window bites, so ignoring it (the index without the window) gives another result.
  const PrefixIndex unwindowed = prefix_index(groups, n, torch::kCPU);
  CHECK((decode_attention(q, k, v, key_valid, pk, pv, unwindowed, true) - materialised).abs().max().item<double>() >
        1e-3);
}
