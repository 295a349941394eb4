// KV cache storage, slot bookkeeping and the writes of prefill and decode rows.
#include "models/llama/kv_cache.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace tandem::models {

namespace {

// Whether ids[i] also appears before position i.
bool named_before(const std::vector<int64_t>& ids, size_t i) {
  const auto end = ids.begin() + static_cast<std::ptrdiff_t>(i);
  return std::find(ids.begin(), end, ids[i]) != end;
}

}  // namespace

KvCache::KvCache(int64_t num_layers, int64_t slots, int64_t capacity, int64_t kv_heads, int64_t head_dim,
                 const torch::TensorOptions& options, int64_t prefix_slots, int64_t prefix_capacity)
    : lengths_(static_cast<size_t>(slots), 0),
      prefix_(static_cast<size_t>(slots), -1),
      capacity_(capacity),
      prefix_lengths_(static_cast<size_t>(std::max<int64_t>(0, prefix_slots)), 0),
      prefix_readers_(prefix_lengths_.size(), 0),
      prefix_capacity_(prefix_capacity) {
  if (num_layers < 1 || slots < 1 || capacity < 1 || kv_heads < 1 || head_dim < 1 ||
      (prefix_slots > 0 && prefix_capacity < 1))
    throw std::invalid_argument("KvCache: every size must be positive");
  for (int64_t i = 0; i < num_layers; ++i) {
    LayerKv kv{torch::zeros({slots, kv_heads, capacity, head_dim}, options),
               torch::zeros({slots, kv_heads, capacity, head_dim}, options)};
    if (prefix_slots > 0) {
      kv.pk = torch::zeros({prefix_slots, kv_heads, prefix_capacity, head_dim}, options);
      kv.pv = torch::zeros({prefix_slots, kv_heads, prefix_capacity, head_dim}, options);
    }
    layers_.push_back(std::move(kv));
  }
}

int64_t KvCache::position(int64_t slot) const {
  const int64_t p = prefix_.at(slot);
  return lengths_.at(slot) + (p >= 0 ? prefix_lengths_[p] : 0);
}

void KvCache::check_prefill(const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots) const {
  if (segments.size() != slots.size())
    throw std::invalid_argument("KvCache: " + std::to_string(slots.size()) + " slots for " +
                                std::to_string(segments.size()) + " non-empty prefill sequences");
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t s = slots[i];
    if (s < 0 || s >= this->slots() || lengths_[s] != 0 || prefix_[s] >= 0)
      throw std::invalid_argument("KvCache: prefill slot " + std::to_string(s) + " is out of range or not empty");
    // The lengths change only after the forward: a slot named twice would pass as empty twice.
    if (named_before(slots, i))
      throw std::invalid_argument("KvCache: prefill slot " + std::to_string(s) + " is named twice in one prefill");
    if (segments[i].length > capacity_)
      throw std::invalid_argument("KvCache: a prompt of " + std::to_string(segments[i].length) +
                                  " tokens exceeds the capacity " + std::to_string(capacity_));
  }
}

torch::Tensor KvCache::decode_positions(int64_t n, const torch::Device& device) const {
  if (n < 1 || n > slots()) throw std::invalid_argument("KvCache: decode over " + std::to_string(n) + " slots");
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < n; ++i) {
    if (position(i) < 1 || lengths_[i] >= capacity_)
      throw std::invalid_argument("KvCache: decode into a slot of length " + std::to_string(lengths_[i]) +
                                  " (capacity " + std::to_string(capacity_) + ", position " +
                                  std::to_string(position(i)) + ")");
    pos.push_back(position(i));
  }
  return torch::tensor(pos, torch::kInt64).to(device);  // (n)
}

std::vector<PrefixGroup> KvCache::prefix_groups(int64_t n) const {
  std::map<int64_t, std::vector<int64_t>> readers;  // prefix slot -> sequence slots, ascending
  for (int64_t i = 0; i < n; ++i)
    if (prefix_.at(i) >= 0) readers[prefix_[i]].push_back(i);
  std::vector<PrefixGroup> out;
  for (const auto& [prefix, members] : readers) out.push_back({prefix, prefix_lengths_[prefix], members});
  return out;
}

void KvCache::clear(int64_t slot) {
  release(slot);
  lengths_.at(slot) = 0;
}

void KvCache::release(int64_t slot) {
  const int64_t p = prefix_.at(slot);
  if (p < 0) return;
  prefix_[slot] = -1;
  if (--prefix_readers_[p] == 0) prefix_lengths_[p] = 0;
}

