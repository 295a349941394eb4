// Recompute-the-prefix decoding over the unified model's text head.
#include "models/unified/generate.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "models/llama/next_token.h"

namespace tandem::models {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw UserError("unified sampler: " + what);
}

bool ends_with(const std::vector<int64_t>& s, const std::vector<int64_t>& tail) {
  return s.size() >= tail.size() && std::equal(tail.begin(), tail.end(), s.end() - static_cast<long>(tail.size()));
}

struct Live {
  size_t request;
  std::vector<int64_t> ids;  // prompt + response so far
  SampleStream stream;
  int64_t max_new;
};

}  // namespace

std::vector<Generation> generate_unified(UnifiedModelImpl& model, const std::vector<GenerationRequest>& requests,
                                         const SamplingParams& p) {
  const UnifiedConfig& c = model.config();
  require(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0");
  require(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1]");
  require(p.top_k >= 0 && p.max_new_tokens >= 0 && p.max_batch >= 1 && p.vocab_limit >= 0,
          "top_k, max_new_tokens and vocab_limit must be >= 0, max_batch >= 1");
  for (const auto& s : p.stop_sequences) require(!s.empty(), "a stop sequence is empty");
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    const std::string who = "request " + std::to_string(i) + ": ";
    require(!r.prompt.empty(), who + "empty prompt");
    require(r.max_new_tokens >= -1, who + "max_new_tokens must be >= 0 (or -1: the params' value)");
    for (int64_t id : r.prompt)
      require(id >= 0 && id < c.vocab_size, who + "prompt id " + std::to_string(id) + " outside the vocabulary");
    const int64_t max_new = r.max_new_tokens >= 0 ? r.max_new_tokens : p.max_new_tokens;
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + max_new;
    require(total <= c.max_text_len, who + "prompt + max_new_tokens = " + std::to_string(total) +
                                         " exceeds the model's max_text_len " + std::to_string(c.max_text_len));
  }
  torch::NoGradGuard no_grad;
  std::vector<Generation> out(requests.size());
  for (size_t first = 0; first < requests.size(); first += static_cast<size_t>(p.max_batch)) {
    std::vector<Live> live;
    for (size_t i = first; i < std::min(requests.size(), first + static_cast<size_t>(p.max_batch)); ++i) {
      const int64_t max_new = requests[i].max_new_tokens >= 0 ? requests[i].max_new_tokens : p.max_new_tokens;
      if (max_new > 0) live.push_back({i, requests[i].prompt, SampleStream(requests[i].seed), max_new});
    }
    while (!live.empty()) {
      const int64_t b = static_cast<int64_t>(live.size());
      int64_t width = 0;
      for (const Live& s : live) width = std::max<int64_t>(width, static_cast<int64_t>(s.ids.size()));
      torch::Tensor ids = torch::zeros({b, width}, torch::kInt64);  // (B, T)
      torch::Tensor lengths = torch::zeros({b}, torch::kInt64);     // (B)
      for (int64_t i = 0; i < b; ++i) {
        const auto& s = live[static_cast<size_t>(i)].ids;
        ids[i].narrow(0, 0, static_cast<int64_t>(s.size())).copy_(torch::tensor(s, torch::kInt64));
        lengths[i] = static_cast<int64_t>(s.size());
      }
      const torch::Tensor logits = model.text_logits(ids.to(model.device()), lengths);  // (B, T, V)
      const torch::Tensor at = (lengths - 1).view({b, 1, 1}).expand({b, 1, logits.size(2)}).to(logits.device());
      const torch::Tensor last = logits.gather(1, at).squeeze(1).to(torch::kCPU).contiguous();  // (B, V), log-prob dtype
      const torch::Tensor z64 = last.to(torch::kFloat64).contiguous();  // (B, V)
      const torch::Tensor logp_all = torch::log_softmax(last, 1).to(torch::kFloat64).contiguous();  // (B, V)
      const int64_t vocab = last.size(1);
      const int64_t limit = p.vocab_limit > 0 ? std::min(p.vocab_limit, vocab) : vocab;
      std::vector<Live> next;
      for (int64_t i = 0; i < b; ++i) {
        Live& s = live[static_cast<size_t>(i)];
        const double u = is_greedy(p) ? 0.0 : s.stream.next_uniform();
        const int64_t token = pick_token(z64.data_ptr<double>() + i * vocab, limit, p, u);
        Generation& g = out[s.request];
        g.tokens.push_back(token);
        g.logp.push_back(logp_all.data_ptr<double>()[i * vocab + token]);
        s.ids.push_back(token);
        g.stopped = std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end();
        for (const auto& seq : p.stop_sequences) g.stopped = g.stopped || ends_with(g.tokens, seq);
        if (!g.stopped && static_cast<int64_t>(g.tokens.size()) < s.max_new) next.push_back(std::move(s));
      }
      live = std::move(next);
    }
  }
  return out;
}

}  // namespace tandem::models
