// Per-token log-probs of target ids (and the entropy of the next-token distribution) from the
// final hidden states and a vocab-parallel lm head, without ever holding a (tokens, vocab)
// logits tensor beyond one chunk of tokens: the forward reduces each chunk to per-token
// statistics (max, sum-exp and target logit all-reduced over tp), the backward recomputes the
// chunk's logits. Full logits are never gathered across tp.
#pragma once

#include <torch/torch.h>

#include "parallel/communicator.h"

namespace tandem::parallel {

// Upper bound on one chunk's (chunk_tokens, vocab_local) logits buffer when chunk_tokens is auto.
inline constexpr int64_t kDefaultLogitsChunkBytes = 64LL << 20;

struct TokenLogProbOptions {
  bool with_entropy = false;
  int64_t chunk_tokens = 0;  // tokens per chunk; 0 = from kDefaultLogitsChunkBytes
  // > 0: when this call's whole (N, V_local) logits fit in this many bytes, the forward keeps them
  // for the backward instead of recomputing them (one lm-head GEMM fewer, that much more memory).
  int64_t save_logits_max_bytes = 0;
};

struct TokenLogProbs {
  torch::Tensor logp;     // (N), float32 (float64 for a float64 model)
  torch::Tensor entropy;  // (N) same dtype; undefined unless with_entropy
};

// Logits and the statistics are computed in float32, or float64 when the weights are float64.
torch::ScalarType logits_dtype(torch::ScalarType weight_dtype);

// Tokens per chunk for `options`, a shard of `vocab_local` rows and logits of `element_bytes`.
int64_t logits_chunk_tokens(const TokenLogProbOptions& options, int64_t vocab_local, int64_t element_bytes);

// hidden (N, D) replicated over tp; weight (V_local, D) = rows [vocab_begin, vocab_begin + V_local)
// of the lm head; targets (N) int64 global ids in [0, V). Differentiable in hidden and weight
// (the hidden gradient is summed over tp). Collective over tp: every tp rank must call it with
// the same N.
TokenLogProbs vocab_parallel_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t vocab_begin, Communicator* tp,
                                       const TokenLogProbOptions& options);

// Reference path with plain autograd: full logits gathered over tp, log_softmax, gather.
// Holds (N, V) logits and their graph; for tests, memory comparisons and tiny batches.
TokenLogProbs full_logits_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t vocab_begin, Communicator* tp,
                                    bool with_entropy);

}  // namespace tandem::parallel
