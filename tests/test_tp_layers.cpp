// Tensor / context parallel building blocks on one rank: the balanced shard split, tp layers that
// reduce to plain layers with tp = 1, the chunked vocab log-prob against plain autograd (values
// and gradients), the loss fused into that head, and the CP shard layout.
#include <catch2/catch.hpp>

#include "llama_test_util.h"
#include "parallel/context_parallel.h"
#include "parallel/tp_layers.h"
#include "parallel/vocab_parallel_logprob.h"

using namespace tandem;
using parallel::shard_range;

TEST_CASE("shard_range splits evenly, the first ranks taking the remainder", "[tp]") {
  CHECK(shard_range(97, 0, 2).begin == 0);
  CHECK(shard_range(97, 0, 2).end == 49);
  CHECK(shard_range(97, 1, 2).begin == 49);
  CHECK(shard_range(97, 1, 2).end == 97);
  CHECK(shard_range(6, 1, 2, 8).begin == 24);  // 6 heads of 8 over 2 ranks
  CHECK(shard_range(6, 1, 2, 8).end == 48);
  int64_t covered = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const auto s = shard_range(50, r, 4);
    CHECK(s.begin == covered);
    CHECK((s.size() == 12 || s.size() == 13));
    covered = s.end;
  }
  CHECK(covered == 50);
  CHECK_THROWS(shard_range(5, 2, 2));
}

TEST_CASE("with tp = 1 the parallel layers are plain layers", "[tp]") {
  torch::manual_seed(3);
  parallel::ColumnParallelLinear col(6, 10, true, parallel::ParallelContext{});
  parallel::RowParallelLinear row(10, 4, true, parallel::ParallelContext{});
  parallel::VocabParallelEmbedding emb(11, 6, parallel::ParallelContext{});
  for (auto* p : {&col->weight, &col->bias, &row->weight, &row->bias, &emb->weight}) {
    torch::NoGradGuard g;
    p->normal_();
  }
  const torch::Tensor x = torch::randn({3, 6});
  CHECK(torch::allclose(col(x), torch::linear(x, col->weight, col->bias)));
  const torch::Tensor h = torch::randn({3, 10});
  CHECK(torch::allclose(row(h), torch::linear(h, row->weight, row->bias)));
  const torch::Tensor ids = torch::tensor({0, 10, 4}, torch::kInt64);
  CHECK(torch::equal(emb(ids), emb->weight.index_select(0, ids)));
  CHECK(col->out_range.size() == 10);
  CHECK(emb->vocab_range.size() == 11);
}

TEST_CASE("fused column-parallel projections equal separate linears: outputs and gradients (float64 1e-12)", "[tp]") {
  at::Generator gen = at::detail::createCPUGenerator(5);
  for (const bool bias : {false, true}) {
    std::vector<parallel::ColumnParallelLinear> layers;
    for (int64_t out : {7, 3, 5}) layers.emplace_back(6, out, bias, parallel::ParallelContext{});
    for (auto& l : layers) {
      l->to(torch::kFloat64);
      torch::NoGradGuard g;
      l->weight.normal_(0, 1, gen);
      if (bias) l->bias.normal_(0, 1, gen);
    }
    const torch::Tensor x0 = torch::randn({2, 4, 6}, gen, torch::kFloat64);  // (B, T, in): 3-d input
    const std::vector<torch::Tensor> gy = {torch::randn({2, 4, 7}, gen, torch::kFloat64),
                                           torch::randn({2, 4, 3}, gen, torch::kFloat64)};
    // The third projection is left out of the loss: its gradient is undefined, not zero-filled.
    const auto run = [&](bool fused) {
      for (auto& l : layers) l->zero_grad();
      const torch::Tensor x = x0.clone().requires_grad_(true);
      std::vector<torch::Tensor> y;
      if (fused) {
        y = parallel::fused_column_parallel(x, {layers[0].get(), layers[1].get(), layers[2].get()});
      } else {
        for (auto& l : layers) y.push_back(l(x));
      }
      ((y[0] * gy[0]).sum() + (y[1] * gy[1]).sum()).backward();
      std::vector<torch::Tensor> out = {y[0].detach(), y[1].detach(), y[2].detach(), x.grad()};
      for (auto& l : layers)
        out.push_back(l->weight.grad().defined() ? l->weight.grad() : torch::zeros_like(l->weight));
      return out;
    };
    const auto ref = run(false), got = run(true);
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("bias " << bias << " tensor " << i);
      CHECK(got[i].sizes() == ref[i].sizes());
      CHECK(test::rel_to_max(got[i], ref[i]) < 1e-12);
    }
  }
}

