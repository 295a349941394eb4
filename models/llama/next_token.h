// Choosing one sequence's next token from its logits row: greedy, or temperature / top-k / top-p
// over float64 probabilities and inverse-CDF sampling with one uniform from the sample's own
// random stream, so the choice depends on nothing but that row and that stream.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/llama/sampler.h"

namespace at {
class Tensor;
}  // namespace at

namespace tandem::models {

// SplitMix64's output function: a bijective 64-bit mix (the chain behind sample_seed).
uint64_t mix64(uint64_t x);

// A sample's private random stream (SplitMix64): one uniform per sampled token.
class SampleStream {
 public:
  explicit SampleStream(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double next_uniform();  // in [0, 1), 53 random bits

 private:
  uint64_t state_;
};

// True when `p` always takes the most likely token (temperature 0 or top_k 1).
bool is_greedy(const SamplingParams& p);

// The token in [0, n) for logits z[0..n) (the row cut at vocab_limit by the caller):
// - greedy: the first index of the maximum;
// - otherwise w_i = exp((z_i - max z) / temperature) in float64; with top_k the k largest w stay
//   (ties: the lower id ranks first); with top_p < 1 the candidates sorted by descending w (same
//   tie rule) are cut after the shortest prefix holding top_p of the remaining mass; the token is
//   the first candidate, in vocabulary order when nothing is filtered and in that sorted order
//   otherwise, whose cumulative w exceeds u * (sum of the candidates' w).
// Throws std::runtime_error for a row holding NaN or +inf, or all -inf.
int64_t pick_token(const double* z, int64_t n, const SamplingParams& p, double u);

// pick_token for every row of z (m, n) (float64, contiguous, CPU), row i with uniform u[i]: the
// same choice by the same code, the rows spread over the intra-op threads.
std::vector<int64_t> pick_tokens(const at::Tensor& z, const SamplingParams& p, const std::vector<double>& u);

// The next token of every row of `logits` (m, V) in the model's log-prob dtype, on any device:
// pick_tokens on the rows cut at vocab_limit in float64, row i with uniform(i) (called in row
// order, not at all when greedy), and each token's untempered log-prob log_softmax(logits)[token]
// in that dtype (what the training forward computes). Both samplers choose through it.
struct NextTokens {
  std::vector<int64_t> tokens;  // (m)
  std::vector<double> logp;     // (m)
};
NextTokens next_tokens(const at::Tensor& logits, const SamplingParams& p,
                       const std::function<double(int64_t)>& uniform);

// What next_tokens() does with logits on a GPU, callable on any device (tested on the CPU): only
// the choice's inputs reach the host, in one copy. Greedy: each row's argmax, its logit and its
// log-normaliser (3 numbers per row); sampling: the first vocab_limit columns in the logits'
// dtype and the log-normalisers. The log-prob is logit - logsumexp over the full vocabulary (the
// host path's log_softmax, up to rounding).
NextTokens next_tokens_narrowed(const at::Tensor& logits, const SamplingParams& p,
                                const std::function<double(int64_t)>& uniform);

// What every sampler checks before generating: the params' ranges, non-empty prompts of ids in
// [0, vocab_size), and prompt + max_new_tokens within max_len. Throws UserError "<who>: ...",
// naming the model's limit as `max_len_name`.
void validate_generation(const std::vector<GenerationRequest>& requests, const SamplingParams& p, int64_t vocab_size,
                         int64_t max_len, const std::string& who, const std::string& max_len_name);

// Rows of `seqs` (each non-empty) as one packed input with positions restarting at 0: what a
// sampler prefills.
struct PackedInput;
PackedInput pack_rows(const std::vector<std::vector<int64_t>>& seqs);

// True when the response `tokens` (non-empty) ends with a stop id or a stop sequence of `p`, or its
// newest token completes one of p's stop strings (decoded text).
bool ends_at_stop(const std::vector<int64_t>& tokens, const SamplingParams& p);

}  // namespace tandem::models
