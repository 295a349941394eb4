// Serialization is a flat little-endian record per sample: counts, then ids, mask and
// log-probs. It is an in-memory wire format between ranks of one binary, not a file format.
#include "core/exchange.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

namespace tandem {

namespace {

template <class T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
template <class T>
void put_array(std::vector<uint8_t>& out, const std::vector<T>& v) {
  put<int64_t>(out, static_cast<int64_t>(v.size()));
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ == size_; }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> get_array() {
    const auto n = get<int64_t>();
    if (n < 0 || static_cast<size_t>(n) > (size_ - pos_) / sizeof(T))
      throw std::runtime_error("deserialize_samples: corrupt array length");
    std::vector<T> v(static_cast<size_t>(n));
    std::memcpy(v.data(), data_ + pos_, v.size() * sizeof(T));
    pos_ += v.size() * sizeof(T);
    return v;
  }

 private:
  void need(size_t n) const {
    if (size_ - pos_ < n) throw std::runtime_error("deserialize_samples: truncated record");
  }
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

}  // namespace

int64_t RolloutDirectory::position_of(int64_t id) const {
  auto it = std::lower_bound(ids.begin(), ids.end(), id);
  if (it == ids.end() || *it != id) throw std::out_of_range("sample id " + std::to_string(id) + " not in rollout");
  return it - ids.begin();
}

SampleCost cost_of(const ArSample& s) { return {s.length(), s.action_tokens(), s.group_id}; }

std::vector<uint8_t> serialize_samples(const std::vector<const ArSample*>& samples) {
  std::vector<uint8_t> out;
  for (const ArSample* s : samples) {
    put<int64_t>(out, s->prompt_len);
    put<int64_t>(out, s->group_id);
    put<int64_t>(out, s->index);
    put<double>(out, s->reward);
    put<double>(out, s->advantage);
    put_array(out, s->tokens);
    put_array(out, s->response_mask);
    put_array(out, s->rollout_logp);
  }
  return out;
}

std::vector<ArSample> deserialize_samples(const uint8_t* data, size_t size) {
  std::vector<ArSample> out;
  Reader r(data, size);
  while (!r.done()) {
    ArSample s;
    s.prompt_len = r.get<int64_t>();
    s.group_id = r.get<int64_t>();
    s.index = r.get<int64_t>();
    s.reward = r.get<double>();
    s.advantage = r.get<double>();
    s.tokens = r.get_array<int64_t>();
    s.response_mask = r.get_array<uint8_t>();
    s.rollout_logp = r.get_array<double>();
    check_sample(s);
    out.push_back(std::move(s));
  }
  return out;
}

RolloutDirectory gather_directory(const std::vector<ArSample>& local, parallel::Communicator& dp) {
  // One row per sample: (id, tokens, action_tokens, group_id).
  torch::Tensor rows = torch::empty({static_cast<int64_t>(local.size()), 4}, torch::kInt64);  // (n, 4)
  auto acc = rows.accessor<int64_t, 2>();
  for (size_t i = 0; i < local.size(); ++i) {
    const SampleCost c = cost_of(local[i]);
    acc[i][0] = local[i].index, acc[i][1] = c.tokens, acc[i][2] = c.action_tokens, acc[i][3] = c.group_id;
  }
  torch::Tensor all = dp.all_gather_v(rows);  // (N, 4)
  const int64_t n = all.size(0);
  std::vector<std::array<int64_t, 4>> table(n);
  auto a = all.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) table[i] = {a[i][0], a[i][1], a[i][2], a[i][3]};
  std::sort(table.begin(), table.end());
  RolloutDirectory dir;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0 && table[i][0] == table[i - 1][0])
      throw std::runtime_error("gather_directory: sample id " + std::to_string(table[i][0]) + " on two ranks");
    dir.ids.push_back(table[i][0]);
    dir.costs.push_back({table[i][1], table[i][2], table[i][3]});
  }
  return dir;
}

std::vector<int64_t> destinations(const Schedule& schedule, size_t num_samples) {
  std::vector<int64_t> dest(num_samples, -1);
  for (const auto& mini : schedule.minis)
    for (size_t r = 0; r < mini.ranks.size(); ++r)
      for (const auto& micro : mini.ranks[r].micros)
        for (int64_t i : micro.samples) dest.at(i) = static_cast<int64_t>(r);
  for (size_t i = 0; i < num_samples; ++i)
    if (dest[i] < 0) throw std::logic_error("destinations: sample position " + std::to_string(i) + " unscheduled");
  return dest;
}

std::vector<ArSample> exchange_samples(const std::vector<ArSample>& local, const RolloutDirectory& directory,
                                       const std::vector<int64_t>& destination, parallel::Communicator& dp) {
  const int64_t world = dp.size();
  std::vector<std::vector<const ArSample*>> outgoing(world);
  for (const ArSample& s : local) outgoing.at(destination.at(directory.position_of(s.index))).push_back(&s);
  std::vector<uint8_t> bytes;
  std::vector<int64_t> counts(world);
  for (int64_t r = 0; r < world; ++r) {
    const std::vector<uint8_t> part = serialize_samples(outgoing[r]);
    counts[r] = static_cast<int64_t>(part.size());
    bytes.insert(bytes.end(), part.begin(), part.end());
  }
  torch::Tensor send = torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::vector<int64_t> recv_counts;
  torch::Tensor recv = dp.all_to_all_v(send, counts, &recv_counts);  // (bytes received)
  std::vector<ArSample> out = deserialize_samples(recv.data_ptr<uint8_t>(), static_cast<size_t>(recv.numel()));
  std::sort(out.begin(), out.end(), [](const ArSample& a, const ArSample& b) { return a.index < b.index; });
  return out;
}

}  // namespace tandem