TEST_CASE(
    "adapters inside the fused projections, a column layer and the row layer: outputs and every gradient equal "
    "plain autograd (float64 1e-12); a frozen base's weights get none",
    "[tp][lora]") {
  at::Generator gen = at::detail::createCPUGenerator(9);
  for (const bool frozen : {false, true})
    for (const bool bias : {false, true}) {
      INFO("frozen " << frozen << " bias " << bias);
      std::vector<parallel::ColumnParallelLinear> cols;
      for (int64_t out : {7, 3, 5}) cols.emplace_back(6, out, bias, parallel::ParallelContext{});
      parallel::RowParallelLinear row(5, 4, bias, parallel::ParallelContext{});
      std::vector<torch::nn::Module*> all = {cols[0].get(), cols[1].get(), cols[2].get(), row.get()};
      for (auto* m : all) {
        m->to(torch::kFloat64);
        torch::NoGradGuard g;
        for (auto& p : m->parameters()) p.normal_(0, 1, gen).set_requires_grad(!frozen);
      }
      // Adapters of ranks 2 and 3 with their own scales on the first two blocks, none on the third.
      const auto factors = [&](int64_t r, int64_t in, int64_t out) {
        return std::pair{torch::randn({r, in}, gen, torch::kFloat64).requires_grad_(true),
                         torch::randn({out, r}, gen, torch::kFloat64).requires_grad_(true)};
      };
      auto [a0, b0] = factors(2, 6, 7);
      auto [a1, b1] = factors(3, 6, 3);
      auto [ar, br] = factors(2, 5, 4);
      cols[0]->attach_lora(a0, b0, 1.5);
      cols[1]->attach_lora(a1, b1, 0.25);
      row->attach_lora(ar, br, 2.5);
      const torch::Tensor x0 = torch::randn({2, 4, 6}, gen, torch::kFloat64);  // (B, T, in)
      const torch::Tensor gy = torch::randn({2, 4, 7}, gen, torch::kFloat64),
                          gz = torch::randn({2, 4, 4}, gen, torch::kFloat64),
                          gw = torch::randn({2, 4, 7}, gen, torch::kFloat64);
      const auto plain = [](const torch::Tensor& x, const auto& l) {  // W x + b + s B A x, autograd's ops
        torch::Tensor y = torch::linear(x, l->weight, l->bias);
        if (l->lora().defined())
          y = y + l->lora().scale * torch::matmul(torch::matmul(x, l->lora().a.t()), l->lora().b.t());
        return y;
      };
      // The second block is adapted but left out of the loss: its gradient is undefined.
      const auto run = [&](bool fused) {
        for (auto* m : all) m->zero_grad();
        const torch::Tensor x = x0.clone().requires_grad_(true);
        std::vector<torch::Tensor> y;
        torch::Tensor z, w;  // the row layer's output, and the first column layer's on its own
        if (fused) {
          y = parallel::fused_column_parallel(x, {cols[0].get(), cols[1].get(), cols[2].get()});
          z = row(y[2]);
          w = cols[0](x);
        } else {
          for (auto& l : cols) y.push_back(plain(x, l));
          z = plain(y[2], row);
          w = plain(x, cols[0]);
        }
        ((y[0] * gy).sum() + (z * gz).sum() + (w * gw).sum()).backward();
        std::vector<torch::Tensor> out = {y[0].detach(), y[1].detach(), y[2].detach(),
                                          z.detach(),    w.detach(),    x.grad()};
        for (auto* m : all)
          for (auto& p : m->parameters()) out.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
        return out;
      };
      const auto ref = run(false), got = run(true);
      for (size_t i = 0; i < ref.size(); ++i) {
        INFO("tensor " << i);
        CHECK(got[i].sizes() == ref[i].sizes());
        CHECK(test::rel_to_max(got[i], ref[i]) < 1e-12);
      }
      CHECK_FALSE(b1.grad().defined());  // its block's gradient is undefined
      {  // Control: the adapters are in what is compared (a group that dropped them would fail).
        torch::NoGradGuard g;
        const torch::Tensor bare = torch::linear(x0, cols[0]->weight, cols[0]->bias);  // (B, T, 7)
        CHECK(test::rel_to_max(bare, ref[0]) > 1e-3);
        const torch::Tensor bare1 = torch::linear(x0, cols[1]->weight, cols[1]->bias);  // (B, T, 3)
        CHECK(test::rel_to_max(bare1, ref[1]) > 1e-3);
      }
      for (auto* m : all)
        for (auto& p : m->named_parameters())
          if (frozen && p.key() != "lora_A" && p.key() != "lora_B") CHECK_FALSE(p.value().grad().defined());
    }
}

