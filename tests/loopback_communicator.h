// A one-rank group for unit tests: every collective is the identity, as it is for a group of one.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace tandem::test {

class Loopback final : public parallel::Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  std::string name() const override { return "loopback"; }
  torch::Device device() const override { return torch::kCPU; }
  void all_reduce(torch::Tensor&, parallel::ReduceOp) override { ++collectives; }
  torch::Tensor all_gather(const torch::Tensor& t) override { return ++collectives, t.clone(); }
  torch::Tensor all_gather_v(const torch::Tensor& t) override { return ++collectives, t.clone(); }
  torch::Tensor reduce_scatter(const torch::Tensor& t, parallel::ReduceOp) override { return ++collectives, t.clone(); }
  void broadcast(torch::Tensor&, int64_t) override { ++collectives; }
  torch::Tensor all_to_all_v(const torch::Tensor& send, const std::vector<int64_t>& counts,
                             std::vector<int64_t>* recv) override {
    ++collectives;
    if (recv) *recv = counts;
    return send.clone();
  }
  void barrier() override { ++collectives; }
  int collectives = 0;
};

}  // namespace tandem::test
