// Multi-turn generation on one KV cache: a sequence samples a turn, pauses with its cache kept
// while something outside (an environment) answers, then resumes with forced tokens (the answer,
// rendered) that are decoded through the cache, not sampled, before its next turn is sampled.
// The conversation is never prefilled again, and the other sequences keep decoding meanwhile.
//
// Forced tokens ride the decode steps, one per step, beside the sampling sequences (a chunked
// prefill onto a filled cache would take fewer forwards for long observations; decode steps keep
// one attention path). Prompts are not shared between sequences here (share_prompts is ignored).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "models/llama/sampler.h"
#include "parallel/packed_weights.h"

namespace tandem::models {

class KvCache;
struct NextTokens;

// One finished turn of sequence `id`: the tokens sampled in it (a final stop token when one fired)
// and their log-probs, as Generation.
struct TurnResult {
  int64_t id = 0;
  Generation turn;
};

// Not thread-safe. Collective over the model's tp group like generate(): every tp rank must make
// the same calls in the same order.
class TurnSampler {
 public:
  // `slots` sequences (live or paused) of up to `capacity` tokens each. Throws UserError for bad
  // params or a capacity beyond the model's max_seq_len.
  TurnSampler(LlamaForCausalLMImpl& model, const SamplingParams& params, int64_t slots, int64_t capacity);
  ~TurnSampler();
  TurnSampler(const TurnSampler&) = delete;
  TurnSampler& operator=(const TurnSampler&) = delete;

  // A new sequence: it waits for a free slot, then its prompt is prefilled and up to `max_new`
  // tokens are sampled with its own stream `seed`. `id` must be new.
  void start(int64_t id, const std::vector<int64_t>& prompt, uint64_t seed, int64_t max_new);
  // A paused sequence goes on: `forced` (may be empty) follow its last turn, then up to `max_new`
  // (>= 1) tokens are sampled, its stream continuing where it stopped.
  void resume(int64_t id, const std::vector<int64_t>& forced, int64_t max_new);
  // A paused sequence is done: its slot is freed.
  void finish(int64_t id);

  // Admits waiting starts into free slots (one prefill), then extends every live sequence by one
  // token (one decode step). Returns the turns that ended, whose sequences are now paused.
  std::vector<TurnResult> step();

  int64_t live() const { return static_cast<int64_t>(live_.size()); }  // decoding or forcing
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t paused() const { return static_cast<int64_t>(paused_.size()); }
  // step() would advance something: a live sequence, or a waiting start and a free slot (with
  // every slot paused on its environment it would do nothing).
  bool can_advance() const {
    return !live_.empty() || (!waiting_.empty() && static_cast<int64_t>(live_.size() + paused_.size()) < slots_);
  }
  // Tokens sequence `id` holds (cached, plus the last sampled one not yet fed back).
  int64_t length(int64_t id) const;
  int64_t capacity() const { return capacity_; }
  const GenerationStats& stats() const { return stats_; }

 private:
  struct Seq;
  void admit();
  void decode();
  // Records next.tokens[r] / next.logp[r] for the live sequence at rows[r] (ascending) and ends
  // the turns that stopped or reached max_new.
  void take(const std::vector<size_t>& rows, const NextTokens& next);
  void end_turn(size_t i);
  void swap_slots(size_t a, size_t b);

  LlamaForCausalLMImpl& model_;
  SamplingParams params_;
  int64_t capacity_;
  std::unique_ptr<KvCache> cache_;
  // Slots [0, live) hold the live sequences in order, [live, live + paused) the paused ones.
  std::vector<std::unique_ptr<Seq>> live_;
  std::vector<std::unique_ptr<Seq>> paused_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::map<int64_t, int64_t> known_;  // every id ever started -> 0
  std::vector<TurnResult> ended_;
  GenerationStats stats_;
  int64_t slots_;
  // Each step() is its own sampling scope; this keeps the layers' packed weights from one to the
  // next (parallel/packed_weights.h) for the sampler's life, an episode batch's rollout.
  parallel::PackedScope packed_scope_;
};

}  // namespace tandem::models
