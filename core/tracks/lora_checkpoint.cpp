// The identity check and the tp-1 load of a LoRA checkpoint.
#include "core/tracks/lora_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/json_file.h"
#include "common/regular_file.h"
#include "core/policies/llama_policy.h"
#include "core/policies/unified_policy.h"
#include "core/run/checkpoint_manifest.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"
#include "models/unified/weights.h"

namespace fs = std::filesystem;

namespace tandem {

nlohmann::json hf_dir_identity(const std::string& hf_dir) {
  // Exactly the files the loader reads (model.safetensors, else the index's shards, wherever the
  // index puts them): not a Mistral repo's unused consolidated.safetensors beside its shards.
  std::set<std::string> files;
  for (const auto& [name, entry] : models::read_hf_weight_headers(hf_dir))
    files.insert(fs::path(entry.file).lexically_relative(hf_dir).generic_string());
  std::string digests;
  for (const auto& f : files) digests += f + ":" + hex64(file_xxh64((fs::path(hf_dir) / f).string())) + ";";
  return {{"source", "hf_dir"}, {"path", hf_dir}, {"weights_xxh64", hex64(xxh64(digests.data(), digests.size()))}};
}

nlohmann::json base_identity(const ArTrackConfig& ar) {
  return ar.model.hf_dir ? hf_dir_identity(*ar.model.hf_dir) : nlohmann::json{{"source", kBaseDir}};
}

void check_base_identity(const nlohmann::json& saved, const nlohmann::json& now, const std::string& what) {
  if (saved.value("source", "") == now.value("source", "") &&
      saved.value("weights_xxh64", "") == now.value("weights_xxh64", ""))
    return;
  throw UserError(what + ": its adapters were trained on the base " + saved.dump() + ", but the base now is " +
                  now.dump() +
                  " (tracks.ar.model.hf_dir); adapters only fit the base they were trained on: use that base, or "
                  "start a new run");
}

nlohmann::json read_base_identity(const std::string& checkpoint) {
  const std::string file = checkpoint + "/" + kAdapterDir + "/" + kBaseIdentityFile;
  require_regular_file(file, "the LoRA base identity ");
  nlohmann::json j = read_json_object(file, "use another checkpoint");
  if (!j.contains("source") || !j["source"].is_string())
    throw UserError(file + ": damaged (no \"source\" string, which a checkpoint writes); use another checkpoint");
  return j;
}

void require_adapters_for_base(const std::string& dir, const std::string& base) {
  if (!fs::exists(fs::path(dir) / kAdapterDir))
    throw UserError("--base " + base + ": " + dir + " holds no LoRA adapters (" + kAdapterDir +
                    "/); --base names the base model of a LoRA checkpoint");
}

void use_lora_base(Config& config, const std::string& dir, const std::string& base) {
  const std::string what = "--base " + base + ": ";
  require_adapters_for_base(dir, base);
  if (read_base_identity(dir)["source"] != "hf_dir")
    throw UserError(what + dir + " holds its base itself (" + kBaseDir +
                    "/); --base is for a base read from a Hugging Face directory");
  if (!fs::is_directory(base)) throw UserError(what + "no such directory");
  ArTrackConfig& ar = config.tracks.ar;
  if (ar.tokenizer.path && ar.model.hf_dir && *ar.tokenizer.path == *ar.model.hf_dir) ar.tokenizer.path = base;
  ar.model.hf_dir = base;
}

BuiltTextPolicy load_lora_checkpoint(const std::string& dir, const Config& config, torch::Dtype dtype,
                                     std::string* base_dir) {
  const ArTrackConfig& ar = config.tracks.ar;
  if (!ar.lora.enabled()) throw UserError(dir + ": its recipe has no tracks.ar.lora; it holds no adapters");
  const nlohmann::json saved = read_base_identity(dir);
  std::string base = dir + "/" + kBaseDir;
  if (saved["source"] == "hf_dir") {
    if (!ar.model.hf_dir) throw UserError(dir + "/recipe.yaml: names no tracks.ar.model.hf_dir for the LoRA base");
    base = *ar.model.hf_dir;
    if (!fs::is_directory(base))
      throw UserError(dir + ": its LoRA base " + base +
                      " is gone; put the base model back at that path, or name where it is now with --base DIR");
    check_base_identity(saved, hf_dir_identity(base), dir);
  } else if (!fs::is_directory(base)) {
    throw UserError(dir + ": no " + kBaseDir + "/ (the LoRA base this checkpoint holds); the checkpoint is damaged");
  }
  const models::LoraSpec spec = lora_spec(ar.lora);
  const std::string adapter = dir + "/" + kAdapterDir;
  if (base_dir) *base_dir = base;
  nlohmann::json info{{"base_model_name_or_path", ar.model.hf_dir ? nlohmann::json(*ar.model.hf_dir) : nullptr}};
  const auto adapt = [&](auto& model) {
    models::attach_lora(*model, spec, 0);  // the factors are the checkpoint's
    models::load_lora_state(*model, models::read_peft_weights(adapter), adapter);
  };
  if (ar.model.arch == ArArch::kUnified) {
    models::UnifiedModel model = models::load_unified(base, dtype);
    adapt(model);
    return {std::make_unique<UnifiedTextPolicy>(model, spec, info), model};
  }
  models::LlamaForCausalLM model = models::load_llama(base, {}, dtype);
  adapt(model);
  return {std::make_unique<LlamaPolicy>(model, models::LogProbOptions{}, spec, info), models::UnifiedModel{nullptr}};
}

}  // namespace tandem
