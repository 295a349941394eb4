// TurnSampler: live sequences in slots [0, live), paused ones after them; a turn's end swaps the
// sequence to the paused side, a resume swaps it back, so every decode step covers exactly the
// live slots as one batch.
#include "models/llama/turn_sampler.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "models/llama/inputs.h"
#include "models/llama/kv_cache.h"
#include "models/llama/model.h"
#include "models/llama/next_token.h"
#include "parallel/tp_layers.h"

namespace tandem::models {

struct TurnSampler::Seq {
  int64_t id = 0;
  SampleStream stream{0};
  std::vector<int64_t> prompt;  // until it is prefilled
  std::deque<int64_t> feed;     // tokens to decode through the cache before the next sample
  int64_t max_new = 0;          // this turn's
  int64_t total = 0;            // tokens of the sequence so far (sampled and forced included)
  Generation out;               // this turn's
};

TurnSampler::TurnSampler(LlamaForCausalLMImpl& model, const SamplingParams& params, int64_t slots, int64_t capacity)
    : model_(model), params_(params), capacity_(capacity), slots_(slots) {
  params_.share_prompts = false;
  if (slots < 1) throw UserError("turn sampler: slots must be >= 1, got " + std::to_string(slots));
  if (capacity < 2 || capacity > model.config().max_seq_len)
    throw UserError("turn sampler: a sequence's capacity " + std::to_string(capacity) +
                    " must be in [2, the model's max_seq_len " + std::to_string(model.config().max_seq_len) + "]");
  validate_generation({GenerationRequest{{0}, 0, 1}}, params_, model.config().vocab_size, capacity, "turn sampler",
                      "the episode's token cap");
  cache_ = std::make_unique<KvCache>(model.make_kv_cache(slots, capacity));
  stats_.kv_slots = slots;
  stats_.kv_rows = slots * capacity;
}

TurnSampler::~TurnSampler() = default;

void TurnSampler::start(int64_t id, const std::vector<int64_t>& prompt, uint64_t seed, int64_t max_new) {
  if (!known_.emplace(id, 0).second)
    throw std::invalid_argument("turn sampler: sequence " + std::to_string(id) + " exists");
  if (max_new < 1) throw std::invalid_argument("turn sampler: max_new must be >= 1");
  validate_generation({GenerationRequest{prompt, seed, max_new}}, params_, model_.config().vocab_size, capacity_,
                      "turn sampler", "the episode's token cap");
  auto s = std::make_unique<Seq>();
  s->id = id;
  s->stream = SampleStream(seed);
  s->prompt = prompt;
  s->max_new = max_new;
  s->total = static_cast<int64_t>(prompt.size());
  waiting_.push_back(std::move(s));
}

int64_t TurnSampler::length(int64_t id) const {
  for (const auto* list : {&live_, &paused_})
    for (const auto& s : *list)
      if (s->id == id) return s->total;
  for (const auto& s : waiting_)
    if (s->id == id) return s->total;
  throw std::invalid_argument("turn sampler: no sequence " + std::to_string(id));
}

void TurnSampler::resume(int64_t id, const std::vector<int64_t>& forced, int64_t max_new) {
  const auto it = std::find_if(paused_.begin(), paused_.end(), [&](const auto& s) { return s->id == id; });
  if (it == paused_.end())
    throw std::invalid_argument("turn sampler: sequence " + std::to_string(id) + " is not paused");
  if (max_new < 1) throw std::invalid_argument("turn sampler: max_new must be >= 1");
  Seq& s = **it;
  if (s.total + static_cast<int64_t>(forced.size()) + max_new > capacity_)
    throw std::invalid_argument("turn sampler: sequence " + std::to_string(id) + " would outgrow its capacity " +
                                std::to_string(capacity_));
  for (int64_t t : forced)
    if (t < 0 || t >= model_.config().vocab_size)
      throw std::invalid_argument("turn sampler: forced id " + std::to_string(t) + " is outside the vocabulary");
  // Its last sampled token was never fed back; it goes first.
  s.feed.assign(1, s.out.tokens.back());
  s.feed.insert(s.feed.end(), forced.begin(), forced.end());
  s.total += static_cast<int64_t>(forced.size());
  s.max_new = max_new;
  s.out = Generation{};
  // To the first paused slot, then over to the live side.
  const size_t live = live_.size(), j = static_cast<size_t>(it - paused_.begin());
  swap_slots(live + j, live);
  std::swap(paused_[j], paused_[0]);
  live_.push_back(std::move(paused_.front()));
  paused_.erase(paused_.begin());
}

void TurnSampler::finish(int64_t id) {
  const auto it = std::find_if(paused_.begin(), paused_.end(), [&](const auto& s) { return s->id == id; });
  if (it == paused_.end())
    throw std::invalid_argument("turn sampler: sequence " + std::to_string(id) + " is not paused");
  const size_t live = live_.size(), j = static_cast<size_t>(it - paused_.begin()), last = paused_.size() - 1;
  swap_slots(live + j, live + last);
  std::swap(paused_[j], paused_[last]);
  cache_->clear(static_cast<int64_t>(live + last));
  paused_.pop_back();
}

void TurnSampler::swap_slots(size_t a, size_t b) {
  if (a == b) return;
  const auto sa = static_cast<int64_t>(a), sb = static_cast<int64_t>(b);
  const int64_t la = cache_->length(sa), lb = cache_->length(sb), rows = std::max(la, lb);
  if (rows > 0)
    for (int64_t l = 0; l < cache_->num_layers(); ++l) {
      LayerKv& kv = cache_->layer(l);
      for (torch::Tensor* t : {&kv.k, &kv.v}) {
        torch::Tensor x = t->select(0, sa).narrow(1, 0, rows), y = t->select(0, sb).narrow(1, 0, rows);  // (H, rows, D)
        const torch::Tensor keep = x.clone();
        x.copy_(y);
        y.copy_(keep);
      }
    }
  cache_->set_length(sa, lb);
  cache_->set_length(sb, la);
}

void TurnSampler::admit() {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<int64_t> slots;
  const size_t first = live_.size();
  while (!waiting_.empty() && live_.size() + paused_.size() < static_cast<size_t>(slots_)) {
    // The first paused sequence moves to the free slot after the paused ones.
    const size_t live = live_.size();
    if (!paused_.empty()) {
      cache_->move(static_cast<int64_t>(live), static_cast<int64_t>(live + paused_.size()));
      paused_.push_back(std::move(paused_.front()));
      paused_.erase(paused_.begin());
    }
    prompts.push_back(std::move(waiting_.front()->prompt));
    slots.push_back(static_cast<int64_t>(live));
    live_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (prompts.empty()) return;
  ++stats_.prefills;
  for (const auto& p : prompts) stats_.prefill_tokens += static_cast<int64_t>(p.size());
  const torch::Tensor logits = model_.prefill(pack_rows(prompts), cache_.get(), slots);  // (k, V)
  const NextTokens next = next_tokens(
      logits, params_, [&](int64_t i) { return live_[first + static_cast<size_t>(i)]->stream.next_uniform(); });
  std::vector<size_t> rows;
  for (size_t i = 0; i < prompts.size(); ++i) rows.push_back(first + i);
  take(rows, next);
}

void TurnSampler::decode() {
  if (live_.empty()) return;
  ++stats_.decode_steps;
  stats_.max_live = std::max<int64_t>(stats_.max_live, static_cast<int64_t>(live_.size()));
  std::vector<int64_t> ids, sampling;
  for (size_t i = 0; i < live_.size(); ++i) {
    Seq& s = *live_[i];
    if (s.feed.empty()) {
      ids.push_back(s.out.tokens.back());
    } else {
      ids.push_back(s.feed.front());
      s.feed.pop_front();
    }
    if (s.feed.empty()) sampling.push_back(static_cast<int64_t>(i));
  }
  const torch::Tensor logits = model_.decode_step(torch::tensor(ids, torch::kInt64), *cache_);  // (live, V)
  if (sampling.empty()) return;
  const torch::Tensor rows =
      logits.index_select(0, torch::tensor(sampling, torch::kInt64).to(logits.device()));  // (m, V)
  const NextTokens next = next_tokens(rows, params_, [&](int64_t i) {
    return live_[static_cast<size_t>(sampling[static_cast<size_t>(i)])]->stream.next_uniform();
  });
  take(std::vector<size_t>(sampling.begin(), sampling.end()), next);
}

void TurnSampler::take(const std::vector<size_t>& rows, const NextTokens& next) {
  std::vector<size_t> done;
  for (size_t r = 0; r < rows.size(); ++r) {
    Seq& s = *live_[rows[r]];
    s.out.tokens.push_back(next.tokens[r]);
    s.out.logp.push_back(next.logp[r]);
    ++s.total;
    s.out.stopped = ends_at_stop(s.out.tokens, params_);
    if (s.out.stopped || static_cast<int64_t>(s.out.tokens.size()) >= s.max_new) done.push_back(rows[r]);
  }
  for (auto it = done.rbegin(); it != done.rend(); ++it) end_turn(*it);  // rows ascend: highest first
}

void TurnSampler::end_turn(size_t i) {
  // Highest index first: the last live sequence, swapped into slot i, is never one that ended.
  const size_t last = live_.size() - 1;
  swap_slots(i, last);
  std::swap(live_[i], live_[last]);
  std::unique_ptr<Seq> s = std::move(live_.back());
  live_.pop_back();
  ended_.push_back(TurnResult{s->id, s->out});
  stats_.generated_tokens += static_cast<int64_t>(s->out.tokens.size());
  paused_.insert(paused_.begin(), std::move(s));
}

std::vector<TurnResult> TurnSampler::step() {
  torch::NoGradGuard no_grad;
  parallel::SamplingGuard sampling;  // the layers' decode paths (parallel/tp_layers.h)
  admit();
  decode();
  std::vector<TurnResult> out = std::move(ended_);
  ended_.clear();
  return out;
}

}  // namespace tandem::models
