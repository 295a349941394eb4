// KV cache storage, slot bookkeeping and the writes of prefill and decode rows.
#include "models/llama/kv_cache.h"

#include <stdexcept>
#include <string>

namespace tandem::models {

KvCache::KvCache(int64_t num_layers, int64_t slots, int64_t capacity, int64_t kv_heads, int64_t head_dim,
                 const torch::TensorOptions& options)
    : lengths_(static_cast<size_t>(slots), 0), capacity_(capacity) {
  if (num_layers < 1 || slots < 1 || capacity < 1 || kv_heads < 1 || head_dim < 1)
    throw std::invalid_argument("KvCache: every size must be positive");
  for (int64_t i = 0; i < num_layers; ++i)
    layers_.push_back({torch::zeros({slots, kv_heads, capacity, head_dim}, options),
                       torch::zeros({slots, kv_heads, capacity, head_dim}, options)});
}

void KvCache::check_prefill(const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots) const {
  if (segments.size() != slots.size())
    throw std::invalid_argument("KvCache: " + std::to_string(slots.size()) + " slots for " +
                                std::to_string(segments.size()) + " non-empty prefill sequences");
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t s = slots[i];
    if (s < 0 || s >= this->slots() || lengths_[s] != 0)
      throw std::invalid_argument("KvCache: prefill slot " + std::to_string(s) + " is out of range or not empty");
    if (segments[i].length > capacity_)
      throw std::invalid_argument("KvCache: a prompt of " + std::to_string(segments[i].length) +
                                  " tokens exceeds the capacity " + std::to_string(capacity_));
  }
}

torch::Tensor KvCache::decode_positions(int64_t n, const torch::Device& device) const {
  if (n < 1 || n > slots()) throw std::invalid_argument("KvCache: decode over " + std::to_string(n) + " slots");
  std::vector<int64_t> pos(lengths_.begin(), lengths_.begin() + n);
  for (int64_t p : pos)
    if (p < 1 || p >= capacity_)
      throw std::invalid_argument("KvCache: decode into a slot of length " + std::to_string(p) + " (capacity " +
                                  std::to_string(capacity_) + ")");
  return torch::tensor(pos, torch::kInt64).to(device);  // (n)
}

void KvCache::move(int64_t from, int64_t to) {
  const int64_t len = lengths_.at(from);
  if (from == to || to < 0 || to >= slots()) {
    if (from != to) throw std::out_of_range("KvCache: move to slot " + std::to_string(to));
    return;
  }
  for (LayerKv& kv : layers_) {
    kv.k[to].narrow(1, 0, len).copy_(kv.k[from].narrow(1, 0, len));  // (H_kv, len, D)
    kv.v[to].narrow(1, 0, len).copy_(kv.v[from].narrow(1, 0, len));
  }
  lengths_[to] = len;
  lengths_[from] = 0;
}

void store_prefill(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v,
                   const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const AttentionSegment& s = segments[i];
    // (len, H_kv, D) rows -> (H_kv, len, D) in the slot
    kv.k[slots[i]].narrow(1, 0, s.length).copy_(k.narrow(0, s.q_begin, s.length).transpose(0, 1));
    kv.v[slots[i]].narrow(1, 0, s.length).copy_(v.narrow(0, s.q_begin, s.length).transpose(0, 1));
  }
}

void store_decode(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& positions) {
  using torch::indexing::Slice;
  const torch::Tensor rows = torch::arange(k.size(0), positions.options());  // (n)
  // cache[rows[i], :, positions[i], :] = k[i]: advanced indices first, so the target is (n, H_kv, D)
  kv.k.index_put_({rows, Slice(), positions}, k);
  kv.v.index_put_({rows, Slice(), positions}, v);
}

}  // namespace tandem::models
