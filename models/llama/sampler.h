// Batched generation for rollouts: a KV cache per sequence, temperature / top-p / top-k, stop
// tokens and max_new_tokens, continuous batching (finished sequences leave, waiting prompts
// join), and a private random stream per sample so a sample never depends on what else is in
// the batch or on the parallel layout. Returns the tokens and their rollout log-probs.
//
// Generation is collective over tp and ignores cp: every cp rank runs it whole, identically (the
// caller gives every tp and cp rank of a dp replica the same requests).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem::models {

class LlamaForCausalLMImpl;

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy argmax
  double top_p = 1.0;        // nucleus mass kept (1: off)
  int64_t top_k = 0;         // 0: off
  int64_t max_new_tokens = 16;
  std::vector<int64_t> stop_ids;                     // any of these ends a response (kept in it)
  std::vector<std::vector<int64_t>> stop_sequences;  // multi-token stops (kept in the response)
  // Stop strings matched on the text: the response ends at the token that completes one (kept in
  // the response), however the tokenizer merged it with the text before, as vLLM's `stop` and
  // transformers' stop_strings do. The ids a string encodes to alone would miss it in context:
  // Qwen2.5 encodes "\nObservation:" alone as [198, ...] but after "done." as [624 (".\n"), ...].
  std::vector<std::string> stop_strings;
  std::function<std::string(const std::vector<int64_t>&)> decode;  // ids -> text; set with stop_strings
  // The KV cache's memory, in sequences: max_batch unshared sequences of the longest prompt +
  // max_new rows each (fewer when there are fewer requests). Without shared prompts it is also
  // the most sequences decoded together (continuous batching).
  int64_t max_batch = 64;
  // With share_prompts a sequence's own rows are only its response, so the same memory holds
  // more of them: as many as fit, up to max_live (see kv_plan). Ignored without sharing.
  int64_t max_live = 256;
  int64_t vocab_limit = 0;   // > 0: ids >= vocab_limit are never sampled (padded embeddings)
  bool use_kv_cache = true;  // false: recompute the whole prefix each token (benchmark baseline)
  // Requests with the same prompt (a GRPO group) share it while any of them is live: it is
  // prefilled once into the KV cache's prefix store, and every decode step reads its K/V once
  // for the whole group (decode_attention with PrefixGroups). Each request keeps its own
  // sampling stream, so the samples are those of separate prefills (with the KV cache only).
  bool share_prompts = false;
};

struct GenerationRequest {
  std::vector<int64_t> prompt;  // token ids, non-empty
  uint64_t seed = 0;            // this sample's stream (see sample_seed)
  int64_t max_new_tokens = -1;  // >= 0: this request's own limit instead of SamplingParams'
};

struct Generation {
  std::vector<int64_t> tokens;  // response ids, including a final stop token when one fired
  std::vector<double> logp;     // log-prob of each response token under the untempered model,
                                // log_softmax(logits)[token]: what the training forward computes
  bool stopped = false;         // ended by a stop token / sequence (false: max_new_tokens)
};
// logp is log_softmax over the full vocabulary (ids >= vocab_limit included, no temperature,
// top-k or top-p) of the logits in the model's log-prob dtype (float32; float64 for float64
// models), as LlamaForCausalLMImpl::log_probs computes it for the same token: with temperature 1
// and no truncation it is the sampling distribution's log-prob, so `old_logp: rollout` matches a
// recompute up to float rounding. With other settings it is not the behaviour policy's log-prob.

// What one generate() call did, for tests and benchmarks.
struct GenerationStats {
  int64_t prefills = 0;          // prefill forwards (each admits one or more waiting requests)
  int64_t decode_steps = 0;      // decode forwards (one token for every live sequence)
  int64_t max_live = 0;          // most sequences decoding together
  int64_t generated_tokens = 0;  // response tokens over all requests
  int64_t prefill_tokens = 0;    // prompt tokens the prefills computed (shared prompts once)
  int64_t kv_slots = 0;          // the KV cache's sequence slots (0: no cache)
  int64_t kv_rows = 0;           // its token rows per layer: sequence slots and prefix store together
};

// How a generate() call sizes its KV cache: `slots` sequences of `capacity` rows each, plus,
// with shared prompts, `prefix_slots` prompts of `prefix_capacity` rows.
struct KvPlan {
  int64_t slots = 0, capacity = 0, prefix_slots = 0, prefix_capacity = 0;
  int64_t rows() const { return slots * capacity + prefix_slots * prefix_capacity; }
};
// Unshared: min(max_batch, requests) slots of the longest prompt + max_new. Shared: one prefix
// slot per distinct prompt that can be live (min(slots, distinct prompts), so admission never
// waits for one) of the longest prompt, and slots of the longest max_new; the most slots, up to
// min(max_live, requests), whose rows fit in the unshared plan's, and never fewer than it has.
KvPlan kv_plan(const std::vector<GenerationRequest>& requests, const SamplingParams& params);

// The stream of one sample, from (run seed, step, prompt id, sample index) by a fixed mix: the
// SplitMix64 chain h = mix64(run_seed), then h = mix64(h ^ x) for step, prompt id, sample index
// (two's complement bits). Part of the resume contract: never change it.
uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t prompt_id, int64_t sample_index);

// Generates one response per request, in request order. Collective over the model's tp group
// (every tp rank passes the same requests and gets the same tokens). No gradients.
// Continuous batching: requests are admitted in order while fewer than kv_plan's slots are
// live; each decode step extends every live sequence by one token, finished ones leave at once
// and the next waiting prompts are prefilled into their slots before the next step.
// Throws UserError for invalid params (temperature < 0, top_p outside (0, 1], ...), an empty
// prompt, a prompt id outside the vocabulary, or prompt + max_new_tokens beyond max_seq_len.
std::vector<Generation> generate(LlamaForCausalLMImpl& model, const std::vector<GenerationRequest>& requests,
                                 const SamplingParams& params, GenerationStats* stats = nullptr);

}  // namespace tandem::models
