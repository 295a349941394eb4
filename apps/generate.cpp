// `tandem generate --checkpoint PATH --prompt TEXT...`: samples from a trained AR policy on one
// process (tp 1), with the recipe's sampling settings unless flags override them.
#include <filesystem>
#include <iostream>

#include "apps/commands.h"
#include "core/checkpoint.h"
#include "core/config.h"
#include "core/error.h"
#include "core/llama_policy.h"
#include "models/llama/sampler.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"
#include "models/tokenizer.h"

namespace tandem::app {

int run_generate(const GenerateArgs& a) {
  // A run directory means its newest intact checkpoint.
  const bool run_dir = std::filesystem::exists(std::filesystem::path(a.checkpoint) / "checkpoints");
  const CheckpointDir::Choice choice =
      run_dir ? CheckpointDir(a.checkpoint, 0).newest_intact() : CheckpointDir::resolve("", a.checkpoint);
  for (const auto& w : choice.warnings) std::cerr << "tandem: warning: " << w << "\n";
  const auto& dir = choice.path;
  if (!dir) throw UserError(a.checkpoint + ": no complete checkpoint");
  const Config config = load_config(*dir + "/recipe.yaml", {});
  const ArTrackConfig& ar = config.tracks.ar;
  if (!ar.enabled) throw UserError(*dir + ": this run has no AR policy");
  if (a.prompts.empty()) throw UserError("give at least one --prompt");
  std::unique_ptr<models::Tokenizer> tok = ar.tokenizer.kind == TokenizerKind::kChar
                                               ? models::make_char_tokenizer(ar.tokenizer.alphabet)
                                               : models::load_hf_tokenizer(*ar.tokenizer.path);
  models::LlamaForCausalLM model = models::load_llama(*dir + "/ar_model", {}, torch::kFloat32);
  models::SamplingParams sp;
  sp.temperature = a.temperature >= 0 ? a.temperature : ar.rollout.temperature;
  sp.top_p = ar.rollout.top_p;
  sp.top_k = ar.rollout.top_k;
  sp.max_new_tokens = a.max_new_tokens > 0 ? a.max_new_tokens : ar.rollout.max_new_tokens;
  sp.vocab_limit = tok->vocab_size();
  if (auto eos = tok->eos_id()) sp.stop_ids.push_back(*eos);
  std::vector<models::GenerationRequest> requests;
  for (size_t i = 0; i < a.prompts.size(); ++i)
    for (int64_t k = 0; k < a.samples; ++k) {
      std::vector<int64_t> ids;
      if (auto bos = tok->bos_id()) ids.push_back(*bos);
      const auto body = tok->encode(a.prompts[i]);
      ids.insert(ids.end(), body.begin(), body.end());
      requests.push_back({ids, models::sample_seed(a.seed, 0, static_cast<int64_t>(i), k)});
    }
  const auto out = models::generate(*model, requests, sp);
  for (size_t r = 0; r < out.size(); ++r) {
    double logp = 0;
    for (double x : out[r].logp) logp += x;
    std::cout << a.prompts[r / a.samples] << " -> " << tok->decode(out[r].tokens, true) << "    (logp " << logp
              << (out[r].stopped ? "" : ", cut at max_new_tokens") << ")\n";
  }
  return 0;
}

}  // namespace tandem::app
