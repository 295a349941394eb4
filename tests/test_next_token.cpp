// The token choice of next_token.h: pick_token's inverse CDF over temperature / top-k / top-p
// down to one row, pick_tokens against it row by row, and next_tokens as both samplers call it.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "models/llama/next_token.h"

using namespace tandem;
using models::SamplingParams;

namespace {

SamplingParams sampling(double temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

}  // namespace

TEST_CASE("pick_token: inverse CDF over temperature / top-k / top-p, greedy ties", "[sampler]") {
  const std::vector<double> probs{0.1, 0.2, 0.3, 0.4};
  std::vector<double> z;
  for (double p : probs) z.push_back(std::log(p) + 1.5);  // a shift changes nothing
  // Frequencies over a grid of M uniforms are the probabilities up to one grid step.
  const auto counts = [&](const SamplingParams& p) {
    const int m = 10000;
    std::vector<double> c(4, 0);
    for (int i = 0; i < m; ++i) c[models::pick_token(z.data(), 4, p, (i + 0.5) / m)] += 1.0 / m;
    return c;
  };
  const auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < got.size(); ++i)
      if (std::abs(got[i] - want[i]) > 2e-4) return false;
    return true;
  };
  SamplingParams p = sampling(1.0);
  CHECK(close(counts(p), probs));
  p.temperature = 2.0;  // p^(1/2), renormalised
  double s = 0;
  for (double q : probs) s += std::sqrt(q);
  CHECK(close(counts(p), {std::sqrt(0.1) / s, std::sqrt(0.2) / s, std::sqrt(0.3) / s, std::sqrt(0.4) / s}));
  p = sampling(1.0);
  p.top_k = 2;
  CHECK(close(counts(p), {0, 0, 3.0 / 7, 4.0 / 7}));
  p.top_k = 0;
  p.top_p = 0.5;  // 0.4 < 0.5, so 0.3 joins
  CHECK(close(counts(p), {0, 0, 3.0 / 7, 4.0 / 7}));
  p.top_p = 0.35;
  CHECK(close(counts(p), {0, 0, 0, 1}));
  p.top_p = 0.95, p.top_k = 3;  // top-k first: {0.2, 0.3, 0.4}, then 0.95 of 0.9 needs all three
  CHECK(close(counts(p), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9}));

  const std::vector<double> tie{1.0, 3.0, 3.0, 0.0};
  CHECK(models::pick_token(tie.data(), 4, sampling(0.0), 0.9) == 1);
  p = sampling(1.0), p.top_k = 1;
  CHECK(models::pick_token(tie.data(), 4, p, 0.9) == 1);
  p = sampling(1.0), p.top_p = 1e-9;
  CHECK(models::pick_token(tie.data(), 4, p, 0.9) == 1);
  CHECK(models::pick_token(tie.data(), 1, sampling(1.0), 0.9) == 0);  // the caller's vocab_limit cut
  const std::vector<double> bad{1.0, std::nan(""), -INFINITY};
  CHECK_THROWS(models::pick_token(bad.data(), 2, sampling(1.0), 0.5));
  CHECK_THROWS(models::pick_token(bad.data() + 2, 1, sampling(1.0), 0.5));

  // A wide vocabulary whose nucleus outgrows the first partial-sort guess equals a full sort.
  const torch::Tensor wide = torch::randn({5000}, at::detail::createCPUGenerator(4), torch::kFloat64) * 0.1;
  p = sampling(1.0), p.top_p = 0.9;
  std::vector<int64_t> order(5000);
  std::iota(order.begin(), order.end(), 0);
  const double* wz = wide.data_ptr<double>();
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return wz[a] > wz[b]; });
  const torch::Tensor pr = torch::softmax(wide, 0);
  std::set<int64_t> nucleus;
  double cum = 0;
  for (int64_t i : order) {
    if (cum >= 0.9) break;
    cum += pr[i].item<double>();
    nucleus.insert(i);
  }
  REQUIRE(nucleus.size() > 256);
  std::set<int64_t> drawn;
  for (int i = 0; i < 4000; ++i) drawn.insert(models::pick_token(wz, 5000, p, (i + 0.5) / 4000));
  CHECK(std::includes(nucleus.begin(), nucleus.end(), drawn.begin(), drawn.end()));
  CHECK(drawn.size() > nucleus.size() / 2);
}

TEST_CASE("pick_tokens: a batch of rows chooses what each row alone chooses", "[sampler]") {
  // Each row runs the same code alone or in a batch (one intra-op thread per row, its weights in
  // that thread's scratch row), so the choices agree whatever the batch and the thread count.
  const int64_t m = 16, n = 1001;  // an odd width, so rows start at every vector offset
  const torch::Tensor z = torch::randn({m, n}, at::detail::createCPUGenerator(9), torch::kFloat64) * 2.0;  // (m, n)
  std::vector<double> u;
  for (int64_t i = 0; i < m; ++i) u.push_back((i + 0.37) / m);
  for (int variant = 0; variant < 4; ++variant) {
    SamplingParams p = sampling(variant == 0 ? 0.0 : 0.7);
    if (variant == 2) p.top_k = 50;
    if (variant == 3) p.top_p = 0.8;
    const std::vector<int64_t> batch = models::pick_tokens(z, p, u);
    for (int64_t i = 0; i < m; ++i) CHECK(batch[i] == models::pick_token(z.data_ptr<double>() + i * n, n, p, u[i]));
  }
  torch::Tensor bad = z.clone();
  bad[5][7] = std::nan("");
  CHECK_THROWS_WITH(models::pick_tokens(bad, sampling(1.0), u), Catch::Contains("NaN or +inf"));
  bad = z.clone();
  bad[3].fill_(-INFINITY);
  CHECK_THROWS_WITH(models::pick_tokens(bad, sampling(1.0), u), Catch::Contains("all -inf"));
}

