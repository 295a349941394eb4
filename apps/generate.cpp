// `tandem generate`: samples from an AR policy on one process (tp 1): a trained checkpoint
// (--checkpoint, with its recipe's tokenizer and sampling settings) or any Hugging Face Llama /
// Qwen2 directory (--model, with a tokenizer.json and the recipe defaults for sampling). Flags
// override the sampling settings; --temperature 0 is greedy.
#include <filesystem>
#include <iostream>

#include "apps/commands.h"
#include "common/error.h"
#include "core/checkpoint.h"
#include "core/config.h"
#include "core/llama_policy.h"
#include "models/llama/sampler.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"
#include "models/tokenizer.h"

namespace fs = std::filesystem;

namespace tandem::app {

namespace {

struct Policy {
  std::unique_ptr<models::Tokenizer> tokenizer;
  models::LlamaForCausalLM model{nullptr};
  ArRolloutConfig rollout;  // sampling settings before the flags
};

Policy from_checkpoint(const std::string& path) {
  // A run directory means its newest intact checkpoint.
  const bool run_dir = fs::exists(fs::path(path) / "checkpoints");
  const CheckpointDir::Choice choice = run_dir ? CheckpointDir(path, 0).newest_intact() : CheckpointDir::resolve("", path);
  for (const auto& w : choice.warnings) std::cerr << "tandem: warning: " << w << "\n";
  if (!choice.path) throw UserError(path + ": no complete checkpoint");
  const std::string& dir = *choice.path;
  const Config config = load_config(dir + "/recipe.yaml", {});
  const ArTrackConfig& ar = config.tracks.ar;
  if (!ar.enabled) throw UserError(dir + ": this run has no AR policy");
  Policy p;
  p.tokenizer = ar.tokenizer.kind == TokenizerKind::kChar ? models::make_char_tokenizer(ar.tokenizer.alphabet)
                                                          : models::load_hf_tokenizer(*ar.tokenizer.path);
  p.model = models::load_llama(dir + "/ar_model", {}, torch::kFloat32);
  p.rollout = ar.rollout;
  return p;
}

Policy from_hf_dir(const std::string& dir, const std::string& tokenizer) {
  if (!fs::is_directory(dir))
    throw UserError("--model " + dir + ": no such directory (a Hugging Face model directory: config.json + safetensors)");
  std::string tok = tokenizer;
  if (tok.empty()) {
    if (!fs::exists(fs::path(dir) / "tokenizer.json"))
      throw UserError("--model " + dir + ": no tokenizer.json in it; give --tokenizer FILE");
    tok = dir;
  }
  Policy p;
  p.tokenizer = models::load_hf_tokenizer(tok);
  p.model = models::load_llama(dir, {}, torch::kFloat32);
  return p;  // rollout: the recipe's defaults
}

}  // namespace

int run_generate(const GenerateArgs& a) {
  if (a.checkpoint.empty() == a.model.empty())
    throw UserError("give exactly one of --checkpoint (a run or checkpoint directory) or --model (a Hugging Face "
                    "model directory)");
  if (a.prompts.empty()) throw UserError("give at least one --prompt");
  Policy p = a.model.empty() ? from_checkpoint(a.checkpoint) : from_hf_dir(a.model, a.tokenizer);
  const models::Tokenizer& tok = *p.tokenizer;
  const int64_t model_vocab = p.model->config().vocab_size;
  models::SamplingParams sp;
  sp.temperature = a.temperature >= 0 ? a.temperature : p.rollout.temperature;
  sp.top_p = p.rollout.top_p;
  sp.top_k = p.rollout.top_k;
  sp.max_new_tokens = a.max_new_tokens > 0 ? a.max_new_tokens : p.rollout.max_new_tokens;
  // Ids past the tokenizer (padded embedding rows) are never sampled, nor ids past the model.
  sp.vocab_limit = std::min(tok.vocab_size(), model_vocab);
  if (auto eos = tok.eos_id()) sp.stop_ids.push_back(*eos);
  std::vector<models::GenerationRequest> requests;
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    std::vector<int64_t> ids;
    if (auto bos = tok.bos_id()) ids.push_back(*bos);
    const auto body = tok.encode(a.prompts[i]);
    ids.insert(ids.end(), body.begin(), body.end());
    for (const int64_t id : ids)
      if (id >= model_vocab)
        throw UserError("--prompt '" + a.prompts[i] + "': token id " + std::to_string(id) +
                        " is outside the model's vocabulary of " + std::to_string(model_vocab) +
                        " ids; the tokenizer does not belong to this model");
    for (int64_t k = 0; k < a.samples; ++k)
      requests.push_back({ids, models::sample_seed(a.seed, 0, static_cast<int64_t>(i), k)});
  }
  const auto out = models::generate(*p.model, requests, sp);
  for (size_t r = 0; r < out.size(); ++r) {
    double logp = 0;
    for (double x : out[r].logp) logp += x;
    std::cout << a.prompts[r / a.samples] << " -> " << tok.decode(out[r].tokens, true) << "    (logp " << logp
              << (out[r].stopped ? "" : ", cut at max_new_tokens") << ")\n";
  }
  return 0;
}

}  // namespace tandem::app
