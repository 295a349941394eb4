// The model's input layouts as plain structs (models/ does not depend on core/): the packed THD
// micro and the padded (B, T) batch, and the options of a log-prob forward.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tandem::models {

// One flat row of B sequences; position_ids restart at 0 per sequence.
struct PackedInput {
  torch::Tensor input_ids;     // (1, N) int64
  torch::Tensor position_ids;  // (1, N) int64
  torch::Tensor cu_seqlens;    // (B+1) int32 (int64 accepted)
  int64_t max_seqlen = 0;
};

// B rows of up to T tokens, left-aligned; attention_mask marks the real tokens.
struct PaddedInput {
  torch::Tensor input_ids;       // (B, T) int64
  torch::Tensor position_ids;    // (B, T) int64
  torch::Tensor attention_mask;  // (B, T) bool
};

struct LogProbOptions {
  bool with_entropy = false;
  bool chunked = true;       // false: plain autograd over full (tokens, vocab) logits (reference path)
  int64_t chunk_tokens = 0;  // tokens per logits chunk; 0 = parallel::kDefaultLogitsChunkBytes per chunk
  int64_t save_logits_max_bytes = 0;  // > 0: keep the logits for the backward when they fit (no recompute)
};

}  // namespace tandem::models