TEST_CASE("pick_tokens at a real vocabulary's width chooses what whole-tensor arithmetic chooses", "[sampler]") {
  // Qwen2's 151,936 logits per row (a decode step's 16 rows), against the inverse CDF written as
  // tensor ops: the weights as one exp over the batch, the cumulative sums, the first crossing.
  const int64_t m = 16, n = 151936;
  const torch::Tensor z = torch::randn({m, n}, at::detail::createCPUGenerator(11), torch::kFloat64) * 3.0;  // (m, n)
  std::vector<double> u;
  for (int64_t i = 0; i < m; ++i) u.push_back((i + 0.41) / m);
  const auto reference = [&](double temperature) {
    const torch::Tensor w = ((z - std::get<0>(z.max(1, true))) / temperature).exp();  // (m, n)
    const torch::Tensor cum = w.cumsum(1);                                            // (m, n)
    std::vector<int64_t> want;
    for (int64_t i = 0; i < m; ++i) {
      const torch::Tensor over = cum[i] > u[static_cast<size_t>(i)] * cum[i][n - 1].item<double>();  // (n)
      want.push_back(over.to(torch::kInt64).argmax().item<int64_t>());
    }
    return want;
  };
  const std::vector<int64_t> want = reference(0.7);
  const int threads = at::get_num_threads();
  for (const int t : {1, 2}) {
    INFO("threads " << t);
    at::set_num_threads(t);
    CHECK(models::pick_tokens(z, sampling(0.7), u) == want);
    // next_tokens reads float32 rows in place, cut at the tokenizer's 151,646 ids.
    SamplingParams p = sampling(0.7);
    p.vocab_limit = 151646;
    const torch::Tensor z32 = z.to(torch::kFloat32);  // (m, n)
    const models::NextTokens got = models::next_tokens(z32, p, [&](int64_t i) { return u[static_cast<size_t>(i)]; });
    CHECK(got.tokens == models::pick_tokens(z32.narrow(1, 0, p.vocab_limit).to(torch::kFloat64).contiguous(), p, u));
  }
  at::set_num_threads(threads);
  CHECK(reference(1.0) != want);  // control: the temperature moves the choices this test compares

  // Greedy on float rows (read 16 lanes at a time): the first index of the maximum, in the lanes'
  // body and in the tail past the last full 16 (151,646 = 16 x 9,477 + 14), and NaN refused.
  SamplingParams greedy = sampling(0.0);
  greedy.vocab_limit = 151646;
  torch::Tensor z32 = z.to(torch::kFloat32);  // (m, n)
  const std::vector<std::pair<int64_t, int64_t>> ties{{5000, 70001}, {151640, 151645}, {7, 151644}, {16, 17}};
  for (size_t r = 0; r < ties.size(); ++r) {
    z32[r][ties[r].first] = 100.0f;
    z32[r][ties[r].second] = 100.0f;
  }
  z32[4][151700] = 1000.0f;  // past the cut: not a candidate
  const models::NextTokens picked = models::next_tokens(z32, greedy, [](int64_t) { return 0.5; });
  for (size_t r = 0; r < ties.size(); ++r) CHECK(picked.tokens[r] == ties[r].first);
  const torch::Tensor cut = z32.narrow(1, 0, greedy.vocab_limit);  // (m, 151646)
  CHECK(picked.tokens[4] == cut[4].argmax().item<int64_t>());
  for (int64_t r = 5; r < m; ++r) CHECK(picked.tokens[r] == cut[r].argmax().item<int64_t>());
  for (const int64_t at : {int64_t{0}, int64_t{12345}, int64_t{151645}}) {
    torch::Tensor bad = z32.clone();
    bad[6][at] = std::nan("");
    CHECK_THROWS_WITH(models::next_tokens(bad, greedy, [](int64_t) { return 0.5; }), Catch::Contains("NaN or +inf"));
  }
}