TEST_CASE(
    "sampling runs the fused projections as one GEMM per layer with the adapters added in place: the autograd "
    "path's outputs (float64 1e-12); a no-grad scoring forward is the autograd one bit for bit",
    "[tp]") {
  at::Generator gen = at::detail::createCPUGenerator(7);
  for (const bool bias : {false, true})
    for (const bool lora : {false, true}) {
      INFO("bias " << bias << " lora " << lora);
      std::vector<parallel::ColumnParallelLinear> layers;
      for (int64_t out : {7, 3, 5}) layers.emplace_back(6, out, bias, parallel::ParallelContext{});
      for (size_t i = 0; i < layers.size(); ++i) {
        auto& l = layers[i];
        l->to(torch::kFloat64);
        torch::NoGradGuard g;
        l->weight.normal_(0, 1, gen);
        if (bias) l->bias.normal_(0, 1, gen);
        if (lora && i != 1)  // the middle layer without an adapter
          l->attach_lora(torch::randn({2, 6}, gen, torch::kFloat64),
                         torch::randn({l->weight.size(0), 2}, gen, torch::kFloat64), 1.5);
      }
      const torch::Tensor x = torch::randn({2, 4, 6}, gen, torch::kFloat64);  // (B, T, in)
      const std::vector<const parallel::ColumnParallelLinearImpl*> ptrs = {layers[0].get(), layers[1].get(),
                                                                           layers[2].get()};
      const std::vector<torch::Tensor> with_grad = parallel::fused_column_parallel(x, ptrs);
      std::vector<torch::Tensor> without, off, single, scoring;
      {
        torch::NoGradGuard no_grad;
        // A no-grad forward outside the sampler is the training forward's, to the bit (old log-probs).
        scoring = parallel::fused_column_parallel(x, ptrs);
        parallel::SamplingGuard sampling;
        without = parallel::fused_column_parallel(x, ptrs);
        for (auto& l : layers) single.push_back(l(x));  // each layer's forward: its own in-place add
        parallel::LoraOffGuard adapters_off;
        off = parallel::fused_column_parallel(x, ptrs);
      }
      if (!lora) {
        // Without adapters both paths' rounding may agree, so the bitwise check below cannot tell
        // them apart: the scoring forward's outputs are views of the one fused GEMM's, the
        // sampler's each its own GEMM's.
        CHECK(scoring[0].is_alias_of(scoring[2]));
        CHECK_FALSE(without[0].is_alias_of(without[2]));
      }
      for (size_t i = 0; i < layers.size(); ++i) {
        INFO("layer " << i);
        const auto& l = layers[i];
        torch::Tensor want = torch::linear(x, l->weight, l->bias);  // (B, T, out_i)
        const torch::Tensor base = want;
        if (l->lora().defined()) want = want + 1.5 * torch::matmul(torch::matmul(x, l->lora().a.t()), l->lora().b.t());
        CHECK(without[i].sizes() == want.sizes());
        CHECK(test::rel_to_max(with_grad[i].detach(), want) < 1e-12);
        CHECK(test::rel_to_max(without[i], want) < 1e-12);
        CHECK(test::rel_to_max(single[i], want) < 1e-12);
        CHECK(test::rel_to_max(off[i], base) < 1e-12);
        CHECK(torch::equal(scoring[i], with_grad[i].detach()));
        // Control: an adapter's term is far above the tolerance, so leaving it out would fail.
        if (l->lora().defined()) CHECK(test::rel_to_max(base, want) > 1e-2);
      }
    }
}

