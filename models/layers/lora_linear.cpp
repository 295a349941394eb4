// The plain-layer adapters: the layer, and attaching, listing and loading them over a module tree.
#include "models/layers/lora_linear.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "common/error.h"
#include "models/safetensors.h"
#include "models/safetensors_detail.h"

namespace tandem::models {

namespace {

struct Adapted {
  std::string module;  // e.g. blocks.0.attn.qkv
  LoraLinearImpl* layer;
  std::string key(const char* factor) const { return "base_model.model." + module + ".lora_" + factor + ".weight"; }
};

// Every LoraLinear under root in module order (named_modules' depth-first order), with or without
// adapters.
std::vector<Adapted> lora_linears(torch::nn::Module& root) {
  std::vector<Adapted> out;
  for (const auto& item : root.named_modules("", /*include_self=*/false))
    if (auto* l = dynamic_cast<LoraLinearImpl*>(item.value().get())) out.push_back({item.key(), l});
  return out;
}

std::vector<Adapted> adapted(torch::nn::Module& root) {
  std::vector<Adapted> out;
  for (const Adapted& a : lora_linears(root))
    if (a.layer->lora().defined()) out.push_back(a);
  return out;
}

std::string leaf(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::nn::LinearImpl::forward(x);  // (..., out)
  if (lora_.defined() && parallel::lora_active()) y = parallel::add_lora(y, x, {lora_.a, lora_.b, lora_.scale});
  return y;
}

void LoraLinearImpl::attach_lora(const torch::Tensor& a, const torch::Tensor& b, double scale) {
  const int64_t in = weight.size(1), out = weight.size(0);
  TORCH_CHECK(!lora_.defined(), "LoraLinear: the layer already has an adapter");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == in && b.size(0) == out && a.size(0) == b.size(1),
              "LoraLinear: factors A ", a.sizes(), " and B ", b.sizes(), " do not fit a layer of ", in, " -> ", out);
  lora_ = {register_parameter("lora_A", a), register_parameter("lora_B", b), scale};
}

bool is_lora_parameter(const std::string& name) {
  const std::string l = leaf(name);
  return l == "lora_A" || l == "lora_B";
}

void attach_lora(torch::nn::Module& root, const LoraSpec& spec, uint64_t seed) {
  TORCH_CHECK(spec.rank > 0 && spec.alpha > 0 && !spec.targets.empty(), "attach_lora: an empty LoRA spec");
  TORCH_CHECK(!has_lora(root), "attach_lora: the model already has adapters");
  const std::vector<Adapted> layers = lora_linears(root);
  for (const std::string& t : spec.targets)
    if (std::none_of(layers.begin(), layers.end(), [&](const Adapted& a) { return leaf(a.module) == t; }))
      throw std::invalid_argument("attach_lora: no layer named '" + t + "' can carry an adapter");
  for (auto& p : root.parameters()) p.set_requires_grad(false);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (const Adapted& a : layers) {
    if (std::find(spec.targets.begin(), spec.targets.end(), leaf(a.module)) == spec.targets.end()) continue;
    const torch::Tensor& w = a.layer->weight;  // (out, in)
    const int64_t in = w.size(1), out = w.size(0);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform(a = sqrt(5))
    const auto to_param = [&](const torch::Tensor& t) {
      return t.to(w.scalar_type()).to(w.device()).contiguous().set_requires_grad(true);
    };
    a.layer->attach_lora(to_param(torch::rand({spec.rank, in}, gen, torch::kFloat64) * (2 * bound) - bound),
                         to_param(torch::zeros({out, spec.rank}, torch::kFloat64)), spec.scale());
  }
}

bool has_lora(torch::nn::Module& root) { return !adapted(root).empty(); }

std::vector<torch::Tensor> lora_parameters(torch::nn::Module& root) {
  std::vector<torch::Tensor> out;
  for (const Adapted& a : adapted(root)) out.push_back(a.layer->lora().a), out.push_back(a.layer->lora().b);
  return out;
}

std::vector<torch::Tensor> base_parameters(torch::nn::Module& root) {
  std::vector<torch::Tensor> out;
  for (const auto& p : root.named_parameters())
    if (!is_lora_parameter(p.key())) out.push_back(p.value());
  return out;
}

std::map<std::string, torch::Tensor> lora_state(torch::nn::Module& root) {
  std::map<std::string, torch::Tensor> out;
  for (const Adapted& a : adapted(root)) {
    out[a.key("A")] = a.layer->lora().a.detach().to(torch::kCPU).contiguous().clone();
    out[a.key("B")] = a.layer->lora().b.detach().to(torch::kCPU).contiguous().clone();
  }
  return out;
}

void load_lora_state(torch::nn::Module& root, const std::map<std::string, torch::Tensor>& tensors,
                     const std::string& source) {
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (const Adapted& a : adapted(root))
    for (const char* factor : {"A", "B"}) {
      const std::string key = a.key(factor);
      const torch::Tensor& dst = *factor == 'A' ? a.layer->lora().a : a.layer->lora().b;
      const auto it = tensors.find(key);
      if (it == tensors.end()) throw UserError(source + ": missing adapter tensor " + key);
      if (it->second.sizes() != dst.sizes())
        throw UserError(source + ": " + key + " has shape " + c10::str(it->second.sizes()) + ", the adapter wants " +
                        c10::str(dst.sizes()) + " (a different rank or model?)");
      if (!torch::isfinite(it->second).all().item<bool>())
        throw UserError(source + ": " + key + " holds non-finite values");
      dst.copy_(it->second);
      used.insert(key);
    }
  for (const auto& [key, t] : tensors)
    if (!used.count(key)) throw UserError(source + ": unexpected tensor " + key + " (other adapter targets?)");
}

void write_peft_adapter(const std::string& dir, const LoraSpec& spec, const std::map<std::string, torch::Tensor>& state,
                        const nlohmann::json& extra) {
  std::filesystem::create_directories(dir);
  nlohmann::json c{{"peft_type", "LORA"},
                   {"r", spec.rank},
                   {"target_modules", spec.targets},  // all-linear resolved: peft reads a list as module names
                   {"lora_dropout", 0.0},
                   {"bias", "none"},
                   {"fan_in_fan_out", false},
                   {"init_lora_weights", true},
                   {"use_rslora", false},
                   {"use_dora", false},
                   {"modules_to_save", nullptr},
                   {"layers_to_transform", nullptr},
                   {"rank_pattern", nlohmann::json::object()},
                   {"alpha_pattern", nlohmann::json::object()},
                   {"inference_mode", true},
                   {"base_model_name_or_path", nullptr}};
  if (spec.alpha == std::floor(spec.alpha))
    c["lora_alpha"] = static_cast<int64_t>(spec.alpha);
  else
    c["lora_alpha"] = spec.alpha;
  for (const auto& [k, v] : extra.items()) c[k] = v;
  save_safetensors(dir + "/" + kAdapterWeights, state, {{"format", "pt"}});
  detail::write_text_atomically(dir + "/" + kAdapterConfig, c.dump(2) + "\n");
}

nlohmann::json causal_lm_adapter_info(const nlohmann::json& extra) {
  nlohmann::json info{{"task_type", "CAUSAL_LM"}};
  for (const auto& [k, v] : extra.items()) info[k] = v;
  return info;
}

std::map<std::string, torch::Tensor> read_peft_weights(const std::string& dir) {
  const std::string file = dir + "/" + kAdapterWeights;
  if (!std::filesystem::is_regular_file(file))
    throw UserError(file + ": missing; an adapter directory holds adapter_model.safetensors");
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : load_safetensors(file)) out[name] = t;
  return out;
}

}  // namespace tandem::models
