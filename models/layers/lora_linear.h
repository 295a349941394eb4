// LoRA adapters (Hu et al. 2021, in peft's layout) on the plain linear layers of the image models,
// which are not tensor parallel: LoraLinear is a torch::nn::Linear (same weight / bias names, same
// init draws) that can carry factors lora_A (r, in) and lora_B (out, r) and computes
// y = W x + b + scale B (A x), W + BA never formed. The tp-parallel layers carry their own
// (parallel/tp_layers.h); the switch that turns adapters off (LoraOffGuard) is theirs too.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/tp_layers.h"

namespace tandem::models {

struct LoraSpec {
  int64_t rank = 0;
  double alpha = 0;                  // the adapters' output scales by alpha / rank
  std::vector<std::string> targets;  // layer names (the last component of the module path)
  double scale() const { return alpha / static_cast<double>(rank); }
};

class LoraLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& x);  // (..., in) -> (..., out)
  // Registers the factors as parameters lora_A (r, in) and lora_B (out, r).
  void attach_lora(const torch::Tensor& a, const torch::Tensor& b, double scale);
  const parallel::LoraFactors& lora() const { return lora_; }

 private:
  parallel::LoraFactors lora_;
};
TORCH_MODULE(LoraLinear);

// Whether a parameter's name (module path + name) is an adapter factor's.
bool is_lora_parameter(const std::string& name);

// Adds adapters to every LoraLinear under `root` whose name is one of spec.targets and freezes every
// other parameter of `root` (requires_grad false). As peft: A is kaiming_uniform with a = sqrt(5)
// (uniform in +-1 / sqrt(in)), drawn in float64 in module order from one generator seeded with
// `seed`; B is zero, so the model computes the base's outputs until the first update. The factors
// take the layer's dtype and device. Throws std::invalid_argument when a target names no layer.
void attach_lora(torch::nn::Module& root, const LoraSpec& spec, uint64_t seed);
bool has_lora(torch::nn::Module& root);
// A then B of each adapted layer, in module order.
std::vector<torch::Tensor> lora_parameters(torch::nn::Module& root);
// Every other parameter (named anything but lora_A / lora_B: these layers' and the tp layers'
// factors alike), in parameter order: what a LoRA model's base is.
std::vector<torch::Tensor> base_parameters(torch::nn::Module& root);

// The factors by peft's key (base_model.model.<module>.lora_{A,B}.weight), detached, on the CPU.
std::map<std::string, torch::Tensor> lora_state(torch::nn::Module& root);
// Copies the factors in. Throws UserError naming `source` and the first missing, misshapen,
// unexpected or non-finite tensor.
void load_lora_state(torch::nn::Module& root, const std::map<std::string, torch::Tensor>& tensors,
                     const std::string& source);

// A peft adapter directory, whatever the model: `state` (peft's keys) as adapter_model.safetensors
// and peft's LoraConfig fields for `spec` as adapter_config.json (`extra` adds or overrides keys:
// task_type, base_model_name_or_path). Creates dir; the config is written atomically.
inline constexpr const char* kAdapterConfig = "adapter_config.json";
inline constexpr const char* kAdapterWeights = "adapter_model.safetensors";
void write_peft_adapter(const std::string& dir, const LoraSpec& spec, const std::map<std::string, torch::Tensor>& state,
                        const nlohmann::json& extra = nlohmann::json::object());
// adapter_config.json's extra keys for a causal language model's adapters: peft's task_type
// CAUSAL_LM, then `extra`'s keys.
nlohmann::json causal_lm_adapter_info(const nlohmann::json& extra);
// dir/adapter_model.safetensors; UserError naming it when missing.
std::map<std::string, torch::Tensor> read_peft_weights(const std::string& dir);

}  // namespace tandem::models