TEST_CASE(
    "a frozen lm head (LoRA's) gets no weight gradient and the trained head's hidden gradient, bit for bit: "
    "chunked log-probs and the fused loss",
    "[tp]") {
  at::Generator gen = at::detail::createCPUGenerator(17);
  const int64_t n = 11, d = 8, v = 29;
  const torch::Tensor h0 = torch::randn({n, d}, gen, torch::kFloat64);
  const torch::Tensor w0 = torch::randn({v, d}, gen, torch::kFloat64);
  const torch::Tensor targets = torch::randint(v, {n}, gen, torch::kInt64);
  const torch::Tensor gl = torch::randn({n}, gen, torch::kFloat64);
  for (const bool fused : {false, true}) {
    const auto hidden_grad = [&](bool head_trains) {
      const torch::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(head_trains);
      parallel::TokenLogProbOptions o{true, 4};
      if (fused)
        o.token_loss = [&](const torch::Tensor& index, const torch::Tensor& logp, const torch::Tensor&) {
          const torch::Tensor g = gl.index_select(0, index);  // (C)
          return parallel::TokenLossChunk{(logp * g).sum(), g, torch::Tensor()};
        };
      const parallel::TokenLogProbs r = parallel::vocab_parallel_log_probs(h, w, targets, 0, nullptr, o);
      (fused ? r.loss : (r.logp * gl).sum()).backward();
      CHECK(w.grad().defined() == head_trains);
      return h.grad();
    };
    INFO("fused " << fused);
    const torch::Tensor trained = hidden_grad(true), frozen = hidden_grad(false);
    CHECK(torch::equal(frozen, trained));
    CHECK(frozen.abs().max().item<double>() > 0.1);
  }
}

TEST_CASE("chunked vocab log-probs equal plain autograd: values and gradients (float64 1e-12)", "[tp]") {
  // Errors relative to the largest magnitude of the reference tensor.
  at::Generator gen = at::detail::createCPUGenerator(11);
  const int64_t n = 23, d = 8, v = 37;
  const torch::Tensor h0 = torch::randn({n, d}, gen, torch::kFloat64) * 2;
  const torch::Tensor w0 = torch::randn({v, d}, gen, torch::kFloat64);
  const torch::Tensor targets = torch::randint(v, {n}, gen, torch::kInt64);
  const torch::Tensor gl = torch::randn({n}, gen, torch::kFloat64), ge = torch::randn({n}, gen, torch::kFloat64);
  const auto run = [&](bool chunked, int64_t chunk, int64_t keep_bytes = 0) {
    const torch::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const parallel::TokenLogProbs r =
        chunked ? parallel::vocab_parallel_log_probs(h, w, targets, 0, nullptr, {true, chunk, keep_bytes})
                : parallel::full_logits_log_probs(h, w, targets, 0, nullptr, true);
    ((r.logp * gl).sum() + (r.entropy * ge).sum()).backward();
    return std::vector<torch::Tensor>{r.logp.detach(), r.entropy.detach(), h.grad(), w.grad()};
  };
  const auto ref = run(false, 0);
  // Independent check of the reference itself: log_softmax by hand.
  const torch::Tensor z = torch::matmul(h0, w0.t());
  const torch::Tensor lse = z.logsumexp(1);
  CHECK(test::rel_to_max(ref[0], z.gather(1, targets.unsqueeze(1)).squeeze(1) - lse) < 1e-13);
  for (int64_t chunk : {1, 5, 23, 100})
    for (int64_t keep_bytes : {int64_t{0}, int64_t{1} << 30}) {  // recompute, or logits kept for the backward
      INFO("chunk " << chunk << " keep " << keep_bytes);
      const auto got = run(true, chunk, keep_bytes);
      for (size_t i = 0; i < ref.size(); ++i) CHECK(test::rel_to_max(got[i], ref[i]) < 1e-12);
    }
  // Without the entropy: the forward skips its statistics, the backward its term.
  const auto logp_only = [&](bool chunked, int64_t chunk, int64_t keep_bytes) {
    const torch::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const parallel::TokenLogProbs r =
        chunked ? parallel::vocab_parallel_log_probs(h, w, targets, 0, nullptr, {false, chunk, keep_bytes})
                : parallel::full_logits_log_probs(h, w, targets, 0, nullptr, false);
    CHECK_FALSE(r.entropy.defined());
    (r.logp * gl).sum().backward();
    return std::vector<torch::Tensor>{r.logp.detach(), h.grad(), w.grad()};
  };
  const auto ref_logp = logp_only(false, 0, 0);
  for (int64_t chunk : {1, 5, 100})
    for (int64_t keep_bytes : {int64_t{0}, int64_t{1} << 30}) {
      INFO("logp only, chunk " << chunk << " keep " << keep_bytes);
      const auto got = logp_only(true, chunk, keep_bytes);
      for (size_t i = 0; i < ref_logp.size(); ++i) CHECK(test::rel_to_max(got[i], ref_logp[i]) < 1e-12);
    }
  CHECK(parallel::logits_chunk_tokens({}, 1000, 4) == parallel::kDefaultLogitsChunkBytes / 4000);
  CHECK(parallel::logits_chunk_tokens({false, 9}, 1000, 4) == 9);
}

