// generate(): the continuous-batching loop over the model's prefill / decode forwards (or, with
// use_kv_cache false, full-prefix recomputation), one token choice per live sequence per step.
#include "models/llama/sampler.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/error.h"
#include "models/llama/model.h"
#include "models/llama/next_token.h"
#include "parallel/tp_layers.h"

namespace tandem::models {

namespace {

int64_t max_new_of(const GenerationRequest& r, const SamplingParams& p) {
  return r.max_new_tokens >= 0 ? r.max_new_tokens : p.max_new_tokens;
}

// One sequence being decoded; it sits in cache slot = its index in Batcher::live_.
struct Live {
  size_t request;
  SampleStream stream;
  int64_t max_new;
  Generation out;
  torch::Tensor prompt_logits;  // (1, V) its first token's logits, for later readers of its prompt (share_prompts)
};

class Batcher {
 public:
  Batcher(LlamaForCausalLMImpl& model, const std::vector<GenerationRequest>& requests, const SamplingParams& p)
      : model_(model), requests_(requests), p_(p), results_(requests.size()), plan_(kv_plan(requests, p)) {
    if (p.use_kv_cache && plan_.slots > 0)
      cache_.emplace(model.make_kv_cache(plan_.slots, plan_.capacity, plan_.prefix_slots, plan_.prefix_capacity));
  }

  std::vector<Generation> run(GenerationStats& stats) {
    stats.kv_slots = cache_ ? plan_.slots : 0;
    stats.kv_rows = cache_ ? plan_.rows() : 0;
    while (true) {
      admit(stats);
      if (live_.empty()) {
        if (next_ >= requests_.size()) break;
        continue;  // everything admitted finished on its first token; admit more
      }
      decode(stats);
    }
    for (const Generation& g : results_) stats.generated_tokens += static_cast<int64_t>(g.tokens.size());
    return std::move(results_);
  }

 private:
  // Prefills waiting requests into the free slots and samples their first tokens.
  // With share_prompts every prompt goes to the cache's prefix store, once while any sequence
  // holding it is live: a request whose prompt is prefilled in this admission, or held by a live
  // sequence admitted earlier (continuous batching admits a group's samples as slots free up),
  // reads that prefix and takes the logits row its first token came from.
  void admit(GenerationStats& stats) {
    std::vector<std::vector<int64_t>> prompts;     // the distinct prompts to prefill
    std::vector<int64_t> slots;                    // unshared: the slot each of them is prefilled into
    std::vector<int64_t> rows;                     // per admitted sequence: its prefill row, or -1
    std::vector<torch::Tensor> kept;               // per admitted sequence: its stored row, or undefined
    std::map<std::vector<int64_t>, int64_t> seen;  // prompt -> its index in `prompts`
    const bool share = p_.share_prompts && cache_.has_value();
    const size_t first = live_.size();
    while (live_.size() < static_cast<size_t>(plan_.slots) && next_ < requests_.size()) {
      const size_t r = next_++;
      const int64_t max_new = max_new_of(requests_[r], p_);
      if (max_new == 0) continue;  // an empty response; results_[r] stays empty
      const std::vector<int64_t>& prompt = requests_[r].prompt;
      const auto slot = static_cast<int64_t>(live_.size());
      const auto now = share ? seen.find(prompt) : seen.end();
      const int64_t before = share && now == seen.end() ? live_holding(prompt, first) : -1;
      if (now != seen.end()) {  // prefilled in this admission
        rows.push_back(now->second), kept.emplace_back();
      } else if (before >= 0) {  // held by a live sequence: read its prefix
        cache_->attach(slot, cache_->prefix_of(before));
        rows.push_back(-1), kept.push_back(live_[static_cast<size_t>(before)].prompt_logits);
      } else {
        const auto index = static_cast<int64_t>(prompts.size());
        if (share) seen.emplace(prompt, index);
        rows.push_back(index), kept.emplace_back();
        slots.push_back(slot);
        prompts.push_back(prompt);
        stats.prefill_tokens += static_cast<int64_t>(prompt.size());
      }
      live_.push_back({r, SampleStream(requests_[r].seed), max_new, {}, {}});
    }
    if (live_.size() == first) return;
    stats.max_live = std::max<int64_t>(stats.max_live, static_cast<int64_t>(live_.size()));
    torch::Tensor prefilled;  // (U, V)
    if (!prompts.empty()) {
      ++stats.prefills;
      KvCache* cache = cache_ ? &*cache_ : nullptr;
      if (share) {
        const std::vector<int64_t> prefixes = cache_->free_prefixes(static_cast<int64_t>(prompts.size()));
        prefilled = model_.prefill(pack_rows(prompts), cache, prefixes, true);
        for (size_t i = 0; i < rows.size(); ++i)
          if (rows[i] >= 0) cache_->attach(static_cast<int64_t>(first + i), prefixes[static_cast<size_t>(rows[i])]);
      } else {
        prefilled = model_.prefill(pack_rows(prompts), cache, cache ? slots : std::vector<int64_t>{});
      }
    }
    if (!share) {
      take(prefilled, first);
      return;
    }
    std::vector<torch::Tensor> logits;  // per admitted sequence: (1, V)
    for (size_t i = 0; i < rows.size(); ++i) {
      logits.push_back(rows[i] >= 0 ? prefilled.narrow(0, rows[i], 1) : kept[i]);
      live_[first + i].prompt_logits = logits.back();
    }
    take(torch::cat(logits), first);  // (admitted, V)
  }