std::vector<int64_t> KvCache::free_prefixes(int64_t count) const {
  std::vector<int64_t> out;
  for (size_t p = 0; p < prefix_readers_.size() && static_cast<int64_t>(out.size()) < count; ++p)
    if (prefix_readers_[p] == 0 && prefix_lengths_[p] == 0) out.push_back(static_cast<int64_t>(p));
  if (static_cast<int64_t>(out.size()) < count)
    throw std::invalid_argument("KvCache: " + std::to_string(count) + " prefix slots wanted, " +
                                std::to_string(out.size()) + " free of " + std::to_string(prefix_slots()));
  return out;
}

void KvCache::check_prefix_prefill(const std::vector<AttentionSegment>& segments,
                                   const std::vector<int64_t>& prefixes) const {
  if (segments.size() != prefixes.size())
    throw std::invalid_argument("KvCache: " + std::to_string(prefixes.size()) + " prefix slots for " +
                                std::to_string(segments.size()) + " non-empty prefill sequences");
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const int64_t p = prefixes[i];
    if (p < 0 || p >= prefix_slots() || prefix_readers_[p] != 0 || prefix_lengths_[p] != 0)
      throw std::invalid_argument("KvCache: prefix slot " + std::to_string(p) + " is out of range or in use");
    if (named_before(prefixes, i))
      throw std::invalid_argument("KvCache: prefix slot " + std::to_string(p) + " is named twice in one prefill");
    if (segments[i].length > prefix_capacity_)
      throw std::invalid_argument("KvCache: a prompt of " + std::to_string(segments[i].length) +
                                  " tokens exceeds the prefix capacity " + std::to_string(prefix_capacity_));
  }
}

void KvCache::attach(int64_t slot, int64_t prefix) {
  if (prefix < 0 || prefix >= prefix_slots() || prefix_lengths_[prefix] == 0 || lengths_.at(slot) != 0 ||
      prefix_.at(slot) >= 0)
    throw std::invalid_argument("KvCache: slot " + std::to_string(slot) + " cannot read prefix slot " +
                                std::to_string(prefix) + " (the slot must be empty and the prefix filled)");
  prefix_[slot] = prefix;
  ++prefix_readers_[prefix];
}

void KvCache::move(int64_t from, int64_t to) {
  const int64_t len = lengths_.at(from);
  if (from == to || to < 0 || to >= slots()) {
    if (from != to) throw std::out_of_range("KvCache: move to slot " + std::to_string(to));
    return;
  }
  release(to);
  for (LayerKv& kv : layers_) {
    kv.k[to].narrow(1, 0, len).copy_(kv.k[from].narrow(1, 0, len));  // (H_kv, len, D)
    kv.v[to].narrow(1, 0, len).copy_(kv.v[from].narrow(1, 0, len));
  }
  lengths_[to] = len;
  lengths_[from] = 0;
  prefix_[to] = prefix_[from];  // the reader moves; the prefix's count stays
  prefix_[from] = -1;
}

void store_prefill(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v,
                   const std::vector<AttentionSegment>& segments, const std::vector<int64_t>& slots, bool prefixes) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const AttentionSegment& s = segments[i];
    const torch::Tensor ks = k.narrow(0, s.q_begin, s.length), vs = v.narrow(0, s.q_begin, s.length);  // (len, H_kv, D)
    if (prefixes) {  // (H_kv, len, D) in the prefix slot
      kv.pk[slots[i]].narrow(1, 0, s.length).copy_(ks.transpose(0, 1));
      kv.pv[slots[i]].narrow(1, 0, s.length).copy_(vs.transpose(0, 1));
    } else {  // (H_kv, len, D) in the slot
      kv.k[slots[i]].narrow(1, 0, s.length).copy_(ks.transpose(0, 1));
      kv.v[slots[i]].narrow(1, 0, s.length).copy_(vs.transpose(0, 1));
    }
  }
}

void store_decode(LayerKv& kv, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& rows) {
  using torch::indexing::Slice;
  const torch::Tensor slots = torch::arange(k.size(0), rows.options());  // (n)
  // cache[slots[i], :, rows[i], :] = k[i]: advanced indices first, so the target is (n, H_kv, D)
  kv.k.index_put_({slots, Slice(), rows}, k);
  kv.v.index_put_({slots, Slice(), rows}, v);
}

}  // namespace tandem::models
