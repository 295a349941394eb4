// Greedy / temperature / top-k / top-p token choice on logits rows, in float64. Each row is one
// intra-op thread's, start to end: its maximum, its weights exp((z - max) / T) in a scratch row
// through ATen's vectorised exp (a per-element std::exp was a quarter of a CPU decode step), and
// the choice. The nucleus is found with a growing partial sort: it usually holds a handful of
// tokens, and sorting a whole 150k vocabulary per token would dominate a CPU decode step.
#include "models/llama/next_token.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/llama/inputs.h"

namespace tandem::models {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr int64_t kFirstNucleusGuess = 64;

// First candidate (in `order`) whose cumulative weight exceeds u * total.
int64_t inverse_cdf(const double* w, const std::vector<int64_t>& order, double u) {
  double total = 0;
  for (int64_t i : order) total += w[i];
  const double target = u * total;
  double cum = 0;
  int64_t last_positive = order.front();
  for (int64_t i : order) {
    if (w[i] <= 0) continue;
    cum += w[i];
    last_positive = i;
    if (cum > target) return i;
  }
  return last_positive;  // u * total rounded up to the total
}

// inverse_cdf over every id in order, without building the order.
int64_t inverse_cdf(const double* w, int64_t n, double u) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += w[i];
  const double target = u * total;
  double cum = 0;
  int64_t last_positive = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] <= 0) continue;
    cum += w[i];
    last_positive = i;
    if (cum > target) return last_positive;
  }
  return last_positive;
}

// The sampled token from a row's weights w[0..n) (the maximum's weight is exactly 1).
int64_t choose(const double* w, int64_t n, const SamplingParams& p, double u) {
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, n) : n;
  const bool nucleus = p.top_p < 1.0;
  if (k == n && !nucleus) return inverse_cdf(w, n, u);  // the whole vocabulary in id order
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);

  const auto better = [&](int64_t a, int64_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  if (k < n) {
    std::nth_element(order.begin(), order.begin() + k, order.end(), better);
    order.resize(static_cast<size_t>(k));
  }
  if (!nucleus) {
    std::sort(order.begin(), order.end(), better);
    return inverse_cdf(w, order, u);
  }
  double total = 0;
  for (int64_t i : order) total += w[i];
  const double needed = p.top_p * total;
  // Sort a prefix big enough to hold the nucleus, growing it until it does.
  int64_t kept = 0;
  for (int64_t m = std::min(k, kFirstNucleusGuess);; m = std::min(k, 4 * m)) {
    std::partial_sort(order.begin(), order.begin() + m, order.end(), better);
    double cum = 0;
    for (kept = 0; kept < m && cum < needed;) cum += w[order[kept++]];
    if (cum >= needed || m == k) break;
  }
  order.resize(static_cast<size_t>(std::max<int64_t>(kept, 1)));
  return inverse_cdf(w, order, u);
}

// A row's maximum tells all: NaN or +inf anywhere makes it NaN or +inf, and it is -inf only when
// every entry is. Throws std::runtime_error for either.
void check_row_top(double top) {
  if (std::isnan(top) || top == INFINITY) throw std::runtime_error("sampler: a logits row holds NaN or +inf");
  if (top == -INFINITY) throw std::runtime_error("sampler: a logits row is all -inf");
}

}  // namespace

