// The decoder-only language model of the Llama / Qwen2 family (HF LlamaForCausalLM layout:
// `model.{embed_tokens, layers.i, norm}` and `lm_head`), tensor parallel over ctx.tp and
// context parallel over ctx.cp, with per-token log-probs computed in chunks of tokens, and the
// incremental (KV cache) forward of generation.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "models/llama/attention.h"
#include "models/llama/config.h"
#include "models/llama/decoder_layer.h"
#include "models/llama/inputs.h"
#include "models/llama/kv_cache.h"
#include "parallel/parallel_context.h"
#include "parallel/tp_layers.h"
#include "parallel/vocab_parallel_logprob.h"

namespace tandem::models {

using parallel::TokenLogProbs;

// Embeddings, decoder layers and the final norm: ids -> final hidden states.
class LlamaModelImpl : public torch::nn::Module {
 public:
  LlamaModelImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx);
  void set_recompute(bool layers) { recompute_ = layers; }
  // (N) -> (N, hidden); with layout.cache every layer reads / writes its layer of the cache.
  torch::Tensor forward(const torch::Tensor& ids, const AttentionLayout& layout);

  parallel::VocabParallelEmbedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

 private:
  bool recompute_ = false;  // config.recompute_layers
  double embed_scale_ = 0;  // Gemma: embeddings times sqrt(hidden); 0: none
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  // Parameters are float32; call ->to(dtype). With init_seed the weights are drawn as HF
  // initialises them (normal(0, initializer_range), norms 1 (Gemma: 0), biases 0) from full tensors, so a
  // tp-sharded model holds exactly the slices of the tp=1 model with the same seed; without it
  // they are zeros (to be loaded, see weights.h). ctx is validated against the config.
  explicit LlamaForCausalLMImpl(const LlamaConfig& config, const parallel::ParallelContext& ctx = {},
                                std::optional<uint64_t> init_seed = 0);

  // Log-prob of targets[i] at every token i (and the entropy when asked). Packed: targets (N)
  // -> (N); with cp > 1 every cp rank passes the same whole micro, computes its chunks and gets
  // the whole (N) back (the backward keeps each rank's rows, so parameter gradients are partial
  // and must be summed over cp, as over dp). Padded: targets (B, T) -> (B, T), 0 on padding.
  // Collective over tp and cp.
  TokenLogProbs log_probs(const PackedInput& input, const torch::Tensor& targets, const LogProbOptions& options = {});
  TokenLogProbs log_probs(const PaddedInput& input, const torch::Tensor& targets, const LogProbOptions& options = {});

  // Full-vocabulary logits (gathered over tp and cp) in float32 (float64 for float64 models):
  // packed (N, V), padded (B, T, V). For reference tests and the sampler.
  torch::Tensor logits(const PackedInput& input);
  torch::Tensor logits(const PaddedInput& input);

  // Incremental decoding for the sampler. Collective over tp (each tp rank caches its own kv
  // heads; logits are gathered over tp); cp is not used: every cp rank runs it whole, the same
  // way. Logits are full-vocabulary in float32 (float64 for float64 models), as logits().
  //
  // An empty cache of `slots` sequences of up to `capacity` tokens, in the model's dtype / device,
  // with a store of `prefix_slots` shared prompts of up to `prefix_capacity` tokens.
  KvCache make_kv_cache(int64_t slots, int64_t capacity, int64_t prefix_slots = 0, int64_t prefix_capacity = 0) const;
  // The next-token logits of each sequence of a packed input (positions from 0), (B, V): the
  // logits at its last token. With `cache`, sequence i's K/V are stored in the empty slot
  // slots[i] (prefill), or in the free prefix slot slots[i] with into_prefixes (then attach
  // sequence slots to it). Sequences must be non-empty.
  torch::Tensor prefill(const PackedInput& input, KvCache* cache = nullptr, const std::vector<int64_t>& slots = {},
                        bool into_prefixes = false);
  // Appends token ids[i] (n) to slot i for i < n, at position = the slot's prefix and cached
  // length, and returns the next-token logits (n, V).
  torch::Tensor decode_step(const torch::Tensor& ids, KvCache& cache);

  // (V_local, hidden): the lm head's rows of this tp rank (the embedding's when tied).
  torch::Tensor lm_head_weight() const;
  int64_t vocab_begin() const { return model->embed_tokens->vocab_range.begin; }
  const LlamaConfig& config() const { return config_; }
  // The execution options of the config (attention kernel, layer recompute), for a model built
  // from a directory whose config.json cannot carry them.
  void set_execution(AttentionKernel attention, bool recompute_layers);
  const parallel::ParallelContext& parallel_context() const { return ctx_; }

  LlamaModel model{nullptr};
  parallel::ColumnParallelLinear lm_head{nullptr};  // null when tie_embeddings

 private:
  // Final hidden states of this rank's rows, (n_local, hidden) / (B*T, hidden); the packed one
  // also fills the layout (and the cp shard it points to).
  torch::Tensor hidden_packed(const PackedInput& input, AttentionLayout* layout, parallel::CpShard* shard);
  torch::Tensor hidden_padded(const PaddedInput& input);
  // The window, packed plan (q_rows / k_rows as plan_layout's) and RoPE tables of `layout` for
  // positions `pos`, and its sliding view when some layers attend differently (Gemma 3).
  void finish_layout(AttentionLayout& layout, const torch::Tensor& pos, int64_t q_rows, int64_t k_rows) const;
  // token_index (N) int64: the rows' positions for a fused loss (undefined: 0..N-1).
  TokenLogProbs head_log_probs(const torch::Tensor& hidden, const torch::Tensor& targets, const LogProbOptions& o,
                               const torch::Tensor& token_index);
  torch::Tensor head_logits(const torch::Tensor& hidden);

  LlamaConfig config_;
  parallel::ParallelContext ctx_;
  parallel::PackedWeight head_packed_;  // the sampler's copy of the head (parallel/packed_weights.h)
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace tandem::models