TEST_CASE("the loss fused into the head equals autograd through the log-probs: loss and gradients (float64 1e-12)",
          "[tp]") {
  at::Generator gen = at::detail::createCPUGenerator(13);
  const int64_t n = 23, d = 8, v = 37;
  const torch::Tensor h0 = torch::randn({n, d}, gen, torch::kFloat64) * 2;
  const torch::Tensor w0 = torch::randn({v, d}, gen, torch::kFloat64);
  const torch::Tensor targets = torch::randint(v, {n}, gen, torch::kInt64);
  // Row i sits at position perm[i] of the caller's axis, where the loss's coefficients live.
  const torch::Tensor perm = torch::randperm(n, gen, torch::kInt64);
  const torch::Tensor a = torch::randn({n}, gen, torch::kFloat64), b = torch::randn({n}, gen, torch::kFloat64);
  const torch::Tensor c = torch::randn({n}, gen, torch::kFloat64);
  // A nonlinear token loss: a exp(logp) + b logp^2 (+ c H), each term its token's own.
  const auto token_loss = [](const torch::Tensor& logp, const torch::Tensor& entropy, const torch::Tensor& a_,
                             const torch::Tensor& b_, const torch::Tensor& c_) {
    torch::Tensor l = a_ * logp.exp() + b_ * logp.pow(2);
    if (entropy.defined()) l = l + c_ * entropy;
    return l.sum();
  };
  for (const bool with_entropy : {true, false})
    for (const bool entropy_in_loss : {true, false}) {
      if (entropy_in_loss && !with_entropy) continue;
      // Reference: full logits, plain autograd, the loss on the caller's axis.
      const torch::Tensor hr = h0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
      const auto full = parallel::full_logits_log_probs(hr, wr, targets, 0, nullptr, with_entropy);
      const torch::Tensor at =
          torch::empty({n}, torch::kInt64).index_copy_(0, perm, torch::arange(n));  // row at each position
      const torch::Tensor ref_loss = token_loss(
          full.logp.index_select(0, at), entropy_in_loss ? full.entropy.index_select(0, at) : torch::Tensor(), a, b, c);
      (ref_loss * 2.5).backward();  // the incoming gradient scales the fused head's saved one
      for (int64_t chunk : {1, 5, 23, 100}) {
        INFO("entropy " << with_entropy << " in loss " << entropy_in_loss << " chunk " << chunk);
        const torch::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
        parallel::TokenLogProbOptions o{with_entropy, chunk};
        int64_t calls = 0;
        o.token_index = perm;
        o.token_loss = [&](const torch::Tensor& index, const torch::Tensor& logp, const torch::Tensor& entropy) {
          ++calls;
          torch::AutoGradMode grad_on(true);
          const torch::Tensor lp = logp.detach().requires_grad_(true);
          const torch::Tensor en = entropy_in_loss ? entropy.detach().requires_grad_(true) : torch::Tensor();
          const torch::Tensor l =
              token_loss(lp, en, a.index_select(0, index), b.index_select(0, index), c.index_select(0, index));
          std::vector<torch::Tensor> wrt{lp};
          if (en.defined()) wrt.push_back(en);
          const auto g = torch::autograd::grad({l}, wrt);
          return parallel::TokenLossChunk{l.detach(), g[0], en.defined() ? g[1] : torch::Tensor()};
        };
        const parallel::TokenLogProbs r = parallel::vocab_parallel_log_probs(h, w, targets, 0, nullptr, o);
        CHECK(calls == (n + chunk - 1) / chunk);
        CHECK_FALSE(r.logp.requires_grad());
        REQUIRE(r.loss.requires_grad());
        CHECK(r.loss.item<double>() == Approx(ref_loss.item<double>()).epsilon(1e-12));
        CHECK(test::rel_to_max(r.logp, full.logp.detach()) < 1e-12);
        if (with_entropy) CHECK(test::rel_to_max(r.entropy, full.entropy.detach()) < 1e-12);
        (r.loss * 2.5).backward();
        CHECK(test::rel_to_max(h.grad(), hr.grad()) < 1e-12);
        CHECK(test::rel_to_max(w.grad(), wr.grad()) < 1e-12);
        // Control: the rows' positions matter; without them every coefficient lands on the wrong row.
        if (chunk == 5 && entropy_in_loss) {
          const torch::Tensor h2 = h0.clone().requires_grad_(true);
          parallel::TokenLogProbOptions unmapped = o;
          unmapped.token_index = torch::Tensor();
          parallel::vocab_parallel_log_probs(h2, w0, targets, 0, nullptr, unmapped).loss.backward();
          CHECK(test::rel_to_max(h2.grad() * 2.5, hr.grad()) > 1e-3);
        }
      }
    }
}

