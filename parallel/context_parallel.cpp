// The CP shard layout and the two gathers. The layout is recomputed from cu_seqlens on every
// rank, so no index ever travels; only K/V, their gradients and per-token outputs do.
#include "parallel/context_parallel.h"

#include <algorithm>
#include <stdexcept>

namespace tandem::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const CpShard& as_shard(int64_t p) { return *reinterpret_cast<const CpShard*>(p); }
Communicator& as_comm(int64_t p) { return *reinterpret_cast<Communicator*>(p); }

// (n_local, ...) on each rank -> (N, ...) in full-micro order.
torch::Tensor gather_full(const torch::Tensor& local, const CpShard& shard, Communicator& cp) {
  const torch::Tensor rank_major = cp.all_gather_v(local.contiguous());  // (N, ...)
  return rank_major.index_select(0, shard.gather_order.to(local.device()));
}

struct GatherKv : torch::autograd::Function<GatherKv> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local, int64_t shard, int64_t comm) {
    ctx->saved_data["rank_index"] = as_shard(shard).rank_index;
    ctx->saved_data["comm"] = comm;
    return gather_full(local, as_shard(shard), as_comm(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<torch::Tensor> rank_index = ctx->saved_data["rank_index"].toTensorVector();
    Communicator& cp = as_comm(ctx->saved_data["comm"].toInt());
    const torch::Tensor& g = grads[0];  // (N, ...)
    int64_t widest = 0;
    for (const auto& idx : rank_index) widest = std::max(widest, idx.numel());
    std::vector<int64_t> shape = g.sizes().vec();
    shape[0] = static_cast<int64_t>(rank_index.size()) * widest;
    torch::Tensor send = torch::zeros(shape, g.options());  // (cp * widest, ...) rank-major, zero padded
    for (size_t r = 0; r < rank_index.size(); ++r) {
      const int64_t n = rank_index[r].numel();
      if (n > 0) send.narrow(0, r * widest, n).copy_(g.index_select(0, rank_index[r].to(g.device())));
    }
    const int64_t mine = rank_index[cp.rank()].numel();
    return {cp.reduce_scatter(send).narrow(0, 0, mine), torch::Tensor(), torch::Tensor()};  // (n_local, ...)
  }
};

struct GatherOutputs : torch::autograd::Function<GatherOutputs> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local, int64_t shard, int64_t comm) {
    const CpShard& s = as_shard(shard);
    ctx->saved_data["local_index"] = s.rank_index[s.cp_rank];
    return gather_full(local, s, as_comm(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor idx = ctx->saved_data["local_index"].toTensor().to(grads[0].device());
    return {grads[0].index_select(0, idx), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<int64_t, int64_t> cp_chunk(int64_t length, int64_t k, int64_t chunks) {
  return {k * length / chunks, (k + 1) * length / chunks};
}

CpShard make_cp_shard(const torch::Tensor& cu_seqlens, int64_t cp_rank, int64_t cp_size) {
  if (cp_size < 1 || cp_rank < 0 || cp_rank >= cp_size)
    throw std::invalid_argument("make_cp_shard: rank " + std::to_string(cp_rank) + " of " + std::to_string(cp_size));
  CpShard s;
  s.cp_rank = cp_rank;
  s.cp_size = cp_size;
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU).to(torch::kInt64).contiguous();
  s.seq_begin.assign(cu.data_ptr<int64_t>(), cu.data_ptr<int64_t>() + cu.numel());
  s.tokens.resize(cp_size);
  const int64_t chunks = 2 * cp_size;
  for (size_t b = 0; b + 1 < s.seq_begin.size(); ++b) {
    const int64_t begin = s.seq_begin[b], length = s.seq_begin[b + 1] - begin;
    for (int64_t r = 0; r < cp_size; ++r) {
      for (int64_t k : {r, chunks - 1 - r}) {
        const auto [lo, hi] = cp_chunk(length, k, chunks);
        if (hi == lo) continue;
        if (r == cp_rank)
          s.segments.push_back({static_cast<int64_t>(b), static_cast<int64_t>(s.tokens[r].size()), hi - lo, lo});
        for (int64_t j = lo; j < hi; ++j) s.tokens[r].push_back(begin + j);
      }
    }
  }
  std::vector<int64_t> order(s.num_tokens());
  int64_t row = 0;
  for (const auto& rank_tokens : s.tokens)
    for (int64_t t : rank_tokens) order[t] = row++;
  s.gather_order = torch::tensor(order, torch::kInt64);
  for (const auto& rank_tokens : s.tokens) s.rank_index.push_back(torch::tensor(rank_tokens, torch::kInt64));
  return s;
}

torch::Tensor cp_gather_kv(const torch::Tensor& local, const CpShard& shard, Communicator* cp) {
  if (cp == nullptr || shard.cp_size == 1) return local;
  return GatherKv::apply(local, reinterpret_cast<int64_t>(&shard), reinterpret_cast<int64_t>(cp));
}

torch::Tensor cp_gather_outputs(const torch::Tensor& local, const CpShard& shard, Communicator* cp) {
  if (cp == nullptr || shard.cp_size == 1) return local;
  return GatherOutputs::apply(local, reinterpret_cast<int64_t>(&shard), reinterpret_cast<int64_t>(cp));
}

}  // namespace tandem::parallel
