// The K/V cache of incremental decoding: per layer, the rotated keys and the values of a fixed
// number of sequence slots, each holding one sequence's tokens at positions 0..length-1; or,
// with a prefix store, the prompts once in prefix slots that any number of sequence slots read
// (a GRPO group's samples), each sequence slot then holding only the tokens after its prompt.
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
  // Shared prompts (undefined without a prefix store), laid out as the flash kernel reads them.
  torch::Tensor pk;  // (prefix_slots, H_kv_local, prefix_capacity, D)
  torch::Tensor pv;  // (prefix_slots, H_kv_local, prefix_capacity, D)
};

// The cache of every layer of one tp rank (each tp rank holds its own kv heads). Lengths live on
// the host: the model advances them after a whole forward, never per layer.
class KvCache {
 public:
  // `kv_heads` is this tp rank's number of kv heads; tensors are zeros with `options`. With
  // prefix_slots > 0, a prefix store of that many prompts of up to prefix_capacity tokens.
  KvCache(int64_t num_layers, int64_t slots, int64_t capacity, int64_t kv_heads, int64_t head_dim,
          const torch::TensorOptions& options, int64_t prefix_slots = 0, int64_t prefix_capacity = 0);

  int64_t slots() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t length(int64_t slot) const { return lengths_.at(slot); }  // rows in the slot itself
  // The position of the slot's next token: its prefix's rows and its own.
  int64_t position(int64_t slot) const;
  LayerKv& layer(int64_t i) { return layers_.at(i); }

  // Prefill bookkeeping: throws unless every slot is empty and every segment fits.
  void check_prefill(const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots) const;
  // Decode bookkeeping for slots [0, n): the position of each new row (its prefix's length plus
  // its slot's), (n) int64 on `device`; throws when a slot is full.
  torch::Tensor decode_positions(int64_t n, const torch::Device& device) const;
  // The prefix slots read by sequence slots [0, n), with their readers (none without a store).
  std::vector<PrefixGroup> prefix_groups(int64_t n) const;
  void set_length(int64_t slot, int64_t length) { lengths_.at(slot) = length; }

  // Moves slot `from`'s rows to slot `to`, overwriting it (compaction when a sequence leaves);
  // `from` is emptied.
  void move(int64_t from, int64_t to);
  // Empties the slot (and lets go of its prefix).
  void clear(int64_t slot);

  // The prefix store. `count` distinct free prefix slots (throws when fewer are), to prefill into.
  std::vector<int64_t> free_prefixes(int64_t count) const;
  int64_t prefix_slots() const { return static_cast<int64_t>(prefix_lengths_.size()); }
  int64_t prefix_capacity() const { return prefix_capacity_; }
  // Prefill bookkeeping for prefix slots: each free, each segment within prefix_capacity.
  void check_prefix_prefill(const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& prefixes) const;
  void set_prefix_length(int64_t prefix, int64_t length) { prefix_lengths_.at(prefix) = length; }
  // The empty sequence slot `slot` reads prefix slot `prefix` from now on (its next token sits
  // at position = the prefix's length); a prefix is freed when its last reader is cleared.
  void attach(int64_t slot, int64_t prefix);
  int64_t prefix_of(int64_t slot) const { return prefix_.at(slot); }  // -1: none

 private:
  void release(int64_t slot);

  std::vector<LayerKv> layers_;
  std::vector<int64_t> lengths_;  // cached tokens per slot
  std::vector<int64_t> prefix_;   // per slot: the prefix slot it reads, or -1
  int64_t capacity_;
  std::vector<int64_t> prefix_lengths_, prefix_readers_;  // per prefix slot
  int64_t prefix_capacity_ = 0;
};

// Writes a prefill's K/V: segment i of the packed rows (k, v: (N, H_kv, D)) goes to rows
// [0, length) of slot slots[i], or of prefix slot slots[i] when `prefixes`.
void store_prefill(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v,
                   const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots, bool prefixes);

// Writes one decode row per slot [0, n): k, v (n, H_kv, D) at the slots' rows (n).
void store_decode(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& rows);

}  // namespace tandem::models