TEST_CASE("chunked vocab log-probs of float32 and bfloat16 weights use float32 statistics", "[tp]") {
  at::Generator gen = at::detail::createCPUGenerator(12);
  const torch::Tensor h = torch::randn({9, 16}, gen, torch::kFloat32);
  const torch::Tensor w = torch::randn({30, 16}, gen, torch::kFloat32);
  const torch::Tensor t = torch::randint(30, {9}, gen, torch::kInt64);
  const auto ref = parallel::full_logits_log_probs(h.to(torch::kFloat64), w.to(torch::kFloat64), t, 0, nullptr, true);
  const auto f32 = parallel::vocab_parallel_log_probs(h, w, t, 0, nullptr, {true, 4});
  CHECK(f32.logp.scalar_type() == torch::kFloat32);
  CHECK(test::rel_floor1(f32.logp, ref.logp) < 1e-5);
  const auto bf16 =
      parallel::vocab_parallel_log_probs(h.to(torch::kBFloat16), w.to(torch::kBFloat16), t, 0, nullptr, {true, 4});
  CHECK(bf16.logp.scalar_type() == torch::kFloat32);
  CHECK(test::rel_floor1(bf16.logp, ref.logp) < 0.1);
  // Kept logits (float32 statistics of bf16 weights) give the recomputing backward's gradients bitwise.
  const auto grads = [&](int64_t keep_bytes) {
    const torch::Tensor hb = h.to(torch::kBFloat16).requires_grad_(true),
                        wb = w.to(torch::kBFloat16).requires_grad_(true);
    parallel::vocab_parallel_log_probs(hb, wb, t, 0, nullptr, {true, 4, keep_bytes}).logp.sum().backward();
    return std::make_pair(hb.grad(), wb.grad());
  };
  const auto [h_recompute, w_recompute] = grads(0);
  const auto [h_kept, w_kept] = grads(int64_t{1} << 30);
  // Bitwise: the kept logits are the forward's own chunk GEMM outputs, which the recomputing
  // backward computes again with the same shapes and kernels.
  CHECK(torch::equal(h_recompute, h_kept));
  CHECK(torch::equal(w_recompute, w_kept));
  // The fused head on bf16 weights: the same float32 statistics, the gradients in bf16 as above.
  const torch::Tensor hb = h.to(torch::kBFloat16).requires_grad_(true),
                      wb = w.to(torch::kBFloat16).requires_grad_(true);
  parallel::TokenLogProbOptions o{true, 4};
  o.token_loss = [](const torch::Tensor&, const torch::Tensor& logp, const torch::Tensor&) {
    return parallel::TokenLossChunk{logp.sum(), torch::ones_like(logp), torch::Tensor()};
  };
  const auto fused = parallel::vocab_parallel_log_probs(hb, wb, t, 0, nullptr, o);
  CHECK(torch::equal(fused.logp, bf16.logp));  // bitwise: the same chunks through the same statistics helper
  fused.loss.backward();
  CHECK(hb.grad().scalar_type() == torch::kBFloat16);
  CHECK(wb.grad().scalar_type() == torch::kBFloat16);
  CHECK(test::rel_to_max(hb.grad().to(torch::kFloat32), h_recompute.to(torch::kFloat32)) < 1e-2);
  CHECK(test::rel_to_max(wb.grad().to(torch::kFloat32), w_recompute.to(torch::kFloat32)) < 1e-2);
}

