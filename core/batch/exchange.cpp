// Serialization is a flat little-endian record per sample: counts, then ids, mask and
// log-probs. It is an in-memory wire format between ranks of one binary, not a file format.
#include "core/batch/exchange.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
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

SampleCost cost_of(const ArSample& s) {
  return {s.length(), s.action_tokens(), s.group_id, std::max<int64_t>(0, s.prompt_len - 1)};
}

std::vector<SampleCost> costs_of(const std::vector<ArSample>& samples) {
  std::map<int64_t, const ArSample*> first;  // group id -> its first member here
  std::set<int64_t> apart;                   // groups whose prompts differ
  for (const ArSample& s : samples) {
    const auto [it, fresh] = first.emplace(s.group_id, &s);
    if (!fresh && !same_prompt(*it->second, s)) apart.insert(s.group_id);
  }
  std::vector<SampleCost> costs;
  for (const ArSample& s : samples) {
    costs.push_back(cost_of(s));
    if (apart.count(s.group_id) != 0) costs.back().shared_tokens = 0;
  }
  return costs;
}

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
    put<int64_t>(out, s->policy_version);
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
    s.policy_version = r.get<int64_t>();
    check_sample(s);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

void put_tensor(std::vector<uint8_t>& out, const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU).contiguous();
  put<int64_t>(out, static_cast<int64_t>(c.scalar_type()));
  put_array(out, c.sizes().vec());
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  put<int64_t>(out, c.numel() * static_cast<int64_t>(c.element_size()));
  out.insert(out.end(), p, p + c.numel() * c.element_size());
}

torch::Tensor get_tensor(Reader& r) {
  const auto type = static_cast<torch::ScalarType>(r.get<int64_t>());
  if (type != torch::kFloat32 && type != torch::kFloat64 && type != torch::kBFloat16)
    throw std::runtime_error("deserialize_image_samples: unexpected dtype");
  const std::vector<int64_t> shape = r.get_array<int64_t>();
  const std::vector<uint8_t> bytes = r.get_array<uint8_t>();
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
  if (static_cast<size_t>(t.numel() * t.element_size()) != bytes.size())
    throw std::runtime_error("deserialize_image_samples: tensor size mismatch");
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

std::vector<uint8_t> serialize_samples(const std::vector<const ImageSample*>& samples) {
  std::vector<uint8_t> out;
  for (const ImageSample* s : samples) {
    put<int64_t>(out, s->class_label);
    put<int64_t>(out, s->group_id);
    put<int64_t>(out, s->index);
    put<double>(out, s->reward);
    put<double>(out, s->advantage);
    put_array(out, s->train_timesteps);
    put_tensor(out, s->latents);
    put_tensor(out, s->log_probs);
    put_tensor(out, s->sigmas);
  }
  return out;
}

std::vector<ImageSample> deserialize_image_samples(const uint8_t* data, size_t size) {
  std::vector<ImageSample> out;
  Reader r(data, size);
  while (!r.done()) {
    ImageSample s;
    s.class_label = r.get<int64_t>();
    s.group_id = r.get<int64_t>();
    s.index = r.get<int64_t>();
    s.reward = r.get<double>();
    s.advantage = r.get<double>();
    s.train_timesteps = r.get_array<int64_t>();
    s.latents = get_tensor(r);
    s.log_probs = get_tensor(r);
    s.sigmas = get_tensor(r);
    out.push_back(std::move(s));
  }
  return out;
}

RolloutDirectory gather_directory(const std::vector<ArSample>& local, parallel::Communicator& dp) {
  std::vector<int64_t> ids;
  for (const auto& s : local) ids.push_back(s.index);
  return gather_directory(ids, costs_of(local), dp);
}

RolloutDirectory gather_directory(const std::vector<int64_t>& ids, const std::vector<SampleCost>& costs,
                                  parallel::Communicator& dp) {
  // One row per sample: (id, tokens, action_tokens, group_id, shared_tokens).
  constexpr int64_t kCols = 5;
  torch::Tensor rows = torch::empty({static_cast<int64_t>(ids.size()), kCols}, torch::kInt64);  // (n, 5)
  auto acc = rows.accessor<int64_t, 2>();
  for (size_t i = 0; i < ids.size(); ++i) {
    acc[i][0] = ids[i], acc[i][1] = costs[i].tokens, acc[i][2] = costs[i].action_tokens, acc[i][3] = costs[i].group_id;
    acc[i][4] = costs[i].shared_tokens;
  }
  torch::Tensor all = dp.all_gather_v(rows);  // (N, 5)
  const int64_t n = all.size(0);
  std::vector<std::array<int64_t, kCols>> table(n);
  auto a = all.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kCols; ++j) table[i][j] = a[i][j];
  std::sort(table.begin(), table.end());
  RolloutDirectory dir;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0 && table[i][0] == table[i - 1][0])
      throw std::runtime_error("gather_directory: sample id " + std::to_string(table[i][0]) + " on two ranks");
    dir.ids.push_back(table[i][0]);
    dir.costs.push_back({table[i][1], table[i][2], table[i][3], table[i][4]});
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

namespace {

// One all-to-all of each destination's serialized samples; returns the bytes received.
template <class Sample>
torch::Tensor send_to_destinations(const std::vector<Sample>& local, const RolloutDirectory& directory,
                                   const std::vector<int64_t>& destination, parallel::Communicator& dp) {
  const int64_t world = dp.size();
  std::vector<std::vector<const Sample*>> outgoing(world);
  for (const Sample& s : local) outgoing.at(destination.at(directory.position_of(s.index))).push_back(&s);
  std::vector<uint8_t> bytes;
  std::vector<int64_t> counts(world);
  for (int64_t r = 0; r < world; ++r) {
    const std::vector<uint8_t> part = serialize_samples(outgoing[r]);
    counts[r] = static_cast<int64_t>(part.size());
    bytes.insert(bytes.end(), part.begin(), part.end());
  }
  torch::Tensor send = torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  return dp.all_to_all_v(send, counts, nullptr);  // (bytes received)
}

template <class Sample>
void sort_by_id(std::vector<Sample>& v) {
  std::sort(v.begin(), v.end(), [](const Sample& a, const Sample& b) { return a.index < b.index; });
}

}  // namespace

std::vector<ArSample> exchange_samples(const std::vector<ArSample>& local, const RolloutDirectory& directory,
                                       const std::vector<int64_t>& destination, parallel::Communicator& dp) {
  const torch::Tensor recv = send_to_destinations(local, directory, destination, dp);
  auto out = deserialize_samples(recv.data_ptr<uint8_t>(), static_cast<size_t>(recv.numel()));
  sort_by_id(out);
  return out;
}

std::vector<ImageSample> exchange_samples(const std::vector<ImageSample>& local, const RolloutDirectory& directory,
                                          const std::vector<int64_t>& destination, parallel::Communicator& dp) {
  const torch::Tensor recv = send_to_destinations(local, directory, destination, dp);
  auto out = deserialize_image_samples(recv.data_ptr<uint8_t>(), static_cast<size_t>(recv.numel()));
  sort_by_id(out);
  return out;
}

}  // namespace tandem
