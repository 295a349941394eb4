// LlamaConfig: the plain description of a Llama / Qwen2 / Qwen3 / Mistral / Gemma 3 decoder, and its mapping from and
// to a Hugging Face config.json. models/ never reads the recipe; the caller fills this struct.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/layers/attention_kernel.h"
#include "models/layers/rope_scaling.h"

namespace tandem::models {

// The decoder layer's arrangement. Llama (also Qwen2, Qwen3, Mistral): x + attn(norm(x)), then
// + mlp(norm(x)), SwiGLU, RMSNorm scaled by w. Gemma 3: norms before and after both attention
// and MLP, GeGLU with tanh-approximated GELU, RMSNorm scaled by (1 + w) in float32, embeddings
// multiplied by sqrt(hidden).
enum class DecoderBlock { kLlama, kGemma3 };

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t intermediate_size = 0;
  int64_t max_seq_len = 0;
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  bool tie_embeddings = false;
  bool qkv_bias = false;            // q/k/v projections carry a bias (Qwen2); o_proj never does
  bool qk_norm = false;             // per-head RMSNorm of queries and keys before RoPE (Qwen3)
  double initializer_range = 0.02;  // std of the random init (HF's initializer_range)
  int64_t explicit_head_dim = 0;    // HF's head_dim when config.json gives one; 0: hidden_size / num_heads
  // Mistral's sliding_window: a query at position i sees keys at positions > i - sliding_window
  // (itself included); 0: every earlier position. A window no sequence outgrows is the full attention.
  int64_t sliding_window = 0;
  // Layers that ignore sliding_window (Gemma 3's full_attention layers); empty: every layer has it.
  std::vector<int64_t> full_attention_layers;
  // The RoPE base of the windowed layers when they have their own (Gemma 3's local base, without
  // rope_scaling); 0: every layer uses rope_theta and rope_scaling.
  double rope_local_theta = 0;
  DecoderBlock block = DecoderBlock::kLlama;
  // Gemma 3's query_pre_attn_scalar: scores are q.k / sqrt(this); 0: head_dim.
  double query_pre_attn_scalar = 0;
  RopeScaling rope_scaling;
  // How the model runs, not what it is (never in config.json): the attention kernel, and whether
  // the training forward keeps each decoder layer's activations or recomputes them in the
  // backward (activation checkpointing: a micro then holds the layer inputs plus one layer's).
  AttentionKernel attention = AttentionKernel::kAuto;
  bool recompute_layers = false;

  int64_t head_dim() const {
    if (explicit_head_dim > 0) return explicit_head_dim;
    return num_heads > 0 ? hidden_size / num_heads : 0;
  }
  // Whether layer i attends through the sliding window.
  bool layer_sliding(int64_t i) const;
  // Some layers attend through the window with their own RoPE or beside full-attention layers:
  // those layers need their own attention view (AttentionLayout::sliding).
  bool mixed_layers() const;
  // Throws UserError naming the field for a non-positive size, heads that do not divide the
  // hidden size, or query heads that are not a multiple of the kv heads.
  void validate() const;
  // Throws UserError when the heads cannot be split over `tp_size` ranks.
  void validate_tp(int64_t tp_size) const;
};

// Maps HF LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM / MistralForCausalLM /
// Gemma3ForCausalLM (model_type gemma3_text) config.json fields (num_hidden_layers,
// num_attention_heads, num_key_value_heads, max_position_embeddings, rms_norm_eps,
// tie_word_embeddings, attention_bias, head_dim, rope_scaling linear | llama3, ...). Throws
// UserError naming `source` and the field for a missing or mistyped field, a dimension beyond
// kMaxDimension, and features this model does not implement (other rope_scaling types, sliding
// windows, o_proj / MLP bias, an activation other than silu).
LlamaConfig from_hf_config(const nlohmann::json& config, const std::string& source = "config.json");

// The config.json Hugging Face tools expect for `config` stored in `dtype`: model_type gemma3_text
// for the Gemma 3 block, qwen3 when qk_norm, qwen2 when qkv_bias, mistral with a window, llama otherwise. With `base`
// (the config.json the weights came from) every key of it is kept and only the architecture keys and torch_dtype are
// written over it.
nlohmann::json to_hf_config(const LlamaConfig& config, torch::ScalarType dtype,
                            const nlohmann::json& base = nlohmann::json());

// Largest size accepted for any one dimension of config.json (vocabulary, hidden, MLP, layers,
// heads, context): far beyond any real model, far below what would overflow an allocation size.
inline constexpr int64_t kMaxDimension = int64_t{1} << 24;

// "none" | "linear" | "llama3".
const char* rope_scaling_name(RopeScalingKind kind);

// The Hugging Face `torch_dtype` name of a float dtype ("float32", ...); UserError for others.
const char* hf_dtype_name(torch::ScalarType dtype);
// Sets config.json's dtype: every spelling it has (transformers 5 reads "dtype", older versions
// "torch_dtype"; a file with both and one left stale loads at the stale one), "torch_dtype" when none.
void set_hf_dtype(nlohmann::json& config, torch::ScalarType dtype);

}  // namespace tandem::models
