// The image track's part of a checkpoint: image_model/ holds the policy (model.safetensors), the
// KL reference's copy (reference.safetensors), or with LoRA the base beside the adapters.
#include <filesystem>

#include "common/error.h"
#include "core/tracks/image_track.h"
#include "models/layers/lora_linear.h"
#include "models/safetensors.h"

namespace fs = std::filesystem;

namespace tandem {

namespace {
constexpr const char* kImageAdapterFile = "image_model/adapter_model.safetensors";
}  // namespace

void ImageTrack::load_weights(models::FlowModel& model, const std::string& path) {
  try {
    model.load_tensors(models::load_safetensors(path), path);
  } catch (const UserError& e) {
    throw UserError(std::string(e.what()) + " (does tracks.image.model match the saved model?)");
  }
}

void ImageTrack::save(const std::string& dir) {
  if (comms_.world->rank() != 0) return;
  if (shared() && !reference_) return;
  fs::create_directories(dir + "/image_model");
  // A shared model is the AR track's, saved there (ar_model/). A LoRA policy's base is saved with
  // it (the DiT is small), so the checkpoint alone restores the policy.
  if (!shared()) models::save_safetensors(dir + "/image_model/model.safetensors", flow_->named_tensors());
  if (lora_dit_) models::write_peft_adapter(dir + "/image_model", lora_spec_, models::lora_state(*lora_dit_));
  // The KL reference is the starting policy; it is saved so a resume keeps the same one.
  if (reference_) models::save_safetensors(dir + "/image_model/reference.safetensors", reference_->named_tensors());
}

void ImageTrack::check_lora_base(const std::string& checkpoint_base) {
  const auto& p = config_.tracks.image.pretrain;
  const std::string weights = p.path ? *p.path + "/model.safetensors" : "";
  if (weights.empty() || !fs::exists(weights)) return;  // the checkpoint's base is the only one
  const auto saved = models::load_safetensors(checkpoint_base);
  for (const auto& [name, t] : flow_->named_tensors()) {
    const auto it = saved.find(name);
    if (it == saved.end() || !torch::equal(it->second.to(t.device(), t.scalar_type()), t))
      throw UserError(checkpoint_base + ": the checkpoint's image base differs from " + weights + " (tensor " + name +
                      "), the pretrained base this run loads: its adapters were trained on another base. Point "
                      "tracks.image.pretrain.path at the weights that run started from, or start a new run");
  }
}

void ImageTrack::load(const std::string& dir) {
  const std::string adapters = dir + "/" + kImageAdapterFile;
  if (!shared() && !lora_dit_ && fs::exists(adapters))
    throw UserError(dir + ": holds LoRA adapters (" + kImageAdapterFile +
                    ") but tracks.image.lora.rank is 0; resume with the checkpoint's tracks.image.lora");
  if (lora_dit_) {
    if (!fs::exists(adapters))
      throw UserError(dir + ": holds no " + kImageAdapterFile + " (a checkpoint of full fine-tuning?) but " +
                      "tracks.image.lora.rank is " + std::to_string(config_.tracks.image.lora.rank) +
                      "; resume it without LoRA or start a new run");
    check_lora_base(dir + "/image_model/model.safetensors");
    models::load_lora_state(*lora_dit_, models::load_safetensors(adapters), adapters);
  }
  if (!shared()) load_weights(*flow_, dir + "/image_model/model.safetensors");
  if (reference_) load_weights(*reference_, dir + "/image_model/reference.safetensors");
}

}  // namespace tandem
