// The image track's start: its flow pretrained in place (for a shared model with the AR
// warm-start interleaved, text steps spread over the flow steps) or loaded from
// tracks.image.pretrain.path, and under LoRA the base trained with the adapters off.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/error.h"
#include "common/write_file.h"
#include "core/tracks/flow_pretrain.h"
#include "core/tracks/image_track.h"
#include "models/layers/lora_linear.h"
#include "parallel/tp_layers.h"

namespace fs = std::filesystem;

namespace tandem {

std::optional<int64_t> ImageTrack::pretrain_or_load(bool fresh_start, const std::function<void(int64_t)>& between,
                                                    int64_t between_steps) {
  const ImagePretrainConfig& p = config_.tracks.image.pretrain;
  const std::string weights = p.path ? *p.path + "/model.safetensors" : "";
  const std::string record = p.path ? *p.path + "/pretrain.json" : "";
  std::optional<int64_t> loaded;
  if (p.path && fs::exists(weights)) {
    // A LoRA checkpoint's image_model/ holds the base beside the adapters: the base alone is not its policy.
    if (fs::exists(*p.path + "/adapter_model.safetensors"))
      throw UserError("tracks.image.pretrain.path: " + *p.path +
                      " holds LoRA adapters (adapter_model.safetensors) beside its weights, which the pretrained "
                      "weights would leave out; resume that run with --resume, or point the path at pretrained "
                      "weights (tandem pretrain-flow)");
    load_weights(*flow_, weights);
    loaded = 0;
    if (fs::exists(record)) {
      std::ifstream in(record);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() ||
          (j.contains("text_warmstart_steps") && !j["text_warmstart_steps"].is_number_integer()))
        throw UserError(record +
                        ": not the JSON object tandem pretrain-flow writes ({\"flow_steps\": N, "
                        "\"text_warmstart_steps\": M}); remove it or pretrain again");
      loaded = j.value("text_warmstart_steps", int64_t{0});
    }
    spdlog::info("image: pretrained {} loaded from {}", shared() ? "shared model" : "flow", weights);
  } else if (fresh_start && p.steps > 0) {
    // With LoRA the pretraining trains the base itself, adapters off: it stands in for the
    // pretrained model a LoRA run starts from (the base is frozen again for RL).
    std::optional<parallel::LoraOffGuard> adapters_off;
    std::vector<torch::Tensor> base;
    if (lora_root_) {
      adapters_off.emplace();
      base = models::base_parameters(*lora_root_);
      for (auto& t : base) t.set_requires_grad(true);
      spdlog::info("image: {} is on: pretraining trains the base (adapters off), which RL then keeps frozen",
                   lora_dit_ ? "tracks.image.lora" : "tracks.ar.lora");
    }
    const FlowPretrainSummary s = pretrain_flow(*flow_, base, config_, *comms_.dp, *comms_.grad, p.path, between);
    for (auto& t : base) t.set_requires_grad(false);
    spdlog::info("image: pretrained {} steps, final loss {:.4f}", p.steps, s.final_loss);
    if (p.path && comms_.world->rank() == 0)
      write_file_checked(
          record, nlohmann::json{{"flow_steps", p.steps}, {"text_warmstart_steps", between_steps}}.dump() + "\n");
  }
  refresh_reference();
  return loaded;
}

bool ImageTrack::pretrain(bool fresh, Track* text) {
  const int64_t warm_steps = text ? text->warmstart_steps() : 0;
  if (!shared() || warm_steps == 0) {
    pretrain_or_load(fresh);
    return false;
  }
  const int64_t flow_steps = std::max<int64_t>(1, config_.tracks.image.pretrain.steps);
  int64_t text_done = 0;
  const std::optional<int64_t> loaded = pretrain_or_load(
      fresh,
      [&](int64_t i) {
        for (const int64_t due = (i + 1) * warm_steps / flow_steps; text_done < due;) text->warmstart_step(text_done++);
      },
      warm_steps);
  if (!loaded) return fresh && config_.tracks.image.pretrain.steps > 0;
  if (*loaded == warm_steps) {
    spdlog::info("warmstart: skipped, the loaded shared model holds its {} steps", warm_steps);
    return true;
  }
  spdlog::info(
      "warmstart: the loaded shared model holds {} text steps, the recipe asks {}: running them on the "
      "loaded weights",
      *loaded, warm_steps);
  return false;
}

}  // namespace tandem
