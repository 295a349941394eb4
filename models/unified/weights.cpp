// Unified model <-> directory of config.json + model.safetensors, strict about names and shapes.
#include "models/unified/weights.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "common/error.h"
#include "common/write_file.h"
#include "models/layers/lora_linear.h"
#include "models/safetensors.h"

namespace tandem::models {

namespace {

std::string shape_str(c10::IntArrayRef shape) { return c10::str(shape); }

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> unified_param_shapes(const UnifiedConfig& config) {
  // A model built without init has the exact parameter set; its shapes are the documented ones.
  torch::NoGradGuard no_grad;
  UnifiedModel model(config, std::nullopt);
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value().sizes().vec());
  return out;
}

void load_unified_state(UnifiedModelImpl& model, const std::map<std::string, torch::Tensor>& tensors,
                        const std::string& source) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  auto params = model.named_parameters();
  for (const auto& item : params) {
    if (is_lora_parameter(item.key())) continue;  // adapters have their own file (lora_state)
    expected.insert(item.key());
    const auto it = tensors.find(item.key());
    if (it == tensors.end()) {
      problems.push_back("missing " + item.key());
    } else if (it->second.sizes() != item.value().sizes()) {
      problems.push_back(item.key() + " has shape " + shape_str(it->second.sizes()) + ", expected " +
                         shape_str(item.value().sizes()));
    }
  }
  for (const auto& [name, t] : tensors)
    if (expected.count(name) == 0) problems.push_back("unexpected " + name);
  if (!problems.empty()) {
    std::string msg = source + ": unified weights do not match the config:";
    for (const std::string& p : problems) msg += "\n  " + p;
    throw UserError(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params)
    if (!is_lora_parameter(item.key())) item.value().copy_(tensors.at(item.key()));
}

void save_unified(UnifiedModelImpl& model, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model.named_parameters())  // the base: adapters have their own file
    if (!is_lora_parameter(item.key())) tensors[item.key()] = item.value().detach();
  save_hf_weights(dir, tensors);  // model.safetensors: a tiny model never needs shards
  const std::string path = (std::filesystem::path(dir) / kHfConfigFile).string();
  write_file_atomically(path, to_json(model.config(), model.dtype()).dump(2) + "\n");
}

UnifiedModel load_unified(const std::string& dir, torch::ScalarType dtype) {
  const std::string source = (std::filesystem::path(dir) / kHfConfigFile).string();
  const UnifiedConfig config = unified_config_from_json(read_hf_config(dir), source);
  UnifiedModel model(config, std::nullopt);
  model->to(dtype);
  load_unified_state(*model, load_hf_weights(dir), dir);
  return model;
}

}  // namespace tandem::models
