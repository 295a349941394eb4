// Megatron-style tensor-parallel layers over a tp Communicator: the f / g conjugate autograd
// functions, column / row parallel linear layers and the vocab-parallel embedding. With a null
// communicator (tp size 1) every layer is a plain layer and nothing is communicated.
#pragma once

#include <torch/torch.h>

#include "common/scoped_value.h"
#include "parallel/lora_decode.h"
#include "parallel/packed_weights.h"
#include "parallel/parallel_context.h"

namespace tandem::parallel {

// Low-rank adapters (LoRA, Hu et al. 2021, in peft's layout) on the linear layers below:
// y = W x + scale * B (A x), A (r, in) and B (out, r), W + BA never formed. The product runs in
// x's dtype: a bf16 run's adapters are bf16 copies of float32 masters, as its base is. (peft runs
// it in float32, which keeps a float32 copy of every adapted layer's input for the backward.)
// Column parallel: B is split as W's rows, A replicated; row parallel: A is split as W's columns,
// B replicated. The replicated factor enters through copy_to_tp, so its gradient is summed over tp,
// and no collective is added to the forward.
struct LoraFactors {
  torch::Tensor a;  // (r, in) | row parallel (r, in_local)
  torch::Tensor b;  // (out_local, r) | row parallel (out, r)
  double scale = 0;
  bool defined() const { return a.defined(); }
};

// scale * (x A^T) B^T: (..., in) -> (..., out) in `dtype`.
torch::Tensor lora_delta(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b, double scale,
                         torch::ScalarType dtype);

// y + lora_delta(x, ...) in y's dtype, B's GEMM accumulating onto y (addmm): LoraLinear's path. The
// parallel layers use it only when sampling; otherwise their adapters go into their output inside
// the linear's own autograd node, in place. When sampling (SamplingGuard, no autograd) into y
// itself, in place (y: a layer's fresh output, (..., out)), and on the host for a decode step's few
// rows through add_lora_decode with the layer's packed factors (the layers pass theirs).
struct PackedLora {
  PackedFactor a, b;
};
torch::Tensor add_lora(torch::Tensor y, const torch::Tensor& x, const LoraFactors& f, PackedLora* packed = nullptr);

// The samplers' scope on this thread (models' generate functions): without autograd the layers
// then take their decode paths (each fused projection one GEMM through its packed copy where the
// host packs, packed_weights.h, else one GEMM per layer; adapters added in place), whose rounding
// may differ from the training forward's. Every other forward, a no-grad scoring one included,
// runs the training forward's ops, so recomputed old log-probs equal it bitwise. The outermost
// guard on a thread holds the packed copies (released when no thread samples).
class SamplingGuard : ScopedValue<bool> {
 public:
  SamplingGuard();
  ~SamplingGuard();

 private:
  bool outermost_;
};

// x W^T (+ b) for x (..., in): when sampling, through `packed` (the caller's copy of w) where the
// host packs, else torch::linear. The lm head's sampling path.
torch::Tensor sampling_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                              PackedWeight& packed);

// Whether adapters apply on this thread: on by default; LoraOffGuard turns them off for its scope
// (the KL reference and the base-only phases run the same modules without them). Thread-local, so
// a reference forward on the overlap worker's thread leaves the sampler's adapters on.
bool lora_active();
class LoraOffGuard : ScopedValue<bool> {
 public:
  LoraOffGuard();
};
// Sets the thread's switch for a scope, as it was when a recomputed layer first ran.
class LoraModeGuard : ScopedValue<bool> {
 public:
  explicit LoraModeGuard(bool active);
};

// Whether the sampling path may add the adapters through the host decode kernel (lora_decode.h):
// on by default; off for a scope, ATen's GEMMs, which `bench rollout` times beside it.
class LoraDecodeKernelGuard : ScopedValue<bool> {
 public:
  explicit LoraDecodeKernelGuard(bool enabled);
};

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
  // Registers the adapter's factors as parameters lora_A (r, in) and lora_B (out_local, r).
  void attach_lora(const torch::Tensor& a, const torch::Tensor& b, double scale);
  const LoraFactors& lora() const { return lora_; }
  PackedLora& decode_packed() const { return decode_packed_; }  // the sampler's (lora_decode.h)
  // The sampler's packed copies (packed_weights.h): of this weight, and of a fused group's weights
  // when this layer leads it (fused_column_parallel).
  PackedWeight& packed_weight() const { return packed_weight_; }
  PackedWeight& group_packed() const { return group_packed_; }

 private:
  Communicator* tp_;
  LoraFactors lora_;
  mutable PackedLora decode_packed_;
  mutable PackedWeight packed_weight_, group_packed_;
};
TORCH_MODULE(ColumnParallelLinear);

// Several column-parallel projections of one input (same tp group; all with a bias or none) as
// one GEMM over their concatenated local weights, split back: (..., in) -> each (..., out_local).
// One larger GEMM runs faster than several small ones and reads x once in the backward. When
// sampling (SamplingGuard) the group is one GEMM through the first layer's packed copy of all
// their weights where the host packs, else each layer runs its own GEMM (no weight copy per call). The
// layers' adapters make one GEMM x [s A_1; ...]^T, and each B product is added into its block in
// place, inside the node (a LoRA training step of the Qwen2-0.5B shape, `bench train`: no page
// faults where the out-of-place adds made 85,838).
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
  // Registers the adapter's factors as parameters lora_A (r, in_local) and lora_B (out, r).
  void attach_lora(const torch::Tensor& a, const torch::Tensor& b, double scale);
  const LoraFactors& lora() const { return lora_; }
  PackedLora& decode_packed() const { return decode_packed_; }  // the sampler's (lora_decode.h)

 private:
  Communicator* tp_;
  LoraFactors lora_;
  mutable PackedLora decode_packed_;
  mutable PackedWeight packed_weight_;
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