uint64_t mix64(uint64_t x) {
  uint64_t z = x + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SampleStream::next_u64() {
  const uint64_t out = mix64(state_);
  state_ += kGolden;
  return out;
}

double SampleStream::next_uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

bool is_greedy(const SamplingParams& p) { return p.temperature == 0.0 || p.top_k == 1; }

namespace {

struct ArgMax {
  int64_t arg;  // the first index of the maximum
  double max;
  bool nan;  // the row holds a NaN
};

// A row's ArgMax, one element at a time.
template <class T>
ArgMax arg_max_scalar(const T* row, int64_t n, int64_t from, ArgMax m) {
  for (int64_t j = from; j < n; ++j) {
    if (row[j] > m.max) m.max = row[j], m.arg = j;
    m.nan = m.nan || std::isnan(row[j]);
  }
  return m;
}

// The ArgMax of a row's first element, where both loops start.
template <class T>
ArgMax first(const T* row) {
  return {0, static_cast<double>(row[0]), std::isnan(row[0])};
}

template <class T>
ArgMax arg_max(const T* row, int64_t n) {
  return arg_max_scalar(row, n, 1, first(row));
}

// A float row 16 lanes at a time, each lane keeping its first maximum (a strict >, as the scalar
// loop), then the lanes' largest value at the lowest index: the scalar loop's answer exactly.
// GCC lowers the vectors to whatever the build targets (SSE2 at least); the scalar loop's branch
// per element was most of a decode step's choice.
template <>
ArgMax arg_max(const float* row, int64_t n) {
  constexpr int kLanes = 16;
  typedef float VF __attribute__((vector_size(kLanes * 4)));
  typedef int32_t VI __attribute__((vector_size(kLanes * 4)));
  if (n < 2 * kLanes) return arg_max_scalar(row, n, 1, first(row));
  VF best;
  std::memcpy(&best, row, sizeof best);
  VI at, cur, nan = best != best;
  for (int l = 0; l < kLanes; ++l) at[l] = l;
  cur = at;
  int64_t j = kLanes;
  for (; j + kLanes <= n; j += kLanes) {
    VF v;
    std::memcpy(&v, row + j, sizeof v);
    cur += kLanes;
    const VI gt = v > best;
    best = gt ? v : best;
    at = gt ? cur : at;
    nan |= v != v;
  }
  ArgMax m{at[0], best[0], false};
  for (int l = 0; l < kLanes; ++l) {
    m.nan = m.nan || nan[l] != 0;
    if (best[l] > m.max || (best[l] == m.max && at[l] < m.arg)) m.max = best[l], m.arg = at[l];
  }
  return arg_max_scalar(row, n, j, m);
}

// Each row of z (m, n), float or double, columns contiguous and rows at any stride: its maximum
// (NaN when it holds one) into top, its token into chosen. One pass per row on one intra-op
// thread, its weights in a scratch row of that thread's: a decode step's 16 x 151,936 logits as
// whole-batch tensor ops (a float64 copy, then z - max, the exp, two passes to choose) streamed
// ~150 MB through memory, ~8 ms of a ~75 ms CPU decode step; row by row the weights stay in the
// core's cache. Values convert to double exactly, so a float row chooses what its float64 copy would.
template <class T>
std::vector<int64_t> pick_rows(const torch::Tensor& z, const SamplingParams& p, const std::vector<double>& u) {
  const int64_t m = z.size(0), n = z.size(1), stride = z.stride(0);
  std::vector<int64_t> chosen(static_cast<size_t>(m), 0);
  std::vector<double> top(static_cast<size_t>(m), 0.0);
  const T* zp = z.data_ptr<T>();
  const bool greedy = is_greedy(p);
  at::parallel_for(0, m, 1, [&](int64_t begin, int64_t end) {
    torch::Tensor scratch;  // (n) this thread's weights
    for (int64_t i = begin; i < end; ++i) {
      const T* row = zp + i * stride;
      const auto [arg, max, nan] = arg_max(row, n);
      const double t = nan ? std::nan("") : max;
      top[i] = t, chosen[i] = arg;
      if (greedy || std::isnan(t) || std::isinf(t)) continue;  // a bad row is refused after the pass
      if (!scratch.defined()) scratch = torch::empty({n}, torch::kFloat64);
      double* w = scratch.data_ptr<double>();
      for (int64_t j = 0; j < n; ++j) w[j] = static_cast<double>(row[j]) - t;
      if (p.temperature != 1.0)
        for (int64_t j = 0; j < n; ++j) w[j] /= p.temperature;
      scratch.exp_();  // ATen's exp (MKL's VML here), on this thread: inside a parallel region
      chosen[i] = choose(w, n, p, u[static_cast<size_t>(i)]);
    }
  });
  for (int64_t i = 0; i < m; ++i) check_row_top(top[i]);  // the first bad row, in row order
  return chosen;
}

// pick_tokens on host rows z (m >= 1, n >= 1), float or float64 with unit column stride, rows at
// any stride; any other z is converted to a contiguous float64 copy first.
std::vector<int64_t> pick_rows(const torch::Tensor& z, const SamplingParams& p, const std::vector<double>& u) {
  if (z.stride(1) == 1 && z.scalar_type() == torch::kFloat32) return pick_rows<float>(z, p, u);
  if (z.stride(1) == 1 && z.scalar_type() == torch::kFloat64) return pick_rows<double>(z, p, u);
  return pick_rows<double>(z.to(torch::kFloat64).contiguous(), p, u);
}

}  // namespace

int64_t pick_token(const double* z, int64_t n, const SamplingParams& p, double u) {
  if (n < 1) throw std::invalid_argument("pick_token: empty logits row");
  const torch::Tensor row = torch::from_blob(const_cast<double*>(z), {1, n}, torch::kFloat64);  // (1, n)
  return pick_rows(row, p, {u}).front();
}

std::vector<int64_t> pick_tokens(const torch::Tensor& z, const SamplingParams& p, const std::vector<double>& u) {
  TORCH_CHECK(z.dim() == 2 && z.scalar_type() == torch::kFloat64 && z.is_contiguous() && z.device().is_cpu(),
              "pick_tokens: z must be a contiguous (m, n) float64 CPU tensor");
  const int64_t m = z.size(0), n = z.size(1);
  if (n < 1) throw std::invalid_argument("pick_tokens: empty logits rows");
  if (static_cast<int64_t>(u.size()) != m) throw std::invalid_argument("pick_tokens: one uniform per row");
  if (m == 0) return {};
  return pick_rows(z, p, u);
}

NextTokens next_tokens_narrowed(const torch::Tensor& logits, const SamplingParams& p,
                                const std::function<double(int64_t)>& uniform) {
  const int64_t m = logits.size(0), vocab = logits.size(1);
  const int64_t limit = p.vocab_limit > 0 ? std::min(p.vocab_limit, vocab) : vocab;
  const torch::Tensor z = logits.narrow(1, 0, limit);           // (m, limit) on the logits' device
  const torch::Tensor lse = torch::logsumexp(logits, 1, true);  // (m, 1) over the full vocabulary
  NextTokens out;
  if (is_greedy(p)) {
    const torch::Tensor best = z.argmax(1, /*keepdim=*/true);  // (m, 1)
    const torch::Tensor host =                                 // (m, 3): token, logit, log-normaliser
        torch::cat({best.to(torch::kFloat64), z.gather(1, best).to(torch::kFloat64), lse.to(torch::kFloat64)}, 1)
            .to(torch::kCPU)
            .contiguous();
    const double* h = host.data_ptr<double>();
    for (int64_t i = 0; i < m; ++i) {
      const double top = h[3 * i + 1];
      check_row_top(top);
      out.tokens.push_back(static_cast<int64_t>(h[3 * i]));
      out.logp.push_back(top - h[3 * i + 2]);
    }
    return out;
  }
  const torch::Tensor host = torch::cat({z, lse.to(z.scalar_type())}, 1).to(torch::kCPU);  // (m, limit + 1)
  const torch::Tensor z64 = host.narrow(1, 0, limit).to(torch::kFloat64).contiguous();     // (m, limit)
  std::vector<double> u(static_cast<size_t>(m), 0.0);
  for (int64_t i = 0; i < m; ++i) u[static_cast<size_t>(i)] = uniform(i);
  out.tokens = pick_tokens(z64, p, u);
  const torch::Tensor h = host.to(torch::kFloat64).contiguous();
  const double* hp = h.data_ptr<double>();
  for (int64_t i = 0; i < m; ++i) out.logp.push_back(hp[i * (limit + 1) + out.tokens[i]] - hp[i * (limit + 1) + limit]);
  return out;
}

NextTokens next_tokens(const torch::Tensor& logits, const SamplingParams& p,
                       const std::function<double(int64_t)>& uniform) {
  if (!logits.is_cpu()) return next_tokens_narrowed(logits, p, uniform);  // (m, V) never crosses whole
  const int64_t m = logits.size(0), vocab = logits.size(1);
  const int64_t limit = p.vocab_limit > 0 ? std::min(p.vocab_limit, vocab) : vocab;
  const torch::Tensor& z = logits;                  // (m, V) in the log-prob dtype
  const torch::Tensor cut = z.narrow(1, 0, limit);  // (m, limit) for the choice, read in place when it can be
  std::vector<double> u(static_cast<size_t>(m), 0.0);
  if (!is_greedy(p))
    for (int64_t i = 0; i < m; ++i) u[static_cast<size_t>(i)] = uniform(i);
  NextTokens out;
  if (m == 0) return out;
  out.tokens = pick_rows(cut, p, u);
  const torch::Tensor tokens = torch::tensor(out.tokens, torch::kInt64);  // (m)
  const torch::Tensor logp =                                              // (m)
      torch::log_softmax(z, 1).gather(1, tokens.unsqueeze(1)).squeeze(1).to(torch::kFloat64).contiguous();
  out.logp.assign(logp.data_ptr<double>(), logp.data_ptr<double>() + m);
  return out;
}

void validate_generation(const std::vector<GenerationRequest>& requests, const SamplingParams& p, int64_t vocab_size,
                         int64_t max_len, const std::string& who, const std::string& max_len_name) {
  const auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw UserError(who + ": " + what);
  };
  require(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0");
  require(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1]");
  require(p.top_k >= 0, "top_k must be >= 0");
  require(p.max_new_tokens >= 0, "max_new_tokens must be >= 0");
  require(p.max_batch >= 1, "max_batch must be >= 1");
  require(p.max_live >= 1, "max_live must be >= 1");
  require(p.vocab_limit >= 0, "vocab_limit must be >= 0");
  for (const auto& s : p.stop_sequences) require(!s.empty(), "a stop sequence is empty");
  for (const auto& s : p.stop_strings) require(!s.empty(), "a stop string is empty");
  require(p.stop_strings.empty() || p.decode != nullptr, "stop strings need a decode function");
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    const std::string request = "request " + std::to_string(i) + ": ";
    require(!r.prompt.empty(), request + "empty prompt");
    for (int64_t id : r.prompt)
      require(id >= 0 && id < vocab_size, request + "prompt id " + std::to_string(id) + " outside the vocabulary");
    require(r.max_new_tokens >= -1, request + "max_new_tokens must be >= 0 (or -1: the params' value)");
    const int64_t max_new = r.max_new_tokens >= 0 ? r.max_new_tokens : p.max_new_tokens;
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + max_new;
    require(total <= max_len, request + "prompt + max_new_tokens = " + std::to_string(total) + " exceeds the model's " +
                                  max_len_name + " " + std::to_string(max_len));
  }
}

