// The AR track's multi-turn rollout (tracks.ar.env): a step's prompts become GRPO groups of
// episodes run through the environment on the policy's TurnSampler; an episode is one sample
// whose model tokens are trained and whose prompt, template and environment tokens are masked,
// with the sum of its step rewards as its reward. Failed episodes are left out, and counted.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "core/env/episode_runner.h"
#include "core/run/metric_reduction.h"
#include "core/tracks/ar_track.h"
#include "core/tracks/episode_setup.h"
#include "models/llama/sampler.h"
#include "runtime/timing.h"

namespace tandem {

void ArTrack::setup_env() {
  std::vector<parallel::Communicator*> peers;
  for (auto* g : {comms_.model_tp, comms_.model_cp})
    if (g != nullptr && g->size() > 1) peers.push_back(g);
  episodes_ = std::make_unique<EpisodeSetup>(make_episode_setup(config_, *format_, *tokenizer_, peers));
}

std::vector<ArSample> ArTrack::generate_episodes(int64_t step, const std::vector<tasks::ShardPrompt>& shard,
                                                 MetricMap& metrics) {
  const ArTrackConfig& ar = config_.tracks.ar;
  const ArEnvConfig& e = ar.env;
  const auto t0 = std::chrono::steady_clock::now();
  env::Environment& environment = *episodes_->env;
  models::SamplingParams sp = sampling_params();
  add_stop_strings(environment.hello().stop, *tokenizer_, sp);
  const env::EpisodeLimits& limits = episodes_->limits;

  std::vector<env::EpisodeSpec> specs;
  for (const auto& p : shard) {
    // One row and one environment seed per group (a stream of its own, apart from the samples').
    const nlohmann::json row{{"prompt", p.prompt.text}, {"answer", p.prompt.answer}};
    const uint64_t env_seed = models::sample_seed(config_.run.seed, step, p.slot, -1);
    for (int64_t k = 0; k < ar.rollout.group_size; ++k)
      specs.push_back({"s" + std::to_string(step) + "-p" + std::to_string(p.slot) + "-m" + std::to_string(k), row,
                       env_seed, models::sample_seed(config_.run.seed, step, p.slot, k)});
  }
  const int64_t restarts_before = environment.restarts();
  // A dp rank may have no prompts this step (prompts_per_step < dp): one slot, no episodes, and it
  // still joins the reductions below.
  auto generator = policy_->turn_generator(sp, std::clamp<int64_t>(static_cast<int64_t>(specs.size()), 1, e.slots),
                                           limits.max_tokens);
  const auto outcomes = env::run_episodes(environment, *generator, *episodes_->conversation, specs, limits,
                                          format_->stop_ids(), format_->system_prompt());
  metrics["time/generate_s"] += seconds_since(t0);

  std::vector<ArSample> samples;
  MetricReduction r;
  for (const char* key : {"episodes", "failed", "turns", "tool_calls", "parse_errors", "done", "max_turns",
                          "max_tokens", "episode_tokens", "restarts"})
    r.sum(key, 0);
  std::string first_failure;
  size_t n = 0;
  for (size_t j = 0; j < shard.size(); ++j)
    for (int64_t k = 0; k < ar.rollout.group_size; ++k, ++n) {
      const env::EpisodeOutcome& out = outcomes[n];
      r.sum("episodes", 1);
      if (out.end == env::EpisodeEnd::kFailed) {
        r.sum("failed", 1);
        if (first_failure.empty()) first_failure = specs[n].id + ": " + out.failure;
        continue;
      }
      r.sum(env::episode_end_name(out.end), 1);
      r.sum("turns", out.turns);
      r.sum("tool_calls", out.tool_calls);
      r.sum("parse_errors", out.parse_errors);
      r.sum("episode_tokens", static_cast<double>(out.tokens.size()));
      ArSample s = env::episode_sample(out);
      s.group_id = shard[j].slot;
      s.index = shard[j].slot * ar.rollout.group_size + k;
      s.policy_version = policy_version_;
      samples.push_back(std::move(s));
    }
  r.sum("restarts", static_cast<double>(environment.restarts() - restarts_before));
  r.reduce(*comms_.dp);
  const double total = r["episodes"], failed = r["failed"], kept = total - failed;
  if (!first_failure.empty()) spdlog::warn("ar env step {}: an episode failed: {}", step, first_failure);
  if (failed > e.max_failed_fraction * total)
    throw UserError(
        "tracks.ar.env: " + std::to_string(static_cast<int64_t>(failed)) + " of " +
        std::to_string(static_cast<int64_t>(total)) + " episodes of step " + std::to_string(step) +
        " failed, more than env.max_failed_fraction " + std::to_string(e.max_failed_fraction) +
        (first_failure.empty() ? std::string(" (on other ranks)") : "; the first on this rank: " + first_failure));
  metrics["env/episodes"] = total;
  metrics["env/failed"] = failed;
  metrics["env/restarts"] = r["restarts"];
  if (kept > 0) {
    metrics["env/turns_mean"] = r["turns"] / kept;
    metrics["env/tool_calls_mean"] = r["tool_calls"] / kept;
    metrics["env/parse_errors_mean"] = r["parse_errors"] / kept;
    metrics["env/episode_tokens_mean"] = r["episode_tokens"] / kept;
    metrics["env/ended_done"] = r["done"] / kept;
    metrics["env/ended_max_turns"] = r["max_turns"] / kept;
    metrics["env/ended_max_tokens"] = r["max_tokens"] / kept;
  }
  return samples;
}

}  // namespace tandem
