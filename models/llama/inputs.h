// The model's input layouts as plain structs (models/ does not depend on core/): the packed THD
// micro and the padded (B, T) batch, and the options of a log-prob forward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "parallel/vocab_parallel_logprob.h"

namespace tandem::models {

// One flat row of B sequences; position_ids restart at 0 per sequence. The packing metadata
// (cu_seqlens, prefix_of) lives on the host whatever the model's device: the attention is
// planned there, so reading it costs no device sync.
struct PackedInput {
  torch::Tensor input_ids;     // (1, N) int64
  torch::Tensor position_ids;  // (1, N) int64
  torch::Tensor cu_seqlens;    // (B+1) int32 (int64 accepted)
  int64_t max_seqlen = 0;
  // Shared prompts (optional): (B) int64, -1 or the sequence whose rows sequence b continues: b
  // attends to all of that sequence's rows, then causally to its own, and its position_ids go on
  // after the prefix's. A group's prompt (but its last token) is one sequence; each response,
  // led by the prompt's last token, continues it. Undefined: every sequence stands alone.
  torch::Tensor prefix_of;
};

// B rows of up to T tokens, left-aligned; attention_mask marks the real tokens.
struct PaddedInput {
  torch::Tensor input_ids;       // (B, T) int64
  torch::Tensor position_ids;    // (B, T) int64
  torch::Tensor attention_mask;  // (B, T) bool
};

struct LogProbOptions {
  bool with_entropy = false;
  bool chunked = true;                // false: plain autograd over full (tokens, vocab) logits (reference path)
  int64_t chunk_tokens = 0;           // tokens per logits chunk; 0 = parallel::kDefaultLogitsChunkBytes per chunk
  int64_t save_logits_max_bytes = 0;  // > 0: keep the logits for the backward when they fit (no recompute)
  // Set (chunked only): the loss is fused into the head (parallel::TokenLogProbOptions::token_loss);
  // its index is the token's position on the caller's flat axis ((N) packed, B*T padded).
  parallel::TokenLossFn token_loss;
  // (N) packed or (B, T) padded, nonzero where a log-prob is needed (the loss mask). Only those
  // rows go through the lm head, which dominates a small model's cost at a large vocabulary;
  // the others come back 0 (but for one row, should none be wanted: its real value keeps every
  // rank's graph the same for the collectives of the backward). Undefined: every token.
  torch::Tensor wanted;
};

// Throws std::invalid_argument (naming `who`) when cu_seqlens or prefix_of is not a CPU tensor.
inline void require_host_metadata(const PackedInput& in, const char* who) {
  for (const auto& [t, name] : {std::pair{&in.cu_seqlens, "cu_seqlens"}, std::pair{&in.prefix_of, "prefix_of"}})
    if (t->defined() && !t->device().is_cpu())
      throw std::invalid_argument(std::string(who) + ": packed input: " + name + " is on " + t->device().str() +
                                  "; the packing metadata must stay on the host (the attention is planned there)");
}

}  // namespace tandem::models
