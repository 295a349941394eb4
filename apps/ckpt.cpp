// `tandem ckpt info PATH` and `tandem ckpt export-hf PATH OUT`: inspect a checkpoint, and copy
// its AR policy out as a plain Hugging Face directory (config.json + safetensors [+ tokenizer]).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "common/error.h"
#include "core/checkpoint.h"
#include "core/checkpoint_manifest.h"
#include "core/config.h"
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
  const Config config = load_config(dir + "/recipe.yaml", {});
  std::cout << "checkpoint: " << dir << "\n";
  std::cout << "integrity: "
            << (check.status == Integrity::Status::kIntact ? "ok, " : "unverified, ") << check.detail << "\n";
  std::cout << "completed steps: " << state.value("completed_steps", -1) << " of " << config.run.steps << "\n";
  std::cout << "run: " << config.run.name << "  seed " << config.run.seed << "  dtype " << to_string(config.run.dtype)
            << "\n";
  if (state.contains("tracks"))
    for (const auto& [track, s] : state["tracks"].items()) std::cout << "track " << track << ": " << s.dump() << "\n";
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    int64_t tensors = 0, params = 0;
    for (const auto& f : fs::directory_iterator(e.path())) {
      if (f.path().extension() != ".safetensors") continue;
      const auto info = models::read_safetensors_header(f.path().string());
      for (const auto& [name, t] : info.tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        ++tensors, params += n;
      }
    }
    std::cout << e.path().filename().string() << ": " << tensors << " tensors, " << params << " parameters\n";
  }
  return 0;
}

int run_ckpt_export_hf(const std::string& path, const std::string& out) {
  const std::string dir = checked_checkpoint(path).first;
  const fs::path model = fs::path(dir) / "ar_model";
  if (!fs::exists(model / "config.json")) throw UserError(dir + ": no AR policy (ar_model/config.json) to export");
  if (fs::exists(out) && !fs::is_empty(out)) throw UserError(out + ": exists and is not empty; choose a new directory");
  if (load_config(dir + "/recipe.yaml", {}).tracks.ar.model.arch == "unified")
    throw UserError(dir + ": the AR policy is the unified text + image model (model_type tandem_unified), which has "
                    "no Hugging Face equivalent; its ar_model/ (config.json + model.safetensors) is already the "
                    "portable form, and `tandem generate --checkpoint` samples from it");
  const fs::path tmp = fs::path(out).string() + ".partial";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const auto& f : fs::directory_iterator(model)) fs::copy_file(f.path(), tmp / f.path().filename());
  const Config config = load_config(dir + "/recipe.yaml", {});
  if (config.tracks.ar.tokenizer.kind == TokenizerKind::kHf && config.tracks.ar.tokenizer.path) {
    fs::path tok = *config.tracks.ar.tokenizer.path;
    if (fs::is_directory(tok)) tok /= "tokenizer.json";
    if (fs::exists(tok)) fs::copy_file(tok, tmp / "tokenizer.json");
  }
  // Check the copy reads back before it takes the final name.
  for (const auto& f : fs::directory_iterator(tmp))
    if (f.path().extension() == ".safetensors") models::read_safetensors_header(f.path().string());
  fs::remove_all(out);
  fs::rename(tmp, out);
  std::cout << "exported " << model.string() << " -> " << out << "\n";
  if (config.tracks.ar.tokenizer.kind == TokenizerKind::kChar)
    std::cout << "note: the char tokenizer has no Hugging Face equivalent; its alphabet is in " << dir
              << "/recipe.yaml (ids: <pad>=0 <bos>=1 <eos>=2, then the alphabet in order)\n";
  return 0;
}

}  // namespace tandem::app
