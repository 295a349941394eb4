// Recompute-the-prefix decoding over the unified model's text head.
#include "models/unified/generate.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "models/llama/next_token.h"
#include "parallel/tp_layers.h"

namespace tandem::models {

namespace {

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
  validate_generation(requests, p, c.vocab_size, c.max_text_len, "unified sampler", "max_text_len");
  torch::NoGradGuard no_grad;
  parallel::SamplingGuard sampling;  // the layers' decode paths (parallel/tp_layers.h)
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
      const torch::Tensor last = logits.gather(1, at).squeeze(1);  // (B, V), log-prob dtype
      const NextTokens chosen =
          next_tokens(last, p, [&](int64_t i) { return live[static_cast<size_t>(i)].stream.next_uniform(); });
      std::vector<Live> next;
      for (int64_t i = 0; i < b; ++i) {
        Live& s = live[static_cast<size_t>(i)];
        const int64_t token = chosen.tokens[i];
        Generation& g = out[s.request];
        g.tokens.push_back(token);
        g.logp.push_back(chosen.logp[i]);
        s.ids.push_back(token);
        g.stopped = ends_at_stop(g.tokens, p);
        if (!g.stopped && static_cast<int64_t>(g.tokens.size()) < s.max_new) next.push_back(std::move(s));
      }
      live = std::move(next);
    }
  }
  return out;
}

}  // namespace tandem::models
