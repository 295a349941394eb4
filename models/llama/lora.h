// LoRA adapters on the Llama model's linear layers (the arithmetic is parallel/tp_layers.h's),
// initialised, named and stored as peft does it, so an adapter directory this writes is one
// `peft.PeftModel.from_pretrained` reads: adapter_config.json + adapter_model.safetensors with keys
// `base_model.model.<module>.lora_{A,B}.weight`. peft's `all-linear` is every linear layer but the
// output one: q/k/v/o_proj and gate/up/down_proj of each decoder layer.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/layers/lora_linear.h"
#include "models/llama/model.h"

namespace tandem::models {

// LoraSpec (models/layers/lora_linear.h): its targets are a subset of lora_linear_names() here.

// q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: what `all-linear` names.
const std::vector<std::string>& lora_linear_names();

// Adds adapters in the model's dtype (a bf16 run trains them through its float32 master weights) to every target
// layer on the model's device and freezes every other parameter (requires_grad false). A is drawn as peft draws it
// (kaiming_uniform with a = sqrt(5), i.e. uniform in
// +-1 / sqrt(in)) from full tensors in module order from one generator seeded with `seed`, and each tp rank keeps its
// slice, so tp = 2 holds exactly tp = 1's adapters; B is zero, so the adapted model computes the base's outputs until
// the first update.
void attach_lora(LlamaForCausalLMImpl& model, const LoraSpec& spec, uint64_t seed);
bool has_lora(const LlamaForCausalLMImpl& model);

// The adapters' factors (A then B of each adapted module, in module order); every other parameter
// is base_parameters(model) (models/layers/lora_linear.h).
std::vector<torch::Tensor> lora_parameters(LlamaForCausalLMImpl& model);

// Full factors by peft key, on the CPU, in float32 (float64 for a float64 model). Collective over tp.
std::map<std::string, torch::Tensor> gather_lora_state(LlamaForCausalLMImpl& model);
// Copies this tp rank's slice of each factor in. Throws UserError naming `source` and every missing,
// misshapen, unexpected or non-finite tensor.
void load_lora_state(LlamaForCausalLMImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                     const std::string& source);

// adapter_config.json (peft's LoraConfig fields; `extra` adds keys, e.g. base_model_name_or_path)
// and adapter_model.safetensors in float32. Collective over tp; only `writer` touches dir.
void save_peft_adapter(LlamaForCausalLMImpl& model, const LoraSpec& spec, const std::string& dir, bool writer,
                       const nlohmann::json& extra = {});
// The spec adapter_config.json describes (rank, alpha, target module names) and the factors, with
// every field checked: UserError naming the file otherwise. Refuses what tandem cannot apply
// exactly (rslora, DoRA, fan_in_fan_out, bias, modules_to_save, per-module ranks); dropout does not
// act at inference and is not read.
LoraSpec read_peft_config(const std::string& dir);
// read_peft_weights(dir): models/layers/lora_linear.h.

// W += scale * B A in every adapted module (computed in float64, rounded once to W's dtype) and
// the adapters removed from the forward's sum (B zeroed): the model then computes what it did, as
// a plain model. For export; tp = 1.
void merge_lora(LlamaForCausalLMImpl& model);

}  // namespace tandem::models
