// The AR track's persistence: its part of a checkpoint (the policy as a complete Hugging Face
// directory, the KL reference, the data cursor) and the rollout dumps and their replay.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/error.h"
#include "common/regular_file.h"
#include "common/write_file.h"
#include "core/run/checkpoint.h"
#include "core/tracks/ar_track.h"
#include "core/tracks/lora_checkpoint.h"

namespace tandem {

namespace {

// Named by the step the rollout trains, counted as checkpoints count (step index 0 -> step_000001).
std::string dump_path(const std::string& dir, int64_t step, int64_t dp_rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/step_%06lld.dp%lld.bin", static_cast<long long>(step + 1),
                static_cast<long long>(dp_rank));
  return dir + buf;
}

}  // namespace

std::vector<ArSample> ArTrack::replay(int64_t step) {
  // Every rank reads the whole step and keeps its groups, so a dump replays at any dp.
  const std::string dir = *config_.tracks.ar.rollout.replay_dir;
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "step_%06lld.", static_cast<long long>(step + 1));  // as dump_path
  std::vector<ArSample> out;
  bool found = false;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
    found = true;
    const std::string file = e.path().string();
    require_regular_file(file, "the rollout dump ");
    std::ifstream in(e.path(), std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<ArSample> samples;
    try {
      samples = deserialize_samples(bytes.data(), bytes.size());
    } catch (const std::exception& err) {
      throw UserError(file + ": damaged rollout dump (" + err.what() + "); dump the step again");
    }
    // Every value a dump holds is checked against this run before it reaches the model.
    const int64_t vocab = policy_vocab_size();
    for (auto& s : samples) {
      const std::string where = file + ": sample " + std::to_string(s.index) + ": ";
      for (const int64_t t : s.tokens)
        if (t < 0 || t >= vocab)
          throw UserError(where + "token id " + std::to_string(t) + " is outside the model's vocabulary of " +
                          std::to_string(vocab) + " (a dump of another model, or damaged)");
      if (s.length() > policy_->max_seq_len())
        throw UserError(where + std::to_string(s.length()) + " tokens exceed tracks.ar.model.max_seq_len " +
                        std::to_string(policy_->max_seq_len()));
      if (s.group_id < 0 || s.group_id >= ar_prompts_per_step() || s.index < 0)
        throw UserError(where + "group " + std::to_string(s.group_id) + " is outside this step's " +
                        std::to_string(ar_prompts_per_step()) + " prompts (a dump of another recipe, or damaged)");
      bool finite = std::isfinite(s.reward) && std::isfinite(s.advantage);
      for (const double x : s.rollout_logp) finite = finite && std::isfinite(x);
      if (!finite) throw UserError(where + "holds NaN or Inf (reward, advantage or log-prob); the dump is damaged");
    }
    for (auto& s : samples)
      if (s.group_id % dp_size_ == dp_rank_) out.push_back(std::move(s));
  }
  if (!found)
    throw UserError("tracks.ar.rollout.replay_dir: no dumped rollout for step " + std::to_string(step) + " in " + dir);
  return out;
}

void ArTrack::dump(int64_t step, const std::vector<ArSample>& samples) const {
  if (comms_.tp->rank() != 0 || comms_.cp->rank() != 0) return;  // tp / cp peers hold the same samples
  const std::string dir = config_.run.out_dir + "/" + config_.run.name + "/rollouts";
  std::filesystem::create_directories(dir);
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  const auto bytes = serialize_samples(ptrs);
  const std::string path = dump_path(dir, step, dp_rank_);
  write_file_checked(path + ".tmp", std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  std::filesystem::rename(path + ".tmp", path);
}

void ArTrack::save(const std::string& dir) {
  const bool writer = comms_.world->rank() == 0;
  // LoRA: the adapters, the base's identity, and the base only where no file holds it.
  const bool lora = policy_->has_adapters();
  const std::string model_dir = dir + "/" + (lora ? kBaseDir : "ar_model");
  if (lora) {
    policy_->save(dir + "/" + kAdapterDir, writer);
    if (writer) {
      const std::string file = dir + "/" + kAdapterDir + "/" + kBaseIdentityFile;
      write_file_checked(file, base_identity_.dump(2) + "\n");
    }
    if (config_.tracks.ar.model.hf_dir) {
      const ArTrackConfig& ar = config_.tracks.ar;
      if (!writer || !source_ || ar.tokenizer.kind != TokenizerKind::kHf) return;
      const std::string files = dir + "/" + kBaseFilesDir;  // config.json: the source's, completed
      std::filesystem::create_directories(files);
      write_file_checked(files + "/config.json", "{}\n");
      complete_hf_dir(files, hf_dir_companions(ar, *format_, *tokenizer_, &*source_));
      return;
    }
    policy_->save_base(model_dir, writer);
  } else {
    policy_->save(model_dir, writer);
    if (reference_) reference_->save(dir + "/ar_reference", writer);
  }
  if (!writer || !unified_.is_empty()) return;
  // ar_model/ (ar_base/) is a complete Hugging Face directory: export copies it, generate --model reads it.
  const ArTrackConfig& ar = config_.tracks.ar;
  if (ar.tokenizer.kind == TokenizerKind::kHf)
    complete_hf_dir(model_dir, hf_dir_companions(ar, *format_, *tokenizer_, source_ ? &*source_ : nullptr));
}

void ArTrack::load(const std::string& dir) {
  if (policy_->has_adapters()) {
    const std::string adapter = dir + "/" + kAdapterDir;
    if (!std::filesystem::exists(adapter))
      throw UserError(dir + ": holds no ar_adapter/ (a checkpoint of full fine-tuning?) but tracks.ar.lora.rank is " +
                      std::to_string(config_.tracks.ar.lora.rank) + "; resume it without LoRA or start a new run");
    check_base_identity(read_base_identity(dir), base_identity_, "--resume " + dir);
    if (!config_.tracks.ar.model.hf_dir) policy_->load_base(dir + "/" + kBaseDir);
    policy_->load(adapter);
    return;
  }
  if (!std::filesystem::exists(dir + "/ar_model") && std::filesystem::exists(dir + "/ar_adapter"))
    throw UserError(dir +
                    ": holds LoRA adapters (ar_adapter/) but tracks.ar.lora.rank is 0; resume with the "
                    "checkpoint's tracks.ar.lora, or export it (tandem ckpt export-hf --merge) and start from that");
  policy_->load(dir + "/ar_model");
  if (!reference_) return;
  if (std::filesystem::exists(dir + "/ar_reference")) {
    reference_->load(dir + "/ar_reference");
  } else {  // checkpoints written before the reference was saved
    reference_ = policy_->frozen_copy();
    spdlog::warn("resume: {} has no ar_reference/; the KL reference is the checkpoint's policy", dir);
  }
}

nlohmann::json ArTrack::state() const { return {{"data_cursor", prompts_->cursor()}}; }

void ArTrack::restore(const nlohmann::json& state) {
  prompts_->restore(tasks::cursor_from_json(state.at("data_cursor")));
}

}  // namespace tandem