bool ends_at_stop(const std::vector<int64_t>& tokens, const SamplingParams& p) {
  if (std::find(p.stop_ids.begin(), p.stop_ids.end(), tokens.back()) != p.stop_ids.end()) return true;
  for (const auto& seq : p.stop_sequences)
    if (tokens.size() >= seq.size() && std::equal(seq.rbegin(), seq.rend(), tokens.rbegin())) return true;
  if (p.stop_strings.empty()) return false;
  // The text of the last n + 1 ids, n the longest string's bytes: a string that ends in the newest
  // token spans at most n tokens (each decodes to a byte or more), and the one before them keeps a
  // decoder's dropped leading space (SentencePiece's first "▁") outside it. An earlier occurrence
  // would have ended the response at its own token, so any occurrence in the window is new.
  size_t longest = 0;
  for (const auto& s : p.stop_strings) longest = std::max(longest, s.size());
  const size_t n = std::min(tokens.size(), longest + 1);
  const std::string tail = p.decode(std::vector<int64_t>(tokens.end() - static_cast<std::ptrdiff_t>(n), tokens.end()));
  for (const auto& s : p.stop_strings)
    if (tail.find(s) != std::string::npos) return true;
  return false;
}

PackedInput pack_rows(const std::vector<std::vector<int64_t>>& seqs) {
  std::vector<int64_t> ids, pos, cu{0};
  int64_t width = 0;
  for (const auto& s : seqs) {
    ids.insert(ids.end(), s.begin(), s.end());
    for (size_t j = 0; j < s.size(); ++j) pos.push_back(static_cast<int64_t>(j));
    cu.push_back(cu.back() + static_cast<int64_t>(s.size()));
    width = std::max<int64_t>(width, static_cast<int64_t>(s.size()));
  }
  return {torch::tensor(ids, torch::kInt64).view({1, -1}), torch::tensor(pos, torch::kInt64).view({1, -1}),
          torch::tensor(cu, torch::kInt64), width};
}

}  // namespace tandem::models