TEST_CASE("next_tokens: pick_tokens on the cut float64 rows, uniforms in row order, log-probs of the whole row",
          "[sampler]") {
  const int64_t m = 6, n = 40, limit = 25;
  const torch::Tensor z = torch::randn({m, n}, at::detail::createCPUGenerator(4), torch::kFloat32) * 3.0;  // (m, n)
  for (const double temperature : {0.8, 0.0}) {
    INFO("temperature " << temperature);
    SamplingParams p = sampling(temperature);
    p.vocab_limit = limit;
    std::vector<int64_t> asked;
    const models::NextTokens got = models::next_tokens(z, p, [&](int64_t i) {
      asked.push_back(i);
      return (i + 0.5) / m;
    });
    std::vector<double> u;
    for (int64_t i = 0; i < m; ++i) u.push_back(temperature > 0 ? (i + 0.5) / m : 0.0);
    const std::vector<int64_t> want = models::pick_tokens(z.narrow(1, 0, limit).to(torch::kFloat64).contiguous(), p, u);
    CHECK(got.tokens == want);
    CHECK(asked == (temperature > 0 ? std::vector<int64_t>{0, 1, 2, 3, 4, 5} : std::vector<int64_t>{}));
    const torch::Tensor logp = torch::log_softmax(z, 1);  // (m, n) float32, over the whole row
    for (int64_t i = 0; i < m; ++i) {
      CHECK(got.tokens[i] < limit);
      CHECK(got.logp[i] == static_cast<double>(logp[i][got.tokens[i]].item<float>()));
    }
  }
}

TEST_CASE("next_tokens_narrowed (the GPU path) chooses what next_tokens chooses, log-probs within rounding",
          "[sampler]") {
  const int64_t m = 7, n = 50, limit = 31;
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    const torch::Tensor z = (torch::randn({m, n}, at::detail::createCPUGenerator(5), torch::kFloat64) * 4.0).to(dtype);
    const double tol = dtype == torch::kFloat32 ? 2e-6 : 1e-13;
    for (const double temperature : {1.0, 0.7, 0.0}) {
      INFO("dtype " << dtype << ", temperature " << temperature);
      SamplingParams p = sampling(temperature);
      p.vocab_limit = limit;
      std::vector<int64_t> asked_a, asked_b;
      const models::NextTokens a = models::next_tokens(z, p, [&](int64_t i) {
        asked_a.push_back(i);
        return (i + 0.25) / m;
      });
      const models::NextTokens b = models::next_tokens_narrowed(z, p, [&](int64_t i) {
        asked_b.push_back(i);
        return (i + 0.25) / m;
      });
      CHECK(b.tokens == a.tokens);
      CHECK(asked_b == asked_a);
      REQUIRE(b.logp.size() == a.logp.size());
      for (size_t i = 0; i < a.logp.size(); ++i)
        CHECK(std::abs(b.logp[i] - a.logp[i]) <= tol * (1 + std::abs(a.logp[i])));
    }
  }
  // A NaN row is refused as the host path refuses it.
  torch::Tensor bad = torch::zeros({2, 8});
  bad[1][3] = NAN;
  CHECK_THROWS_WITH(models::next_tokens_narrowed(bad, sampling(0.0), [](int64_t) { return 0.5; }),
                    Catch::Contains("NaN"));
}

TEST_CASE("ends_at_stop: stop strings match the decoded text at the token that completes them", "[sampler]") {
  // Tokens of a made-up vocabulary whose texts merge differently: id 1 is ".\n", 2 is "\n", 3 is
  // "Obs", 4 is ":", 5 is "done", 6 is "▁x" decoded with its leading space dropped at the start.
  const std::vector<std::string> text{"", ".\n", "\n", "Obs", ":", "done", " x"};
  SamplingParams p = sampling(1.0);
  p.stop_strings = {"\nObs:"};
  p.decode = [&](const std::vector<int64_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += i == 0 && ids[i] == 6 ? "x" : text[static_cast<size_t>(ids[i])];
    return s;
  };
  const std::vector<int64_t> merged{5, 1, 3, 4};  // "done" ".\n" "Obs" ":"
  for (size_t n = 1; n < merged.size(); ++n)
    CHECK_FALSE(models::ends_at_stop({merged.begin(), merged.begin() + static_cast<long>(n)}, p));
  CHECK(models::ends_at_stop(merged, p));
  CHECK(models::ends_at_stop({2, 3, 4}, p));  // the string's own tokens
  // Control: the ids the string encodes to alone ("\n" "Obs" ":") miss the merged form.
  SamplingParams ids = sampling(1.0);
  ids.stop_sequences = {{2, 3, 4}};
  CHECK_FALSE(models::ends_at_stop(merged, ids));
  // The window reaches one token before the string: a dropped leading space there cannot hide it.
  p.stop_strings = {" x:"};
  CHECK(models::ends_at_stop({5, 6, 4}, p));
  // (A response that opens with the string is decoded without that space: SentencePiece drops the
  // first one, so a string that begins with a space cannot match its first token.)
  CHECK_FALSE(models::ends_at_stop({6, 4}, p));
  // Refused without a decoder, or empty.
  SamplingParams bad = sampling(1.0);
  bad.stop_strings = {"x"};
  const std::vector<models::GenerationRequest> one{{{1}, 0, -1}};
  CHECK_THROWS_WITH(models::validate_generation(one, bad, 10, 100, "s", "max_len"),
                    "s: stop strings need a decode function");
  bad.stop_strings = {""};
  bad.decode = p.decode;
  CHECK_THROWS_WITH(models::validate_generation(one, bad, 10, 100, "s", "max_len"), "s: a stop string is empty");
}
