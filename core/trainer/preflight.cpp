// See preflight.h. Reads only headers and small files: the weights' tensor data is never loaded
// here, so the check costs about a second even for a full-size model.
#include "core/trainer/preflight.h"

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "common/error.h"
#include "core/config/model_dir.h"
#include "core/policies/llama_policy.h"
#include "core/policies/prompt_format.h"
#include "core/policies/text_policies.h"
#include "core/rewards/reward_factory.h"
#include "core/tasks/jsonl_dataset.h"
#include "core/tracks/ar_track.h"
#include "models/llama/weights.h"
#include "parallel/communicator.h"
#include "runtime/loaded_libraries.h"

namespace fs = std::filesystem;

namespace tandem {

namespace {

void check_device(const Config& c, std::vector<std::string>& done) {
  const bool gpu = torch::cuda::is_available() && torch::cuda::device_count() > 0;
  if (c.run.device == Device::kCuda && !gpu)
    throw UserError("run.device: cuda, but this process sees no usable GPU (" +
                    std::string(loaded_libraries("libtorch_cuda.so").empty()
                                    ? "this LibTorch is CPU-only"
                                    : "LibTorch has CUDA, but no CUDA driver or device is visible") +
                    "); set run.device: cpu (or auto) and parallel.backend: mpi");
  const bool cuda = c.run.device == Device::kCuda || (c.run.device == Device::kAuto && gpu);
  if (c.parallel.backend == Backend::kNccl) {
    if (!cuda)
      throw UserError("parallel.backend: nccl needs CUDA tensors, but the run is on the CPU (run.device " +
                      std::string(to_string(c.run.device)) + ", no usable GPU); use parallel.backend: mpi (or auto)");
    if (!parallel::nccl_available())
      throw UserError("parallel.backend: nccl, but this tandem was built without NCCL; use parallel.backend: mpi");
  }
  done.push_back(std::string("device: ") + (cuda ? "cuda" : "cpu") + ", backend " + to_string(c.parallel.backend));
}

// A directory the run creates later (on rank 0): here only that it can be. The nearest existing
// ancestor is a directory this process may write, and `dir` itself, when it exists, is one.
void check_creatable_dir(const std::string& key, const fs::path& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    throw UserError(key + ": " + dir.string() + " cannot be created: " + p.string() + " is not a directory");
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UserError(key + ": " + dir.string() + " exists and is not a directory");
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw UserError(key + ": " + dir.string() + " cannot be " + (p == fs::absolute(dir, ec) ? "written" : "created") +
                    ": " + p.string() + " is not writable");
}

void check_run_dir(const Config& c, std::vector<std::string>& done) {
  const fs::path run_dir = fs::path(c.run.out_dir) / c.run.name;
  if (c.run.name.empty()) throw UserError("run.name: must not be empty");
  for (const auto& part : run_dir)
    if (part.string().size() > 255)
      throw UserError((part.string() == c.run.name ? "run.name" : "run.out_dir") + std::string(": '") +
                      part.string().substr(0, 40) + "...' is " + std::to_string(part.string().size()) +
                      " bytes; a file name may have at most 255");
  if (run_dir.string().size() > 3900)
    throw UserError("run.out_dir: the run directory path is " + std::to_string(run_dir.string().size()) +
                    " bytes long; file systems take at most 4096 for a whole path (and checkpoints add more)");
  check_creatable_dir("run.out_dir", run_dir);
  std::error_code ec;
  done.push_back("run directory: " + run_dir.string() + (fs::exists(run_dir, ec) ? " (exists)" : " (can be created)"));
  // The image track's pretrained flow: written there when pretraining runs (read otherwise).
  const ImagePretrainConfig& p = c.tracks.image.pretrain;
  if (c.tracks.image.enabled && p.path && p.steps > 0 && !fs::exists(fs::path(*p.path) / "model.safetensors", ec)) {
    check_creatable_dir("tracks.image.pretrain.path", *p.path);
    done.push_back("pretrained flow directory: " + *p.path);
  }
}

// `data` (tracks.ar.data or eval.data, named by `key`): every line parses with its keys, every
// reference answer is usable by the reward, every prompt plus `new_tokens` fits max_seq_len.
void check_data(const Config& c, const ArDataConfig& data, const std::string& key, const PromptFormat& format,
                int64_t new_tokens, std::vector<std::string>& done) {
  const ArTrackConfig& ar = c.tracks.ar;
  if (data.task != "jsonl" || !data.path) return;
  const std::string& path = *data.path;
  const std::vector<tasks::Prompt> prompts = tasks::load_jsonl_prompts(path, data.prompt_key, data.answer_key);
  int64_t longest = 0;
  for (const tasks::Prompt& p : prompts) {
    const std::string where = path + ":" + std::to_string(p.id + 1);  // id = line - 1
    if (!data.answer_key.empty()) {
      const std::string why = rewards::reference_problem(ar.reward.kind, p.answer);
      if (!why.empty())
        throw UserError(where + ": " + why + " (key '" + data.answer_key + "', tracks.ar.reward.kind " +
                        ar.reward.kind + ")");
    }
    const auto n = static_cast<int64_t>(format.encode(p.text).size());
    if (n == 0)
      throw UserError(where +
                      ": the prompt encodes to no tokens (empty, with no chat template or BOS to open it); "
                      "fill it or remove the line");
    longest = std::max(longest, n);
    if (n + new_tokens > ar.model.max_seq_len)
      throw UserError(where + ": the prompt is " + std::to_string(n) + " tokens" +
                      (format.templated() ? " with the chat template" : "") + "; with " + std::to_string(new_tokens) +
                      " new tokens it exceeds tracks.ar.model.max_seq_len " + std::to_string(ar.model.max_seq_len) +
                      "; shorten it or raise max_seq_len");
  }
  done.push_back(key + ": " + path + ", " + std::to_string(prompts.size()) + " prompts, longest " +
                 std::to_string(longest) + " tokens, every reference answer usable by " + ar.reward.kind);
}

void check_ar(const Config& c, std::vector<std::string>& done) {
  const ArTrackConfig& ar = c.tracks.ar;
  if (ar.model.hf_dir && ar.model.arch == ArArch::kLlama) {
    models::check_hf_weights(*ar.model.hf_dir, llama_config(ar.model));
    done.push_back("model: " + *ar.model.hf_dir + " (config.json, every tensor's shape in the safetensors headers)");
  } else if (ar.model.hf_dir && !fs::is_directory(*ar.model.hf_dir)) {
    throw UserError("tracks.ar.model.hf_dir: " + *ar.model.hf_dir + ": no such directory");
  }
  const std::unique_ptr<models::Tokenizer> tokenizer = ar.tokenizer.kind == TokenizerKind::kChar
                                                           ? models::make_char_tokenizer(ar.tokenizer.alphabet)
                                                           : models::load_hf_tokenizer(*ar.tokenizer.path);
  check_tokenizer_fits(*tokenizer, ar.model.vocab_size,
                       "tracks.ar.tokenizer: " + (ar.tokenizer.path ? *ar.tokenizer.path : std::string("char")));
  const PromptFormat format(prompt_format_options(ar), *tokenizer);
  if (format.stop_ids().empty())
    throw UserError(
        "tracks.ar.tokenizer: no end-of-sequence token (tokenizer eos_token, chat template eos_token or "
        "the model's eos_token_id): every response would run to max_new_tokens; use a tokenizer with one");
  done.push_back("tokenizer: " + std::to_string(tokenizer->vocab_size()) + " ids; " + format.describe());
  check_data(c, ar.data, "data", format, ar.rollout.max_new_tokens, done);
  if (c.eval.enabled()) {
    ArTrackConfig held_out = ar;
    held_out.data = c.eval.data;
    const PromptFormat eval_format(prompt_format_options(held_out), *tokenizer);
    check_data(c, c.eval.data, "eval data", eval_format, c.eval.max_new_tokens.value_or(ar.rollout.max_new_tokens),
               done);
  }
  if (ar.rollout.replay_dir && !fs::is_directory(*ar.rollout.replay_dir))
    throw UserError("tracks.ar.rollout.replay_dir: " + *ar.rollout.replay_dir + " is not a directory");
}

}  // namespace

std::vector<std::string> preflight(const Config& config) {
  std::vector<std::string> done;
  check_device(config, done);
  check_run_dir(config, done);
  if (config.tracks.ar.enabled) check_ar(config, done);
  return done;
}

}  // namespace tandem
