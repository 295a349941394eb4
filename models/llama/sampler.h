// Batched generation for rollouts: a KV cache per sequence, temperature / top-p / top-k, stop
// tokens and max_new_tokens, continuous batching (finished sequences leave, waiting prompts
// join), and a private random stream per sample so a sample never depends on what else is in
// the batch or on the parallel layout. Returns the tokens and their rollout log-probs.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::models {

class LlamaForCausalLMImpl;

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy argmax
  double top_p = 1.0;        // nucleus mass kept (1: off)
  int64_t top_k = 0;         // 0: off
  int64_t max_new_tokens = 16;
  std::vector<int64_t> stop_ids;                   // any of these ends a response (kept in it)
  std::vector<std::vector<int64_t>> stop_sequences;  // multi-token stops (kept in the response)
  int64_t max_batch = 64;    // sequences decoded together (continuous batching)
  int64_t vocab_limit = 0;   // > 0: ids >= vocab_limit are never sampled (padded embeddings)
  bool use_kv_cache = true;  // false: recompute the whole prefix each token (benchmark baseline)
};

struct GenerationRequest {
  std::vector<int64_t> prompt;  // token ids, non-empty
  uint64_t seed = 0;            // this sample's stream (see sample_seed)
};

struct Generation {
  std::vector<int64_t> tokens;  // response ids, including a final stop token when one fired
  std::vector<double> logp;     // log-prob of each response token under the untempered model,
                                // log_softmax(logits)[token]: what the training forward computes
  bool stopped = false;         // ended by a stop token / sequence (false: max_new_tokens)
};

// The stream of one sample, from (run seed, step, prompt id, sample index) by a fixed mix.
uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t prompt_id, int64_t sample_index);

// Generates one response per request, in request order. Collective over the model's tp group
// (every tp rank passes the same requests and gets the same tokens). No gradients.
std::vector<Generation> generate(LlamaForCausalLMImpl& model, const std::vector<GenerationRequest>& requests,
                                 const SamplingParams& params);

}  // namespace tandem::models
