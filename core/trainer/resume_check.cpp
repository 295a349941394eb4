// See resume_check.h. The recipes are compared as the resolved YAML of the parts that matter, so a
// new recipe key that shapes a tensor is one line here.
#include "core/trainer/resume_check.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "models/dit/dit_layers.h"
#include "models/llama/lora.h"

namespace tandem {

namespace {

// A LoRA section's targets as the sorted names of the layers they adapt: all-linear and the same
// layers listed by name, in any order, make the same adapters.
std::vector<std::string> adapted_layers(std::vector<std::string> targets, const std::vector<std::string>& all_linear) {
  if (targets == std::vector<std::string>{"all-linear"}) targets = all_linear;
  std::sort(targets.begin(), targets.end());
  return targets;
}

}  // namespace

std::string incompatible_change(const Config& saved, const Config& current) {
  // Compare only what a checkpoint's tensors depend on, through the resolved YAML text.
  // A tokenizer read from the model directory moves with it (the LoRA base is checked by its
  // weights' identity): when both recipes read theirs so, the paths are not compared.
  const auto from_model_dir = [](const Config& c) {
    return c.tracks.ar.tokenizer.path && c.tracks.ar.tokenizer.path == c.tracks.ar.model.hf_dir;
  };
  const bool moved_with_model = from_model_dir(saved) && from_model_dir(current);
  auto shape_of = [moved_with_model](const Config& c) {
    Config only;
    only.tracks.ar.enabled = c.tracks.ar.enabled;
    only.tracks.ar.model = c.tracks.ar.model;
    only.tracks.ar.model.hf_dir.reset();  // where the initial weights came from does not matter
    only.tracks.ar.tokenizer = c.tracks.ar.tokenizer;
    if (moved_with_model) only.tracks.ar.tokenizer.path.reset();
    only.tracks.ar.lora = c.tracks.ar.lora;  // the adapters' shapes (the base is checked by its identity)
    only.tracks.ar.lora.targets = adapted_layers(c.tracks.ar.lora.targets, models::lora_linear_names());
    only.tracks.image.enabled = c.tracks.image.enabled;
    only.tracks.image.model = c.tracks.image.model;
    only.tracks.image.lora = c.tracks.image.lora;
    only.tracks.image.lora.targets = adapted_layers(c.tracks.image.lora.targets, models::lora_dit_names());
    only.optim.moments = c.optim.moments;  // the optimizer file's format
    return to_yaml(only);
  };
  const std::string a = shape_of(saved), b = shape_of(current);
  if (a == b) return "";
  std::istringstream sa(a), sb(b);
  std::string la, lb, section;
  while (std::getline(sa, la) && std::getline(sb, lb)) {
    if (!la.empty() && la[0] != ' ') section = la;
    if (la != lb)
      return "the checkpoint's recipe differs in model, tokenizer, LoRA or optim.moments (" + section + " ... '" + la +
             "' vs now '" + lb + "')";
  }
  return "the checkpoint's recipe differs in model, tokenizer, LoRA or optim.moments";
}

}  // namespace tandem
