// `tandem ckpt info PATH` and `tandem ckpt export-hf PATH OUT`: inspect a checkpoint, and copy
// its AR policy out as a plain Hugging Face directory (config.json + safetensors [+ tokenizer]).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "apps/commands.h"
#include "common/error.h"
#include "common/json_file.h"
#include "common/write_file.h"
#include "core/config/config.h"
#include "core/policies/llama_policy.h"
#include "core/policies/text_policies.h"
#include "core/run/checkpoint.h"
#include "core/run/checkpoint_manifest.h"
#include "core/run/rank_runtime.h"
#include "core/tracks/lora_checkpoint.h"
#include "models/llama/config.h"
#include "models/llama/lora.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"

namespace fs = std::filesystem;

namespace tandem::app {

namespace {

// A checkpoint directory, or a run directory's latest checkpoint; refused when its manifest
// finds damage. Returns the directory and what verification found.
std::pair<std::string, Integrity> checked_checkpoint(const std::string& path) {
  std::string dir = path;
  if (fs::exists(fs::path(path) / "checkpoints")) {
    auto latest = CheckpointDir(path, 0).latest();
    if (!latest) throw UserError(path + ": run directory has no complete checkpoint");
    dir = *latest;
  } else if (!fs::is_directory(path)) {
    throw UserError(path + ": no such checkpoint or run directory");
  } else if (!fs::exists(fs::path(path) / CheckpointDir::kCompleteMarker)) {
    throw UserError(path + ": not a complete checkpoint (no " + CheckpointDir::kCompleteMarker + " marker)");
  }
  Integrity check = verify_manifest(dir);
  if (check.status == Integrity::Status::kDamaged)
    throw UserError(dir + ": damaged checkpoint: " + check.detail + "; do not load it (--resume auto skips it)");
  if (check.status == Integrity::Status::kUnverified)
    std::cerr << "tandem: warning: " << dir << ": not verified: " << check.detail << "\n";
  return {dir, check};
}

}  // namespace

int run_ckpt_info(const std::string& path) {
  const auto [dir, check] = checked_checkpoint(path);
  std::ifstream in(dir + "/trainer_state.json");
  if (!in) throw UserError(dir + ": no trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded()) throw UserError(dir + "/trainer_state.json: not valid JSON");
  // Every field this command reads is type-checked here, naming the file: a checkpoint without a
  // manifest (written by an older build) has nothing else that would catch a damaged field first.
  const auto wrong = [&](const std::string& field, const std::string& want) {
    throw UserError(dir + "/trainer_state.json: " + field + " must be " + want + ", got " +
                    (state.contains(field) ? std::string(state.at(field).type_name()) : "nothing") +
                    "; the checkpoint is damaged: use an older one or start the run again");
  };
  if (!state.is_object()) throw UserError(dir + "/trainer_state.json: not a JSON object");
  if (!state.contains("completed_steps") || !state.at("completed_steps").is_number_integer())
    wrong("completed_steps", "an integer");
  if (state.contains("tracks") && !state.at("tracks").is_object()) wrong("tracks", "an object");
  if (state.contains("libtorch") && !state.at("libtorch").is_string()) wrong("libtorch", "a string");
  const Config config = load_saved_config(dir + "/recipe.yaml");
  std::cout << "checkpoint: " << dir << "\n";
  std::cout << "integrity: " << (check.status == Integrity::Status::kIntact ? "ok, " : "unverified, ") << check.detail
            << "\n";
  std::cout << "completed steps: " << state.at("completed_steps").get<int64_t>() << " of " << config.run.steps << "\n";
  std::cout << "run: " << config.run.name << "  seed " << config.run.seed << "  dtype " << to_string(config.run.dtype)
            << "\n";
  if (config.tracks.ar.enabled) {
    // The architecture the run trained (resolved from hf_dir's config.json when it had one).
    const ArModelConfig& m = config.tracks.ar.model;
    std::cout << "ar model: arch " << to_string(m.arch) << (m.hf_dir ? "  from " + *m.hf_dir : std::string())
              << "\n  vocab " << m.vocab_size << "  hidden " << m.hidden_size << "  layers " << m.num_layers
              << "  heads " << m.num_heads << "/" << m.num_kv_heads << "  head_dim "
              << (m.head_dim ? *m.head_dim : m.hidden_size / m.num_heads) << "  ffn " << m.intermediate_size
              << "  context " << m.max_seq_len << "\n  rope_theta " << m.rope_theta << "  rope_scaling "
              << to_string(m.rope_scaling.type) << "  rms_eps " << m.rms_eps << "  tied "
              << (m.tie_embeddings ? "yes" : "no") << "  qkv_bias " << (m.qkv_bias ? "yes" : "no") << "  qk_norm "
              << (m.qk_norm ? "yes" : "no") << "  sliding_window "
              << (m.sliding_window ? std::to_string(*m.sliding_window) : std::string("none")) << "  block "
              << to_string(m.block) << "\n";
    if (!m.full_attention_layers.empty()) {
      std::cout << "  full_attention_layers";
      for (const int64_t l : m.full_attention_layers) std::cout << " " << l;
      std::cout << "  rope_local_theta " << (m.rope_local_theta ? std::to_string(*m.rope_local_theta) : "none") << "\n";
    }
  }
  if (state.contains("tracks"))
    for (const auto& [track, s] : state["tracks"].items()) std::cout << "track " << track << ": " << s.dump() << "\n";
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    int64_t tensors = 0, params = 0;
    std::set<std::string> dtypes;
    for (const auto& f : fs::directory_iterator(e.path())) {
      if (f.path().extension() != ".safetensors") continue;
      const auto info = models::read_safetensors_header(f.path().string());
      for (const auto& [name, t] : info.tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        ++tensors, params += n;
        dtypes.insert(t.dtype);
      }
    }
    std::string dt;
    for (const auto& d : dtypes) dt += (dt.empty() ? "" : ",") + d;
    std::cout << e.path().filename().string() << ": " << tensors << " tensors, " << params << " parameters"
              << (dt.empty() ? "" : " (" + dt + ")") << "\n";
  }
  return 0;
}

namespace {

torch::Dtype export_dtype(const std::string& name, const Config& config) {
  if (name.empty()) return compute_dtype(config.run.dtype);
  static const std::map<std::string, torch::Dtype> kNames{{"float32", torch::kFloat32},
                                                          {"bfloat16", torch::kBFloat16},
                                                          {"float16", torch::kFloat16},
                                                          {"float64", torch::kFloat64}};
  const auto it = kNames.find(name);
  if (it == kNames.end()) throw UserError("--dtype " + name + ": expected float32, bfloat16, float16 or float64");
  return it->second;
}

// OUT without trailing separators, so that the folder written first (OUT.partial) sits beside OUT:
// "out/" gave "out/.partial", inside the folder the last step removes before its rename.
fs::path export_target(const std::string& out) {
  fs::path o = fs::path(out).lexically_normal();
  if (!o.has_filename() && o.has_parent_path()) o = o.parent_path();
  if (o.empty() || o == "." || o == ".." || o == o.root_path())
    throw UserError(out + ": name a new directory to export into");
  return o;
}

fs::path partial_of(const fs::path& out) { return out.string() + ".partial"; }

// config.json with the write checked: an unchecked stream left a truncated file on a full disk
// that the export then renamed into place.
void write_config_json(const fs::path& file, const nlohmann::json& hf) {
  write_file_checked(file.string(), hf.dump(2) + "\n");
}

}  // namespace

namespace {

// A LoRA checkpoint: the peft adapter directory as it is, or (merge) the base with the adapters
// merged in, as a complete Hugging Face directory beside the base's own files.
int export_lora(const std::string& dir, const fs::path& out, const std::string& dtype_name, bool merge,
                const std::string& new_base) {
  Config config = load_saved_config(dir + "/recipe.yaml");
  if (!new_base.empty()) use_lora_base(config, dir, new_base);
  // peft applies an adapter to a transformers model, which the unified model has none of.
  if (const char* why = text_policy_spec(config.tracks.ar.model.arch).no_hf_export) throw UserError(dir + ": " + why);
  if (!merge && !dtype_name.empty())
    throw UserError("--dtype " + dtype_name +
                    ": an adapter export is peft's float32 directory as it is; --dtype "
                    "applies to --merge");
  const fs::path tmp = partial_of(out);  // an earlier export's leftover, if any, is replaced
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const fs::path adapter = fs::path(dir) / kAdapterDir;
  std::string base;
  if (!merge) {
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"}) fs::copy_file(adapter / f, tmp / f);
    const nlohmann::json id = read_base_identity(dir);
    base = id["source"] != "hf_dir" ? dir + "/" + kBaseDir : id.value("path", std::string());
    if (!new_base.empty()) {  // the adapters go with that base only when it is the one they were trained on
      check_base_identity(id, hf_dir_identity(new_base), "--base " + new_base);
      base = new_base;
      nlohmann::json ac = read_json_object((tmp / "adapter_config.json").string());
      ac["base_model_name_or_path"] = new_base;
      write_config_json(tmp / "adapter_config.json", ac);
    }
    models::read_safetensors_header((tmp / "adapter_model.safetensors").string());
  } else {
    // W + scale B A computed in float64 from the float32 weights, rounded to float32, then to --dtype.
    BuiltTextPolicy built = load_lora_checkpoint(dir, config, torch::kFloat32, &base);
    auto* policy = dynamic_cast<LlamaPolicy*>(built.policy.get());  // arch llama: checked above
    models::merge_lora(*policy->model());
    const torch::Dtype dtype = export_dtype(dtype_name, config);
    for (const auto& f : fs::directory_iterator(base)) {
      const std::string name = f.path().filename().string();
      if (!f.is_regular_file() || models::is_hf_weight_file(name)) continue;  // the base's weights, any format
      fs::copy_file(f.path(), tmp / name);
    }
    // The run's own files over the base's, as full fine-tuning's ar_model/ has them (its tokenizer,
    // its template, its stop ids as eos_token_id): the base's template files go first, as the run's
    // set is complete without them and transformers would read them before tokenizer_config.json.
    const fs::path run_files = fs::path(dir) / kBaseFilesDir;
    if (fs::is_directory(run_files)) {
      for (const char* name : {"chat_template.jinja", "chat_template.json"}) fs::remove(tmp / name);
      for (const auto& f : fs::directory_iterator(run_files))
        if (f.is_regular_file())
          fs::copy_file(f.path(), tmp / f.path().filename(), fs::copy_options::overwrite_existing);
    }
    std::map<std::string, torch::Tensor> weights = models::gather_hf_state(*policy->model());
    for (auto& [name, t] : weights) t = t.to(dtype);
    models::save_hf_weights(tmp.string(), weights);
    nlohmann::json hf = models::read_hf_config(tmp.string());
    models::set_hf_dtype(hf, dtype);
    write_config_json(tmp / "config.json", hf);
    for (const auto& f : fs::directory_iterator(tmp))
      if (f.path().extension() == ".safetensors") models::read_safetensors_header(f.path().string());
  }
  fs::remove_all(out);
  fs::rename(tmp, out);
  if (merge)
    std::cout << "exported " << dir << " (base " << base << " + adapters, merged) -> " << out.string() << "\n";
  else
    std::cout << "exported " << adapter.string() << " -> " << out.string() << " (peft adapter; its base: " << base
              << "; --merge writes a merged model)\n";
  return 0;
}

int export_hf(const std::string& path, const fs::path& out, const std::string& dtype_name, bool merge,
              const std::string& base) {
  const std::string dir = checked_checkpoint(path).first;
  if (fs::exists(out) && !fs::is_empty(out))
    throw UserError(out.string() + ": exists and is not empty; choose a new directory");
  if (fs::exists(fs::path(dir) / kAdapterDir)) return export_lora(dir, out, dtype_name, merge, base);
  if (!base.empty()) require_adapters_for_base(dir, base);
  if (merge)
    throw UserError(dir + ": --merge merges LoRA adapters, and this checkpoint has none (no " + kAdapterDir +
                    "/); export it without --merge");
  const fs::path model = fs::path(dir) / "ar_model";
  if (!fs::exists(model / "config.json")) throw UserError(dir + ": no AR policy (ar_model/config.json) to export");
  const Config config = load_saved_config(dir + "/recipe.yaml");
  if (const char* why = text_policy_spec(config.tracks.ar.model.arch).no_hf_export) throw UserError(dir + ": " + why);
  const torch::Dtype dtype = export_dtype(dtype_name, config);
  const fs::path tmp = partial_of(out);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // Everything but the weights as it is (config.json, tokenizer files, generation_config.json);
  // the weights converted to the dtype asked for. A checkpoint of a mixed-precision run holds the
  // float32 master, so a bfloat16 export is the master rounded once.
  for (const auto& f : fs::directory_iterator(model)) {
    const std::string name = f.path().filename().string();
    if (f.path().extension() == ".safetensors" || name == models::kHfIndexFile) continue;
    fs::copy_file(f.path(), tmp / name);
  }
  std::map<std::string, torch::Tensor> weights = models::load_hf_weights(model.string());
  for (auto& [name, t] : weights) t = t.to(dtype);
  models::save_hf_weights(tmp.string(), weights);
  nlohmann::json hf = models::read_hf_config(tmp.string());
  models::set_hf_dtype(hf, dtype);
  write_config_json(tmp / "config.json", hf);
  if (config.tracks.ar.tokenizer.kind == TokenizerKind::kHf && !fs::exists(tmp / "tokenizer.json") &&
      config.tracks.ar.tokenizer.path) {  // a checkpoint from before ar_model/ held the tokenizer
    fs::path tok = *config.tracks.ar.tokenizer.path;
    if (fs::is_directory(tok)) tok /= "tokenizer.json";
    if (fs::exists(tok)) fs::copy_file(tok, tmp / "tokenizer.json");
  }
  // Check the copy reads back before it takes the final name.
  for (const auto& f : fs::directory_iterator(tmp))
    if (f.path().extension() == ".safetensors") models::read_safetensors_header(f.path().string());
  fs::remove_all(out);
  fs::rename(tmp, out);
  std::cout << "exported " << model.string() << " -> " << out.string() << " (" << models::hf_dtype_name(dtype) << ")\n";
  if (config.tracks.ar.tokenizer.kind == TokenizerKind::kChar)
    std::cout << "note: the char tokenizer has no Hugging Face equivalent; its alphabet is in " << dir
              << "/recipe.yaml (ids: <pad>=0 <bos>=1 <eos>=2, then the alphabet in order)\n";
  return 0;
}

}  // namespace

int run_ckpt_export_hf(const std::string& path, const std::string& out, const std::string& dtype_name, bool merge,
                       const std::string& base) {
  const fs::path target = export_target(out);
  try {
    return export_hf(path, target, dtype_name, merge, base);
  } catch (const fs::filesystem_error& e) {  // an OUT that cannot be written: the user's to fix, exit 2
    throw UserError(out + ": the export could not be written: " + e.what() +
                    "; choose a directory you can write, on a disk with room");
  }
}

}  // namespace tandem::app
