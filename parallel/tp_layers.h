// Megatron-style tensor-parallel layers over a tp Communicator: the f / g conjugate autograd
// functions, column / row parallel linear layers and the vocab-parallel embedding. With a null
// communicator (tp size 1) every layer is a plain layer and nothing is communicated.
#pragma once

#include <torch/torch.h>

#include "parallel/parallel_context.h"

namespace tandem::parallel {

// f: identity forward; the gradient is summed over tp backward. Enters a tp region whose
// input is replicated on every tp rank.
torch::Tensor copy_to_tp(const torch::Tensor& x, Communicator* tp);
// g: sum over tp forward; identity backward. Leaves a row-parallel region.
torch::Tensor reduce_from_tp(const torch::Tensor& x, Communicator* tp);
// (..., n_r) shards -> (..., sum n_r) in rank order (shards may differ by one); backward keeps
// this rank's slice [local_begin, local_begin + n_r) of the gradient.
torch::Tensor gather_last_dim_from_tp(const torch::Tensor& x, Communicator* tp, int64_t local_begin);

// y = x W^T + b with W's output features split over tp (rank r holds rows out_range). The
// input is replicated; the output stays split: (..., in) -> (..., out_range.size()).
// `split_unit` keeps shards whole multiples of it (head_dim for attention heads).
class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, bool bias, const ParallelContext& ctx,
                           int64_t split_unit = 1);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t in_features, out_features;
  ShardRange out_range;
  torch::Tensor weight;  // (out_local, in)
  torch::Tensor bias;    // (out_local), undefined without bias
  Communicator* tp() const { return tp_; }

 private:
  Communicator* tp_;
};
TORCH_MODULE(ColumnParallelLinear);

// Several column-parallel projections of one input (same tp group; all with a bias or none) as
// one GEMM over their concatenated local weights, split back: (..., in) -> each (..., out_local).
// One larger GEMM runs faster than several small ones and reads x once in the backward.
std::vector<torch::Tensor> fused_column_parallel(const torch::Tensor& x,
                                                 const std::vector<const ColumnParallelLinearImpl*>& layers);

// y = x W^T + b with W's input features split over tp (rank r holds columns in_range): the
// input is already split, (..., in_local) -> (..., out), partial products summed over tp.
// The bias is replicated and added once, after the sum.
class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, bool bias, const ParallelContext& ctx,
                        int64_t split_unit = 1);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t in_features, out_features;
  ShardRange in_range;
  torch::Tensor weight;  // (out, in_local)
  torch::Tensor bias;    // (out), undefined without bias

 private:
  Communicator* tp_;
};
TORCH_MODULE(RowParallelLinear);

// Embedding with the vocabulary split over tp (rank r holds rows vocab_range). Ids outside the
// shard look up zeros; the sum over tp assembles every row.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, const ParallelContext& ctx);
  torch::Tensor forward(const torch::Tensor& ids);  // (...) int64 -> (..., dim)

  int64_t num_embeddings, embedding_dim;
  ShardRange vocab_range;
  torch::Tensor weight;  // (vocab_local, dim)

 private:
  Communicator* tp_;
};
TORCH_MODULE(VocabParallelEmbedding);

}  // namespace tandem::parallel
