// The bridge transfers of disaggregated rollout: serialized samples by all-gather, flat weights
// by broadcast. Sizes travel first so every rank can allocate; nothing here calls MPI directly.
#include "core/batch/rollout_bridge.h"

#include <algorithm>
#include <stdexcept>

#include "core/batch/exchange.h"

namespace tandem {

bool StalenessProtocol::publish_after_receive(int64_t t) const {
  return max_staleness > 0 && t >= start + max_staleness && t <= steps - 2;
}

bool StalenessProtocol::publish_after_update(int64_t t) const { return max_staleness == 0 && t <= steps - 2; }

bool StalenessProtocol::receive_before_generate(int64_t s) const {
  // K = 0: one publish after each update but the last; K >= 1: one per publish_after_receive.
  return max_staleness == 0 ? s >= start + 1 : s >= start + max_staleness + 1;
}

std::vector<ArSample> bridge_samples(parallel::Communicator& bridge, const std::vector<ArSample>& mine) {
  std::vector<const ArSample*> ptrs;
  for (const auto& s : mine) ptrs.push_back(&s);
  const std::vector<uint8_t> bytes = serialize_samples(ptrs);
  torch::Tensor local = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);  // (n_bytes)
  std::copy(bytes.begin(), bytes.end(), local.data_ptr<uint8_t>());
  // Records are self-delimiting, so the ranks' byte strings simply concatenate.
  const torch::Tensor all = bridge.all_gather_v(local);  // (sum n_bytes)
  return deserialize_samples(all.data_ptr<uint8_t>(), static_cast<size_t>(all.numel()));
}

void bridge_weights(parallel::Communicator& bridge, const std::vector<torch::Tensor>& params, int64_t& version,
                    bool apply) {
  torch::NoGradGuard no_grad;
  torch::Tensor v = torch::tensor({version}, torch::kInt64);
  bridge.broadcast(v, 0);
  version = v[0].item<int64_t>();
  if (params.empty()) throw std::logic_error("bridge_weights: no parameters");
  std::vector<torch::Tensor> flat;
  for (const auto& p : params) flat.push_back(p.detach().reshape({-1}).to(torch::kCPU));
  torch::Tensor buffer = torch::cat(flat);  // (total params) in the model's dtype
  bridge.broadcast(buffer, 0);
  if (!apply || bridge.rank() == 0) return;
  int64_t offset = 0;
  for (const auto& p : params) {
    const int64_t n = p.numel();
    p.detach().copy_(buffer.narrow(0, offset, n).view(p.sizes()));
    offset += n;
  }
}

std::string bridge_string(parallel::Communicator& bridge, const std::string& text) {
  torch::Tensor n = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64);
  bridge.broadcast(n, 0);
  torch::Tensor bytes = torch::zeros({n[0].item<int64_t>()}, torch::kUInt8);  // (n)
  if (bridge.rank() == 0) std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  bridge.broadcast(bytes, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
}

int64_t drop_stale(std::vector<ArSample>& samples, int64_t step, int64_t max_staleness,
                   std::vector<int64_t>& lag_histogram) {
  lag_histogram.assign(static_cast<size_t>(max_staleness + 1), 0);
  const size_t before = samples.size();
  samples.erase(std::remove_if(samples.begin(), samples.end(),
                               [&](const ArSample& s) {
                                 const int64_t lag = step - s.policy_version;
                                 if (lag < 0) throw std::logic_error("drop_stale: a sample from a future policy");
                                 if (lag > max_staleness) return true;
                                 lag_histogram[static_cast<size_t>(lag)]++;
                                 return false;
                               }),
                samples.end());
  return static_cast<int64_t>(before - samples.size());
}

}  // namespace tandem
