// Context parallelism for packed (THD) micros: each sequence is cut into 2*cp chunks and cp rank
// i keeps chunks i and 2cp-1-i (so every rank gets an even share of the causal work); K/V are
// all-gathered across cp for attention, with an autograd backward that reduce-scatters the K/V
// gradient to its owner; per-token outputs are gathered back to the whole micro.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "parallel/communicator.h"

namespace tandem::parallel {

// A run of this rank's query rows that belongs to one sequence and is contiguous in it.
struct CpSegment {
  int64_t sequence = 0;
  int64_t local_begin = 0;  // first row in this rank's shard
  int64_t length = 0;       // rows
  int64_t seq_offset = 0;   // position of the first row within its sequence
};

// The whole layout, identical on every cp rank (a pure function of cu_seqlens and cp size).
struct CpShard {
  int64_t cp_rank = 0, cp_size = 1;
  std::vector<int64_t> seq_begin;            // (B+1) token offsets of each sequence in the full micro
  std::vector<std::vector<int64_t>> tokens;  // per rank: full-micro token indices, in shard order
  std::vector<CpSegment> segments;           // this rank's segments in shard order
  std::vector<torch::Tensor> rank_index;     // per rank: tokens[r] as (n_r) int64
  torch::Tensor gather_order;                // (N) int64: row of the rank-major gather per full-micro token
  int64_t num_tokens() const { return seq_begin.back(); }
  int64_t local_tokens() const { return static_cast<int64_t>(tokens[cp_rank].size()); }
};

// [begin, end) of chunk k of a sequence of `length` tokens cut into `chunks` near-equal parts.
std::pair<int64_t, int64_t> cp_chunk(int64_t length, int64_t k, int64_t chunks);

// cu_seqlens: (B+1) int32 / int64 offsets of the full micro.
CpShard make_cp_shard(const torch::Tensor& cu_seqlens, int64_t cp_rank, int64_t cp_size);

// Both gathers keep what their backward needs in the autograd graph, so `shard` need only
// live for the forward call.
// (n_local, ...) per rank -> (N, ...) in full-micro order. Backward: the gradient rows of the
// tokens each rank owns, summed over cp and handed back to that rank (reduce-scatter).
torch::Tensor cp_gather_kv(const torch::Tensor& local, const CpShard& shard, Communicator* cp);

// (n_local, ...) per rank -> (N, ...) in full-micro order, for outputs whose downstream loss is
// computed identically on every cp rank: backward keeps this rank's rows (no communication).
torch::Tensor cp_gather_outputs(const torch::Tensor& local, const CpShard& shard, Communicator* cp);

}  // namespace tandem::parallel
