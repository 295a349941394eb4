// `tandem eval`: the recipe's held-out evaluation (its eval section) on its own, for a checkpoint
// (its recipe's model, tokenizer and prompt format) or a Hugging Face directory, under mpirun or
// alone. Prints the metrics as one JSON object. The same code as the evaluation inside `train`.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "common/error.h"
#include "core/config/config.h"
#include "core/eval/ar_eval.h"
#include "core/policies/text_policies.h"
#include "core/rewards/reward_factory.h"
#include "core/run/checkpoint.h"
#include "core/run/rank_runtime.h"
#include "core/tracks/episode_setup.h"
#include "core/tracks/lora_checkpoint.h"
#include "core/trainer/preflight.h"
#include "models/tokenizers/tokenizer.h"
#include "parallel/communicator.h"
#include "parallel/runtime.h"

namespace fs = std::filesystem;

namespace tandem::app {

namespace {

// The recipe to evaluate with, and where the weights are: a checkpoint's ar_model/ or an HF dir.
struct EvalSubject {
  Config config;
  std::string weights;
  bool from_checkpoint = false;
  bool lora = false;  // weights: a LoRA checkpoint (lora_checkpoint.h)
};

EvalSubject subject(const EvalArgs& a) {
  if (a.checkpoint.empty() == a.model.empty())
    throw UserError(
        "give exactly one of --checkpoint (a run or checkpoint directory) or --model (a Hugging Face "
        "model directory)");
  EvalSubject s;
  if (!a.model.empty()) {
    if (a.config_path.empty()) throw UserError("--model needs --config (the recipe whose eval section to run)");
    if (!a.base.empty())
      throw UserError("--base goes with --checkpoint (a LoRA checkpoint's base); --model is a whole model");
    std::vector<std::string> overrides = a.overrides;
    overrides.push_back("tracks.ar.model.hf_dir=" + a.model);
    s.config = load_config(a.config_path, overrides);
    s.weights = a.model;
    return s;
  }
  const bool run_dir = fs::exists(fs::path(a.checkpoint) / "checkpoints");
  const CheckpointDir::Choice choice = run_dir ? CheckpointDir(a.checkpoint, 0).newest_intact()
                                               : CheckpointDir::resolve("", a.checkpoint, "--checkpoint");
  for (const auto& w : choice.warnings) std::cerr << "tandem: warning: " << w << "\n";
  if (!choice.path) throw UserError(a.checkpoint + ": no complete checkpoint");
  const std::string recipe = *choice.path + "/recipe.yaml";
  const Config saved = load_saved_config(recipe);
  // --set applies to the saved recipe too (it was read only with --config and dropped without it).
  // --config's own model section is replaced below, so its hf_dir is not opened.
  s.config = !a.config_path.empty() ? load_config(a.config_path, a.overrides, /*resolve_model_dir=*/false)
             : a.overrides.empty()  ? saved
                                    : load_saved_config(recipe, a.overrides);
  // The checkpoint's model and tokenizer, whatever the eval recipe says about them.
  s.config.tracks.ar.model = saved.tracks.ar.model;
  s.config.tracks.ar.tokenizer = saved.tracks.ar.tokenizer;
  s.config.tracks.ar.lora = saved.tracks.ar.lora;
  if (!a.base.empty()) use_lora_base(s.config, *choice.path, a.base);
  if (fs::exists(fs::path(*choice.path) / kAdapterDir)) {  // LoRA: base + adapters, unmerged
    s.weights = *choice.path;
    s.lora = true;
    s.from_checkpoint = true;
    return s;
  }
  if (fs::exists(fs::path(*choice.path) / "ar_model" / "tokenizer.json"))
    s.config.tracks.ar.tokenizer.path = *choice.path + "/ar_model";
  s.weights = *choice.path + "/ar_model";
  s.from_checkpoint = true;
  return s;
}

}  // namespace

int run_eval(const EvalArgs& a, int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  try {
    EvalSubject s = subject(a);
    Config& c = s.config;
    if (!c.tracks.ar.enabled) throw UserError("eval: the recipe has no AR track to evaluate");
    if (!c.eval.enabled()) {
      // A recipe without periodic eval may have no eval section at all, and then eval.data is the
      // default task (reverse_digits): scoring those prompts with this run's reward printed a
      // normal line about the wrong task.
      const ArDataConfig& d = c.eval.data;
      if (d.task == ArDataConfig().task && !d.path && d.task != c.tracks.ar.data.task)
        throw UserError("eval: the recipe names no held-out prompts (eval.data is the default task " + d.task +
                        ", and tracks.ar.data is " + c.tracks.ar.data.task +
                        "); give them: --set eval.data.task=jsonl --set eval.data.path=FILE (or a built-in "
                        "task), or --config with an eval section");
      c.eval.at_start = true;  // asked to evaluate: the section's settings, once
      validate(c);             // the eval section's own checks, which validate skipped while it was off
    }
    const RankRuntime rt = setup_rank_runtime(c.run, mpi.local_rank(), mpi.local_size());
    const std::unique_ptr<models::Tokenizer> tokenizer =
        c.tracks.ar.tokenizer.kind == TokenizerKind::kChar ? models::make_char_tokenizer(c.tracks.ar.tokenizer.alphabet)
                                                           : models::load_hf_tokenizer(*c.tracks.ar.tokenizer.path);
    std::unique_ptr<TextPolicy> policy;
    if (s.lora)
      policy = load_lora_checkpoint(s.weights, c, rt.dtype).policy;
    else
      policy = text_policy_spec(c.tracks.ar.model.arch).load(s.weights, rt.dtype).policy;
    ArEvaluator evaluator(c, *tokenizer);
    const auto reward =
        rewards::make_reward(c.tracks.ar.reward.kind, c.tracks.ar.reward.command, c.tracks.ar.reward.timeout_s);
    auto world = parallel::make_mpi_communicator(MPI_COMM_WORLD, "eval", c.parallel.timeout_s);
    // tracks.ar.env: every response is an episode with the recipe's environment (one per rank).
    std::unique_ptr<PromptFormat> format;
    std::unique_ptr<EpisodeSetup> episodes;
    EpisodeEval episode_eval;
    if (c.tracks.ar.env.enabled()) {
      format = std::make_unique<PromptFormat>(prompt_format_options(c.tracks.ar), *tokenizer);
      episodes = std::make_unique<EpisodeSetup>(make_episode_setup(c, *format, *tokenizer, {}));
      episode_eval = episodes->eval(c.tracks.ar.env.slots);
    }
    torch::NoGradGuard no_grad;
    const MetricMap m = evaluator.evaluate(*policy, *reward, *world, episodes ? &episode_eval : nullptr);
    if (mpi.rank() == 0) {
      nlohmann::json out(m);
      out["source"] = s.weights;
      out["ranks"] = mpi.size();
      std::cout << out.dump() << "\n";
    }
    return 0;
  } catch (const UserError& e) {
    if (mpi.rank() == 0 || mpi.size() == 1) std::cerr << "tandem: error: " << e.what() << "\n";
    if (mpi.size() > 1) parallel::MpiRuntime::abort_job(2);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tandem: internal error (rank " << mpi.rank() << "): " << e.what() << "\n";
    if (mpi.size() > 1) parallel::MpiRuntime::abort_job(1);
    return 1;
  }
}

}  // namespace tandem::app
