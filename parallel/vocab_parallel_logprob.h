// Per-token log-probs of target ids (and the entropy of the next-token distribution) from the
// final hidden states and a vocab-parallel lm head, without ever holding a (tokens, vocab)
// logits tensor beyond one chunk of tokens: the forward reduces each chunk to per-token
// statistics (max, sum-exp and target logit all-reduced over tp), the backward recomputes the
// chunk's logits; or, with a token-separable loss fused in (options.token_loss), each chunk's
// gradient is formed in the forward and nothing is recomputed. Full logits are never gathered
// across tp.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "parallel/communicator.h"

namespace tandem::parallel {

// Upper bound on one chunk's (chunk_tokens, vocab_local) logits buffer when chunk_tokens is auto.
// Each chunk streams the whole head through its GEMMs, which run faster with more rows: on the
// Qwen2 vocabulary (151,936) 128 MiB gives 220-row chunks, where 64 MiB's 110 took 1.11 s of the
// head's GEMMs in a 1,436-row LoRA step against 0.92 s (bf16, 2 threads, AMX), for twice the
// chunk buffers (~0.3 GiB here in all).
inline constexpr int64_t kDefaultLogitsChunkBytes = 128LL << 20;

// One chunk's share of a token-separable loss (a sum of per-token terms, each a function of
// its own token's log-prob and entropy only), asked for while the chunk's logits are at hand.
struct TokenLossChunk {
  torch::Tensor loss;       // () the chunk's terms summed
  torch::Tensor g_logp;     // (C) d loss / d logp
  torch::Tensor g_entropy;  // (C) d loss / d entropy, or undefined (no entropy term)
};
// index (C) int64: the chunk's rows as positions on the caller's token axis (options.token_index);
// logp, entropy (C) detached (entropy undefined unless with_entropy).
using TokenLossFn =
    std::function<TokenLossChunk(const torch::Tensor& index, const torch::Tensor& logp, const torch::Tensor& entropy)>;

struct TokenLogProbOptions {
  bool with_entropy = false;
  int64_t chunk_tokens = 0;  // tokens per chunk; 0 = from kDefaultLogitsChunkBytes
  // > 0: when this call's whole (N, V_local) logits fit in this many bytes, the forward keeps them
  // for the backward instead of recomputing them (one lm-head GEMM fewer, that much more memory).
  int64_t save_logits_max_bytes = 0;
  // Set: the loss is fused into the head. Each chunk's logits become the chunk's gradient of
  // hidden and weight as soon as token_loss gives the chunk's loss gradient, so the backward
  // runs no lm-head GEMM (3 per chunk in all, against 4 with the recomputing backward) and keeps
  // no logits. The result's logp and entropy are then detached and `loss` carries the gradient.
  TokenLossFn token_loss;
  torch::Tensor token_index;  // (N) int64 rows' positions passed to token_loss; undefined: 0..N-1
};

struct TokenLogProbs {
  torch::Tensor logp;     // (N), float32 (float64 for a float64 model)
  torch::Tensor entropy;  // (N) same dtype; undefined unless with_entropy
  torch::Tensor loss;     // () with options.token_loss: the sum of its chunks' losses; else undefined
};

// Logits and the statistics are computed in float32, or float64 when the weights are float64.
torch::ScalarType logits_dtype(torch::ScalarType weight_dtype);

// Tokens per chunk for `options`, a shard of `vocab_local` rows and logits of `element_bytes`.
int64_t logits_chunk_tokens(const TokenLogProbOptions& options, int64_t vocab_local, int64_t element_bytes);

// hidden (N, D) replicated over tp; weight (V_local, D) = rows [vocab_begin, vocab_begin + V_local)
// of the lm head; targets (N) int64 global ids in [0, V). Differentiable in hidden and weight
// (the hidden gradient is summed over tp). Collective over tp: every tp rank must call it with
// the same N. With options.token_loss, token_loss is called once per chunk on every tp rank, with
// the same (all-reduced) log-probs; only `loss` is differentiable.
TokenLogProbs vocab_parallel_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, int64_t vocab_begin, Communicator* tp,
                                       const TokenLogProbOptions& options);

// Reference path with plain autograd: full logits gathered over tp, log_softmax, gather.
// Holds (N, V) logits and their graph; for tests, memory comparisons and tiny batches.
TokenLogProbs full_logits_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t vocab_begin, Communicator* tp,
                                    bool with_entropy);

}  // namespace tandem::parallel
