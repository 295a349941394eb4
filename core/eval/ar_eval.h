// Held-out evaluation of the AR policy (the recipe's eval section): the same prompts and sampling
// seeds at every evaluation, so a curve of it shows what the policy learned, not which prompts it
// drew. Spread over the dp ranks of the group; the result does not depend on how many there are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/env/episode_runner.h"
#include "core/policies/prompt_format.h"
#include "core/policies/text_policy.h"
#include "core/rewards/reward_fn.h"
#include "core/run/metrics.h"
#include "core/tasks/prompt_source.h"
#include "parallel/communicator.h"

namespace tandem {

// Multi-turn evaluation (tracks.ar.env): each sample is an episode with the track's environment.
struct EpisodeEval {
  env::Environment* env = nullptr;
  const env::ConversationFormat* format = nullptr;
  env::EpisodeLimits limits;
  std::vector<std::string> stop;  // the environment's stop strings
  int64_t slots = 64;
};

class ArEvaluator {
 public:
  // The first eval.max_prompts prompts of eval.data (a dataset in file order; a synthetic task
  // from its own stream, seeded apart from training's), formatted as eval.data says.
  ArEvaluator(const Config& config, const models::Tokenizer& tokenizer);

  // Collective over `dp` (tp / cp peers of a rank call it with the same arguments and generate
  // together): dp rank r takes the prompts p with p % dp_size == r. Returns, unprefixed:
  // eval/reward_mean (over every sampled response), eval/pass@1_greedy, eval/pass@k for k = 1..n,
  // eval/prompts, eval/time_s. With `episodes` every response is an episode scored by its summed
  // step rewards (`reward` is not used), and eval/turns_mean (over the sampled episodes that did not
  // fail), eval/success (the sampled episodes' fraction at correct_at or more; a failed episode
  // never counts, whatever correct_at) and eval/failed (sampled episodes that failed) are added.
  MetricMap evaluate(TextPolicy& policy, rewards::RewardFn& reward, parallel::Communicator& dp,
                     const EpisodeEval* episodes = nullptr);

  int64_t prompt_count() const { return static_cast<int64_t>(prompts_.size()); }

 private:
  EvalConfig eval_;
  int64_t seed_ = 0;
  int64_t max_new_tokens_ = 0;
  double top_p_ = 1.0;
  int64_t top_k_ = 0;
  int64_t max_batch_ = 64, max_live_ = 256;  // tracks.ar.rollout's
  std::vector<std::string> stop_;            // tracks.ar.rollout.stop: held-out responses end where training's do
  int64_t vocab_limit_ = 0;                  // the ids a sample may take: the tokenizer's that the model has
  bool share_prompts_ = false;
  const models::Tokenizer& tokenizer_;
  std::unique_ptr<PromptFormat> format_;
  std::vector<tasks::Prompt> prompts_;
  int64_t evaluations_ = 0;  // names episodes apart across evaluations
};

}  // namespace tandem