TEST_CASE("CP shard: chunks i and 2cp-1-i of every sequence, segments and gather order", "[cp]") {
  const torch::Tensor cu = torch::tensor({0, 8, 11, 12}, torch::kInt32);
  const parallel::CpShard r0 = parallel::make_cp_shard(cu, 0, 2), r1 = parallel::make_cp_shard(cu, 1, 2);
  CHECK(r0.tokens[0] == std::vector<int64_t>{0, 1, 6, 7, 10, 11});
  CHECK(r0.tokens[1] == std::vector<int64_t>{2, 3, 4, 5, 8, 9});
  CHECK(r1.tokens == r0.tokens);  // every rank knows the whole layout
  REQUIRE(r0.segments.size() == 4);
  CHECK(r0.segments[1].local_begin == 2);
  CHECK(r0.segments[1].seq_offset == 6);
  CHECK(r0.segments[2].sequence == 1);
  CHECK(r0.segments[2].seq_offset == 2);
  CHECK(r0.segments[3].sequence == 2);
  REQUIRE(r1.segments.size() == 4);  // adjacent chunks stay separate segments
  CHECK(r1.segments[0].seq_offset == 2);
  CHECK(r1.segments[1].seq_offset == 4);
  CHECK(r1.segments[3].sequence == 1);
  CHECK(r1.segments[3].seq_offset == 1);
  // gather_order inverts the rank-major concatenation.
  std::vector<int64_t> rank_major = r0.tokens[0];
  rank_major.insert(rank_major.end(), r0.tokens[1].begin(), r0.tokens[1].end());
  for (int64_t t = 0; t < 12; ++t) CHECK(rank_major[r0.gather_order[t].item<int64_t>()] == t);
  // Long sequences: every rank gets the same number of tokens and the same causal work.
  const parallel::CpShard big = parallel::make_cp_shard(torch::tensor({0, 64, 128}, torch::kInt64), 0, 4);
  for (int64_t r = 0; r < 4; ++r) {
    CHECK(big.tokens[r].size() == 32u);
    int64_t work = 0;
    for (int64_t t : big.tokens[r]) work += t % 64 + 1;
    CHECK(work == 2 * (64 * 65 / 2) / 4);
  }
  CHECK(parallel::cp_gather_outputs(torch::ones({3}), r0, nullptr).numel() == 3);  // cp = 1: identity
}
