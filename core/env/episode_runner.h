// The multi-turn rollout: every episode of a step driven at once through an environment and a
// turn generator. An episode's model turn goes to the environment as soon as it ends, its answer
// is rendered onto the episode and the sequence resumes on its KV cache, while the other
// sequences keep decoding. Caps are checked before each turn; failures end one episode, not the
// step.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/batch/sample.h"
#include "core/env/environment.h"
#include "core/env/episode.h"
#include "core/env/turn_generator.h"

namespace tandem::env {

struct EpisodeLimits {
  int max_turns = 1;            // model turns
  int64_t max_turn_tokens = 1;  // sampled tokens per turn
  int64_t max_tokens = 2;       // the whole sequence, prompt included
};

struct EpisodeSpec {
  std::string id;            // unique for the environment's life
  nlohmann::json row;        // the dataset row the environment gets
  uint64_t env_seed = 0;     // the environment's seed (one per GRPO group)
  uint64_t sample_seed = 0;  // the sampler's stream (one per episode)
};

enum class EpisodeEnd { kDone, kMaxTurns, kMaxTokens, kFailed };
const char* episode_end_name(EpisodeEnd end);  // "done", "max_turns", "max_tokens", "failed"

struct EpisodeOutcome {
  std::vector<int64_t> tokens;       // the whole episode
  std::vector<TokenSource> sources;  // per token
  std::vector<double> logp;          // per token: the rollout log-prob of model tokens, 0 elsewhere
  int64_t prompt_len = 0;
  double reward = 0;  // the sum of the step rewards
  int turns = 0;
  int tool_calls = 0;
  int parse_errors = 0;
  EpisodeEnd end = EpisodeEnd::kFailed;
  std::string failure;                                                // kFailed: why
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // the conversation, for samples/
};

// Runs `specs` to their ends. `system_prompt` (optional) opens every conversation. `end_of_turn`
// are the ids that end a model turn (the template's end-of-turn token among them): a turn ended
// by another stop (a stop string) or by its cap is closed by the template's tokens.
std::vector<EpisodeOutcome> run_episodes(Environment& env, TurnGenerator& generator, const ConversationFormat& format,
                                         const std::vector<EpisodeSpec>& specs, const EpisodeLimits& limits,
                                         const std::vector<int64_t>& end_of_turn,
                                         const std::optional<std::string>& system_prompt);

// An episode as a training sample: its tokens, the first prompt as the prompt, the model's tokens
// as the action tokens (loss mask 1) with their rollout log-probs, everything else masked, and the
// summed reward. group_id, index and policy_version are the caller's.
ArSample episode_sample(const EpisodeOutcome& out);

}  // namespace tandem::env
