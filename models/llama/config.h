// LlamaConfig: the plain description of a Llama / Qwen2 decoder, and its mapping from and to a
// Hugging Face config.json. models/ never reads the recipe; the caller fills this struct.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::models {

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
  bool qkv_bias = false;             // q/k/v projections carry a bias (Qwen2); o_proj never does
  double initializer_range = 0.02;  // std of the random init (HF's initializer_range)

  int64_t head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  // Throws UserError naming the field for a non-positive size, heads that do not divide the
  // hidden size, or query heads that are not a multiple of the kv heads.
  void validate() const;
  // Throws UserError when the heads cannot be split over `tp_size` ranks.
  void validate_tp(int64_t tp_size) const;
};

// Maps HF LlamaForCausalLM / Qwen2ForCausalLM config.json fields (num_hidden_layers,
// num_attention_heads, num_key_value_heads, max_position_embeddings, rms_norm_eps,
// tie_word_embeddings, attention_bias, ...). Throws UserError naming `source` and the field for
// a missing or mistyped field and for features this model does not implement (rope_scaling,
// sliding windows, o_proj / MLP bias, an activation other than silu, a head_dim that is not
// hidden_size / num_heads).
LlamaConfig from_hf_config(const nlohmann::json& config, const std::string& source = "config.json");

// The config.json Hugging Face tools expect for `config` stored in `dtype`: model_type qwen2
// when qkv_bias, llama otherwise.
nlohmann::json to_hf_config(const LlamaConfig& config, torch::ScalarType dtype);

// The Hugging Face `torch_dtype` name of a float dtype ("float32", ...); UserError for others.
const char* hf_dtype_name(torch::ScalarType dtype);

}  // namespace tandem::models
