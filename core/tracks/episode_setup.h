// The environment side of tracks.ar.env, set up once per rank for training and `tandem eval`: the
// environment (built in, or a process; shared by tp / cp peers), the conversation format of the
// model's chat template with the environment's tools, and the episode caps.
#pragma once

#include <memory>
#include <vector>

#include "core/config/config.h"
#include "core/env/environment.h"
#include "core/env/episode.h"
#include "core/env/episode_runner.h"
#include "core/eval/ar_eval.h"
#include "core/policies/prompt_format.h"
#include "parallel/communicator.h"

namespace tandem {

struct EpisodeSetup {
  std::unique_ptr<env::Environment> env;
  std::unique_ptr<env::ConversationFormat> conversation;
  env::EpisodeLimits limits;
  EpisodeEval eval(int64_t slots) const;  // what ArEvaluator needs to play episodes
};

// Throws UserError for a prompt format without a chat template or an environment that cannot
// start. `peers`: the model's tp / cp groups of size > 1 (their rank 0 talks to the environment).
// Logs one line naming the environment, its tools and the caps.
EpisodeSetup make_episode_setup(const Config& config, const PromptFormat& format, const models::Tokenizer& tokenizer,
                                const std::vector<parallel::Communicator*>& peers);

}  // namespace tandem
