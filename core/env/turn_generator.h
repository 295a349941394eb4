// What the episode runner asks of a policy: turns sampled on a KV cache that survives between
// them (models::TurnSampler for a Llama policy). Its own header so core/env stays below the
// policies that implement it.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::env {

struct GeneratedTurn {
  int64_t id = 0;
  std::vector<int64_t> tokens;  // the turn's sampled ids, a final stop id included when one fired
  std::vector<double> logp;     // their rollout log-probs
  bool stopped = false;         // ended by a stop id or stop sequence (false: the turn's token cap)
};

class TurnGenerator {
 public:
  virtual ~TurnGenerator() = default;
  virtual void start(int64_t id, const std::vector<int64_t>& prompt, uint64_t seed, int64_t max_new) = 0;
  // `forced` are appended (not sampled) before up to max_new tokens are sampled.
  virtual void resume(int64_t id, const std::vector<int64_t>& forced, int64_t max_new) = 0;
  virtual void finish(int64_t id) = 0;
  // Advances every live sequence by one token; returns the turns that ended.
  virtual std::vector<GeneratedTurn> step() = 0;
  // step() can advance something: a sequence is decoding, or one waits and a slot is free.
  virtual bool busy() const = 0;
};

}  // namespace tandem::env
