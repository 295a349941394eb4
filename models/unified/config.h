// UnifiedConfig: the plain description of the unified text + image transformer (models/unified),
// its validation, and its config.json form. models/ never reads the recipe; the caller fills it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::models {

struct UnifiedConfig {
  // The shared trunk and the text side (Llama-style: RMSNorm, RoPE, SwiGLU, no biases).
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;  // divides hidden_size; head_dim = hidden_size / num_heads is even (RoPE)
  int64_t intermediate_size = 0;
  int64_t max_text_len = 0;  // the widest text part (prompt or text sequence) a forward accepts
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  // The image side: square latents of `channels` x image_size x image_size, cut into
  // patch_size x patch_size patches (patch_size divides image_size).
  int64_t image_size = 0;
  int64_t channels = 0;
  int64_t patch_size = 0;

  int64_t head_dim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  int64_t grid() const { return patch_size > 0 ? image_size / patch_size : 0; }
  int64_t num_patches() const { return grid() * grid(); }
  int64_t patch_dim() const { return patch_size * patch_size * channels; }  // values per patch token

  // Throws std::invalid_argument naming the first bad field: a non-positive size, heads that do
  // not divide hidden_size, an odd head_dim, a patch_size that does not divide image_size, a
  // non-positive (or non-finite) rope_theta / rms_eps.
  void validate() const;
};

// The model_type written to and required in config.json.
inline constexpr const char* kUnifiedModelType = "tandem_unified";

// config.json of `config` for weights stored in `dtype`: every field above by its own name, plus
// model_type and torch_dtype.
nlohmann::json to_json(const UnifiedConfig& config, torch::ScalarType dtype);

// The inverse of to_json, strict: a missing or mistyped field, an unknown key or another
// model_type throws UserError naming `source` and the key; the result is validate()d.
UnifiedConfig unified_config_from_json(const nlohmann::json& j, const std::string& source = "config.json");

}  // namespace tandem::models
