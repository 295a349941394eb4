// Collation of one micro's AR samples into the packed THD layout (one flat row, position ids
// restarting per sequence, cu_seqlens) or a padded (B, T_max) layout with the same fields.
// Per-token action fields ride the token axis: position j carries the target t_{j+1}, and each
// sequence's last position is a masked trailing slot, so every per-token tensor has length T.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/batch/denominators.h"
#include "core/batch/sample.h"

namespace tandem {

struct PackedBatch {
  torch::Tensor input_ids;     // (1, N) int64
  torch::Tensor position_ids;  // (1, N) int64, restarting at 0 per sequence
  torch::Tensor cu_seqlens;    // (B+1) int32
  int64_t max_seqlen = 0;
  torch::Tensor targets;       // (N) int64, next token; 0 in trailing slots
  torch::Tensor loss_mask;     // (N) float: 1 where the target is an action token
  torch::Tensor advantages;    // (N) float, the sequence's advantage at every position
  torch::Tensor rollout_logp;  // (N) float, the sampler's log-prob of the target (0 where masked)
  torch::Tensor seq_index;     // (N) int64, sample index in [0, B) (the micro's samples)
  // Shared prompts (collate_packed with share_prompts): (S) int64 over the S sequences of
  // cu_seqlens, -1 or the sequence a response continues (models/llama/inputs.h); undefined when
  // no sample shares its prompt.
  torch::Tensor prefix_of;
  LossDenominators denominators;
  int64_t num_seqs() const { return cu_seqlens.numel() - 1; }
  int64_t num_tokens() const { return input_ids.size(1); }
};

struct PaddedBatch {
  torch::Tensor input_ids;       // (B, T) int64, 0 beyond each length
  torch::Tensor position_ids;    // (B, T) int64
  torch::Tensor attention_mask;  // (B, T) bool, true on real tokens
  torch::Tensor lengths;         // (B) int64
  torch::Tensor targets;         // (B, T) int64
  torch::Tensor loss_mask;       // (B, T) float
  torch::Tensor advantages;      // (B, T) float
  torch::Tensor rollout_logp;    // (B, T) float
  LossDenominators denominators;
};

// `samples` are the micro's samples in schedule order; float fields use `dtype`. With
// share_prompts, each run of consecutive samples of one group with the same prompt (2 samples or
// more, prompts of 2 tokens or more) is laid out as the prompt but its last token, once, then per
// sample its own sequence [last prompt token, response], which continues the prompt (prefix_of):
// the group's prompt is computed once instead of once per sample. Every action token keeps its
// target, mask, advantage and rollout log-prob; only the prompt's unmasked rows are shared.
PackedBatch collate_packed(const std::vector<const ArSample*>& samples, const LossDenominators& denominators,
                           torch::Dtype dtype, bool share_prompts = false);

PaddedBatch collate_padded(const std::vector<const ArSample*>& samples, const LossDenominators& denominators,
                           torch::Dtype dtype);

// Unpacks a packed per-token tensor (N, ...) into (B, T_max, ...) with zeros beyond each length.
torch::Tensor unpack_to_padded(const torch::Tensor& packed, const torch::Tensor& cu_seqlens, int64_t max_seqlen);

// Compares every field sequence by sequence; returns "" when equal, else the first difference.
std::string packed_padded_mismatch(const PackedBatch& packed, const PaddedBatch& padded);

}  // namespace tandem
