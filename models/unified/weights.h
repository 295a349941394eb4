// Saving and loading the unified model: a directory with config.json (unified/config.h) and
// model.safetensors (the Hugging Face single-file layout of models/safetensors.h), in the model's
// dtype. The tensor names are the module's parameter names and are stable:
//   embed_tokens.weight (V, D)            patch_embed.{weight (D, p*p*C), bias (D)}
//   pos_embed (N, D)                      t_embed.fc1.{weight (D, 256), bias}, t_embed.fc2.{weight (D, D), bias}
//   layers.i.input_layernorm.weight (D)   layers.i.self_attn.{q,k,v,o}_proj.weight (D, D)
//   layers.i.post_attention_layernorm.weight (D)
//   layers.i.mlp.{gate,up}_proj.weight (I, D), layers.i.mlp.down_proj.weight (D, I)
//   norm.weight (D)                       lm_head.weight (V, D)
//   velocity_head.{weight (p*p*C, D), bias (p*p*C)}
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/unified/model.h"

namespace tandem::models {

// Every tensor's name and shape for `config`, in parameter order (the list above).
std::vector<std::pair<std::string, std::vector<int64_t>>> unified_param_shapes(const UnifiedConfig& config);

// Copies the tensors into the model (converting to its dtype). Throws UserError naming `source`
// and listing every missing tensor, shape mismatch (expected vs got) and unexpected tensor.
void load_unified_state(UnifiedModelImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                        const std::string& source);

// Writes dir/config.json and dir/model.safetensors (dir created if missing; each file atomically).
void save_unified(UnifiedModelImpl& model, const std::string& dir);

// Reads a directory save_unified wrote into a model with parameters in `dtype` (on the CPU).
UnifiedModel load_unified(const std::string& dir, torch::ScalarType dtype = torch::kFloat32);

}  // namespace tandem::models
