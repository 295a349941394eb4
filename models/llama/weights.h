// Hugging Face weights for the Llama model: the HF parameter names and shapes, the random
// init, loading a directory (each tp rank keeps its slice) and saving one (tp shards gathered
// to the writer) in the same layout, so the result opens in other tools.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/llama/model.h"
#include "models/safetensors.h"

namespace tandem::models {

// One HF tensor: its full (unsharded) shape and how tp splits it (split_dim -1: replicated;
// shards are balanced multiples of split_unit, e.g. head_dim for q/k/v/o).
struct HfParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t split_dim = -1;
  int64_t split_unit = 1;
};

// Every tensor of the model in HF order; lm_head.weight only when not tied.
std::vector<HfParamSpec> hf_param_specs(const LlamaConfig& config);

// This tp rank's slice of a full tensor.
torch::Tensor tp_slice(const torch::Tensor& full, const HfParamSpec& spec, int64_t tp_rank, int64_t tp_size);

// Draws every full tensor in spec order from one generator seeded with `seed` and keeps this
// rank's slice: normal(0, initializer_range) for matrices, ones for norms, zeros for biases.
void initialize_weights(LlamaForCausalLMImpl& model, uint64_t seed);

// Copies this rank's slice of each tensor into the model (converting the dtype). Throws
// UserError naming `source` and listing every missing tensor, shape mismatch (expected vs got)
// and unexpected tensor, or naming a tensor with NaN or Inf; ignored: *.rotary_emb.inv_freq, and
// lm_head.weight when tied.
void load_hf_state(LlamaForCausalLMImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                   const std::string& source);

// Checks the weight directory's safetensors headers against `config` before any tensor data is
// read: every tensor of hf_param_specs present with its shape and a floating-point dtype, none
// unexpected. Throws UserError naming the directory and listing the problems.
void check_hf_weights(const std::string& dir, const LlamaConfig& config);

// Full tensors by HF name, on the CPU, in the model's dtype. Collective over tp: every tp rank
// calls it and gets every tensor.
std::map<std::string, torch::Tensor> gather_hf_state(LlamaForCausalLMImpl& model);

// Whether each of `params` (the model's tensors) is split over tp: by its HF spec, and a LoRA
// factor as its layer splits it (column parallel: B; row parallel: A). All false at tp 1. For the
// gradient norm, whose sharded part is summed over tp and replicated part counted once.
std::vector<bool> tp_sharded(LlamaForCausalLMImpl& model, const std::vector<torch::Tensor>& params);

// Reads dir/config.json and the weights (model.safetensors or the sharded index) into a model
// sharded for ctx, with parameters in `dtype`.
LlamaForCausalLM load_llama(const std::string& dir, const parallel::ParallelContext& ctx = {},
                            torch::ScalarType dtype = torch::kFloat32);

// Writes config.json and the weights in the model's dtype. Collective over tp (the shards are
// gathered); only ranks with `writer` true touch the directory.
void save_llama(LlamaForCausalLMImpl& model, const std::string& dir, bool writer = true,
                uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace tandem::models
