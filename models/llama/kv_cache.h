// The K/V cache of incremental decoding: per layer, the rotated keys and the values of a fixed
// number of sequence slots, each holding one sequence's tokens at positions 0..length-1.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/llama/attention_core.h"

namespace tandem::models {

// One layer's cache. Slot-major with heads before positions so that the cached rows of slots
// [0, n) and positions [0, S) are one strided view the attention matmuls read without a copy.
struct LayerKv {
  torch::Tensor k;  // (slots, H_kv_local, capacity, D), after RoPE
  torch::Tensor v;  // (slots, H_kv_local, capacity, D)
};

// The cache of every layer of one tp rank (each tp rank holds its own kv heads). Lengths live on
// the host: the model advances them after a whole forward, never per layer.
class KvCache {
 public:
  // `kv_heads` is this tp rank's number of kv heads; tensors are zeros with `options`.
  KvCache(int64_t num_layers, int64_t slots, int64_t capacity, int64_t kv_heads, int64_t head_dim,
          const torch::TensorOptions& options);

  int64_t slots() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t length(int64_t slot) const { return lengths_.at(slot); }
  LayerKv& layer(int64_t i) { return layers_.at(i); }

  // Prefill bookkeeping: throws unless every slot is empty and every segment fits.
  void check_prefill(const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots) const;
  // Decode bookkeeping for slots [0, n): the position of each new row (= its slot's length),
  // (n) int64 on `device`; throws when a slot is full.
  torch::Tensor decode_positions(int64_t n, const torch::Device& device) const;
  void set_length(int64_t slot, int64_t length) { lengths_.at(slot) = length; }

  // Moves slot `from`'s rows to slot `to`, overwriting it (compaction when a sequence leaves);
  // `from` is emptied.
  void move(int64_t from, int64_t to);
  void clear(int64_t slot) { lengths_.at(slot) = 0; }

 private:
  std::vector<LayerKv> layers_;
  std::vector<int64_t> lengths_;  // cached tokens per slot
  int64_t capacity_;
};

// Writes a prefill's K/V: segment i of the packed rows (k, v: (N, H_kv, D)) goes to positions
// [0, length) of slot slots[i].
void store_prefill(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v,
                   const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots);

// Writes one decode row per slot [0, n): k, v (n, H_kv, D) at positions (n).
void store_decode(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& positions);

}  // namespace tandem::models