  // The slot of a live sequence in [0, end) whose prompt is `prompt`, or -1.
  int64_t live_holding(const std::vector<int64_t>& prompt, size_t end) const {
    for (size_t j = 0; j < end; ++j)
      if (requests_[live_[j].request].prompt == prompt) return static_cast<int64_t>(j);
    return -1;
  }

  // Extends every live sequence by one token.
  void decode(GenerationStats& stats) {
    ++stats.decode_steps;
    stats.max_live = std::max<int64_t>(stats.max_live, static_cast<int64_t>(live_.size()));
    if (cache_) {
      std::vector<int64_t> last;
      for (const Live& s : live_) last.push_back(s.out.tokens.back());
      take(model_.decode_step(torch::tensor(last, torch::kInt64), *cache_), 0);
      return;
    }
    std::vector<std::vector<int64_t>> prefixes;  // recompute baseline: the whole prompt + response
    for (const Live& s : live_) {
      prefixes.push_back(requests_[s.request].prompt);
      prefixes.back().insert(prefixes.back().end(), s.out.tokens.begin(), s.out.tokens.end());
    }
    take(model_.prefill(pack_rows(prefixes)), 0);
  }

  // logits (m, V): the next-token logits of live_[first + i]. Chooses, records and retires.
  void take(const torch::Tensor& logits, size_t first) {
    const int64_t m = logits.size(0);
    const NextTokens next = next_tokens(logits, p_, [&](int64_t i) { return live_[first + i].stream.next_uniform(); });
    std::vector<size_t> done;
    for (int64_t i = 0; i < m; ++i) {
      Live& s = live_[first + i];
      s.out.tokens.push_back(next.tokens[i]);
      s.out.logp.push_back(next.logp[i]);
      s.out.stopped = stops(s.out.tokens);
      if (s.out.stopped || static_cast<int64_t>(s.out.tokens.size()) >= s.max_new) done.push_back(first + i);
    }
    // Highest index first: the last live sequence, moved into a freed slot, is never one of them.
    for (auto it = done.rbegin(); it != done.rend(); ++it) retire(*it);
  }

  bool stops(const std::vector<int64_t>& tokens) const { return ends_at_stop(tokens, p_); }

  // Records live_[i]'s result and fills its slot with the last live sequence (and its cache).
  void retire(size_t i) {
    results_[live_[i].request] = std::move(live_[i].out);
    const size_t last = live_.size() - 1;
    if (i != last) live_[i] = std::move(live_[last]);
    live_.pop_back();
    if (!cache_) return;
    if (i != last)
      cache_->move(static_cast<int64_t>(last), static_cast<int64_t>(i));
    else
      cache_->clear(static_cast<int64_t>(i));
  }

  LlamaForCausalLMImpl& model_;
  const std::vector<GenerationRequest>& requests_;
  const SamplingParams& p_;
  std::vector<Generation> results_;
  std::vector<Live> live_;
  const KvPlan plan_;  // slots: the most sequences live at once
  size_t next_ = 0;    // the first request not yet admitted
  std::optional<KvCache> cache_;
};

}  // namespace

KvPlan kv_plan(const std::vector<GenerationRequest>& requests, const SamplingParams& p) {
  KvPlan plan;
  if (requests.empty()) return plan;
  int64_t capacity = 1, longest_prompt = 1, longest_response = 1;
  std::set<std::vector<int64_t>> distinct;
  for (const auto& r : requests) {
    capacity = std::max<int64_t>(capacity, r.prompt.size() + max_new_of(r, p));
    longest_prompt = std::max<int64_t>(longest_prompt, r.prompt.size());
    longest_response = std::max<int64_t>(longest_response, max_new_of(r, p));
    if (p.share_prompts) distinct.insert(r.prompt);
  }
  const auto n = static_cast<int64_t>(requests.size());
  plan.slots = std::min<int64_t>(p.max_batch, n);
  plan.capacity = capacity;
  if (!p.share_prompts || !p.use_kv_cache) return plan;
  // The rows S slots take with shared prompts: S responses and a prompt per live distinct one.
  const auto d = static_cast<int64_t>(distinct.size());
  const auto rows = [&](int64_t s) { return s * longest_response + std::min(s, d) * longest_prompt; };
  const int64_t budget = plan.rows();
  // rows() grows with s: the largest s within the budget, by bisection from the unshared count.
  int64_t slots = plan.slots, hi = std::max(slots, std::min<int64_t>(p.max_live, n));
  while (slots < hi) {
    const int64_t mid = slots + (hi - slots + 1) / 2;
    if (rows(mid) <= budget)
      slots = mid;
    else
      hi = mid - 1;
  }
  plan.slots = slots;
  plan.capacity = longest_response;
  plan.prefix_slots = std::min(slots, d);
  plan.prefix_capacity = longest_prompt;
  return plan;
}

uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t prompt_id, int64_t sample_index) {
  uint64_t h = mix64(run_seed);
  for (int64_t x : {step, prompt_id, sample_index}) h = mix64(h ^ static_cast<uint64_t>(x));
  return h;
}

std::vector<Generation> generate(LlamaForCausalLMImpl& model, const std::vector<GenerationRequest>& requests,
                                 const SamplingParams& params, GenerationStats* stats) {
  validate_generation(requests, params, model.config().vocab_size, model.config().max_seq_len, "sampler",
                      "max_seq_len");
  torch::NoGradGuard no_grad;
  parallel::SamplingGuard sampling;  // the layers' decode paths (parallel/tp_layers.h)
  GenerationStats local;
  Batcher batcher(model, requests, params);
  return batcher.run(stats != nullptr ? *stats : local);
}

}  // namespace tandem::models
