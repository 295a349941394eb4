// `tandem generate`: samples from an AR policy on one process (tp 1): a trained checkpoint
// (--checkpoint, with its recipe's tokenizer and sampling settings) or any Hugging Face Llama /
// Qwen2 directory (--model, with a tokenizer.json and the recipe defaults for sampling). Flags
// override the sampling settings; --temperature 0 is greedy. A checkpoint of the unified model
// (tracks.ar.model.arch unified) writes text and, with --image-out, draws each prompt as well.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/commands.h"
#include "common/error.h"
#include "common/write_file.h"
#include "core/config/config.h"
#include "core/config/model_dir.h"
#include "core/io/image_io.h"
#include "core/policies/llama_policy.h"
#include "core/policies/prompt_format.h"
#include "core/policies/text_policies.h"
#include "core/policies/unified_policy.h"
#include "core/run/checkpoint.h"
#include "core/tracks/ar_track.h"
#include "core/tracks/lora_checkpoint.h"
#include "models/dit/sampler.h"
#include "models/llama/sampler.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"
#include "models/tokenizers/tokenizer.h"
#include "models/unified/flow.h"
#include "models/unified/weights.h"

namespace fs = std::filesystem;

namespace tandem::app {

namespace {

struct Policy {
  std::unique_ptr<models::Tokenizer> tokenizer;
  PromptFormatOptions format;  // chat template, system prompt, model stop ids before the flags
  std::unique_ptr<TextPolicy> policy;
  int64_t vocab_size = 0;
  models::UnifiedModel unified{nullptr};  // set for a unified-model checkpoint
  ArRolloutConfig rollout;                // sampling settings before the flags
  SamplerConfig image_sampler;
};

Policy from_checkpoint(const std::string& path, const std::string& base) {
  // A run directory means its newest intact checkpoint.
  const bool run_dir = fs::exists(fs::path(path) / "checkpoints");
  const CheckpointDir::Choice choice =
      run_dir ? CheckpointDir(path, 0).newest_intact() : CheckpointDir::resolve("", path, "--checkpoint");
  for (const auto& w : choice.warnings) std::cerr << "tandem: warning: " << w << "\n";
  if (!choice.path) throw UserError(path + ": no complete checkpoint");
  const std::string& dir = *choice.path;
  Config config = load_saved_config(dir + "/recipe.yaml");
  if (!base.empty()) use_lora_base(config, dir, base);
  const ArTrackConfig& ar = config.tracks.ar;
  if (!ar.enabled) throw UserError(dir + ": this run has no AR policy");
  Policy p;
  p.format = prompt_format_options(ar);
  if (ar.tokenizer.kind == TokenizerKind::kChar) {
    p.tokenizer = models::make_char_tokenizer(ar.tokenizer.alphabet);
  } else {
    // The checkpoint's own copy (a complete HF directory, the recipe's template file folded into
    // its tokenizer_config.json); checkpoints from before that kept only the recipe's path.
    const bool own = fs::exists(fs::path(dir) / "ar_model" / "tokenizer.json");
    p.format.tokenizer_path = own ? dir + "/ar_model" : *ar.tokenizer.path;
    if (own && p.format.chat_template != "none") p.format.chat_template = "auto";
    p.tokenizer = models::load_hf_tokenizer(*p.format.tokenizer_path);
  }
  p.image_sampler = config.tracks.image.sampler;  // LoRA too: the recipe's sampler, not the defaults
  if (fs::exists(fs::path(dir) / kAdapterDir)) {  // LoRA: the base with the adapters, unmerged
    BuiltTextPolicy built = load_lora_checkpoint(dir, config, torch::kFloat32);
    p.policy = std::move(built.policy);
    p.unified = built.unified;
    p.vocab_size = ar.model.vocab_size;
    p.rollout = ar.rollout;
    return p;
  }
  BuiltTextPolicy built = text_policy_spec(ar.model.arch).load(dir + "/ar_model", torch::kFloat32);
  p.policy = std::move(built.policy);
  p.unified = built.unified;
  p.vocab_size = ar.model.vocab_size;
  p.rollout = ar.rollout;
  return p;
}

Policy from_hf_dir(const std::string& dir, const std::string& tokenizer) {
  if (!fs::is_directory(dir))
    throw UserError("--model " + dir +
                    ": no such directory (a Hugging Face model directory: config.json + safetensors)");
  std::string tok = tokenizer;
  if (tok.empty()) {
    if (!fs::exists(fs::path(dir) / "tokenizer.json"))
      throw UserError("--model " + dir + ": no tokenizer.json in it; give --tokenizer FILE");
    tok = dir;
  }
  Policy p;
  p.tokenizer = models::load_hf_tokenizer(tok);
  const ModelDir source = read_model_dir(dir);
  p.format.tokenizer_path = tok;
  p.format.model_eos_ids = source.model.eos_token_ids;
  p.format.origin = "--chat-template";
  auto model = models::load_llama(dir, {}, torch::kFloat32);
  p.vocab_size = model->config().vocab_size;
  p.policy = std::make_unique<LlamaPolicy>(model);
  return p;  // rollout: the recipe's defaults
}

// Each prompt drawn a.samples times by the unified model's image head: Euler ODE with the
// recipe's image sampler settings, noise keyed by (seed, prompt, sample).
void draw(Policy& p, const std::vector<std::vector<int64_t>>& prompt_ids, const GenerateArgs& a) {
  models::UnifiedFlow flow(p.unified, prompt_ids);  // label i = prompt i
  std::vector<int64_t> labels;
  std::vector<models::NoiseKey> keys;
  for (int64_t k = 0; k < a.samples; ++k)
    for (size_t i = 0; i < prompt_ids.size(); ++i)
      labels.push_back(static_cast<int64_t>(i)), keys.push_back({a.seed, -3, static_cast<int64_t>(i), k});
  const SamplerConfig& s = p.image_sampler;
  const torch::Tensor images = models::sample_ode(flow, torch::tensor(labels, torch::kInt64), keys,
                                                  {s.eval_steps, s.shift, s.cfg});  // (S*P, C, H, W)
  const auto columns = static_cast<int64_t>(prompt_ids.size());
  if (fs::path(a.image_out).has_parent_path()) fs::create_directories(fs::path(a.image_out).parent_path());
  write_png_grid(a.image_out, images.to(torch::kFloat32), columns);
  nlohmann::json j{{"image", fs::path(a.image_out).filename().string()},
                   {"columns", columns},
                   {"rows", a.samples},
                   {"prompts", a.prompts}};
  const std::string json_path = fs::path(a.image_out).replace_extension(".json").string();
  write_file_checked(json_path, j.dump(2) + "\n");
  std::cout << "images: " << a.image_out << " (a column per prompt, " << a.samples << " row(s))\n";
}

}  // namespace

int run_generate(const GenerateArgs& a) {
  if (a.checkpoint.empty() == a.model.empty())
    throw UserError(
        "give exactly one of --checkpoint (a run or checkpoint directory) or --model (a Hugging Face "
        "model directory)");
  if (a.prompts.empty()) throw UserError("give at least one --prompt");
  // Bounded before anything is sized from them (a typo'd count must not allocate gigabytes first).
  constexpr int64_t kMaxRequests = 4096;
  if (a.samples < 1 || a.samples * static_cast<int64_t>(a.prompts.size()) > kMaxRequests)
    throw UserError("--samples " + std::to_string(a.samples) + " with " + std::to_string(a.prompts.size()) +
                    " prompt(s) asks for more than " + std::to_string(kMaxRequests) + " samples; lower it");
  if (!std::isfinite(a.temperature) || (a.temperature < 0 && a.temperature != -1))
    throw UserError("--temperature must be a finite number >= 0 (0 is greedy), got " + std::to_string(a.temperature));
  if (a.max_new_tokens < 0) throw UserError("--max-new-tokens must be >= 1");
  if (!a.model.empty() && !a.base.empty())
    throw UserError("--base goes with --checkpoint (a LoRA checkpoint's base); --model is a whole model");
  Policy p = a.model.empty() ? from_checkpoint(a.checkpoint, a.base) : from_hf_dir(a.model, a.tokenizer);
  const models::Tokenizer& tok = *p.tokenizer;
  if (!a.image_out.empty() && p.unified.is_empty())
    throw UserError(
        "--image-out: this policy only writes text; images need a checkpoint of the unified model "
        "(tracks.ar.model.arch: unified)");
  const int64_t model_vocab = p.vocab_size;
  if (!a.chat_template.empty()) p.format.chat_template = a.chat_template, p.format.origin = "--chat-template";
  if (a.chat_template == "none") p.format.system_prompt.reset();  // raw prompts: the recipe's system turn goes too
  if (a.chat_template == "none") p.format.template_kwargs.clear();
  if (a.system_prompt) p.format.system_prompt = a.system_prompt;
  const PromptFormat format(p.format, tok);
  models::SamplingParams sp;
  sp.temperature = a.temperature >= 0 ? a.temperature : p.rollout.temperature;
  sp.top_p = p.rollout.top_p;
  sp.top_k = p.rollout.top_k;
  sp.max_new_tokens = a.max_new_tokens > 0 ? a.max_new_tokens : p.rollout.max_new_tokens;
  // Ids past the tokenizer (padded embedding rows) are never sampled, nor ids past the model.
  sp.vocab_limit = std::min(tok.vocab_size(), model_vocab);
  sp.stop_ids = format.stop_ids();
  add_stop_strings(p.rollout.stop, tok, sp);  // the recipe's rollout.stop, as training and eval stop
  std::vector<models::GenerationRequest> requests;
  std::vector<std::vector<int64_t>> prompt_ids;
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    const std::vector<int64_t> ids = format.encode(a.prompts[i]);
    if (sp.max_new_tokens > p.policy->max_seq_len() - static_cast<int64_t>(ids.size()))  // no overflow
      throw UserError("--prompt '" + a.prompts[i].substr(0, 40) + "': " + std::to_string(ids.size()) +
                      " prompt tokens + " + std::to_string(sp.max_new_tokens) +
                      " new tokens exceed the model's context of " + std::to_string(p.policy->max_seq_len()) +
                      "; lower --max-new-tokens");
    for (const int64_t id : ids)
      if (id >= model_vocab)
        throw UserError("--prompt '" + a.prompts[i] + "': token id " + std::to_string(id) +
                        " is outside the model's vocabulary of " + std::to_string(model_vocab) +
                        " ids; the tokenizer does not belong to this model");
    prompt_ids.push_back(ids);
    for (int64_t k = 0; k < a.samples; ++k)
      requests.push_back({ids, models::sample_seed(a.seed, 0, static_cast<int64_t>(i), k)});
  }
  std::cerr << "generate: " << format.describe() << "\n";  // after every input check: errors stay one line
  const auto out = p.policy->generate(requests, sp);
  for (size_t r = 0; r < out.size(); ++r) {
    double logp = 0;
    for (double x : out[r].logp) logp += x;
    std::cout << a.prompts[r / a.samples] << " -> " << tok.decode(out[r].tokens, true) << "    (logp " << logp
              << (out[r].stopped ? "" : ", cut at max_new_tokens") << ")\n";
  }
  if (!a.image_out.empty()) {
    try {
      draw(p, prompt_ids, a);
    } catch (const std::filesystem::filesystem_error& e) {
      throw UserError("--image-out " + a.image_out + ": " + e.what());
    } catch (const std::runtime_error& e) {
      if (dynamic_cast<const UserError*>(&e)) throw;
      throw UserError("--image-out " + a.image_out + ": " + e.what());
    }
  }
  return 0;
}

}  // namespace tandem::app
