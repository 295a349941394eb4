// make_episode_setup: the environment (shared by tp / cp peers), the conversation format, the caps.
#include "core/tracks/episode_setup.h"

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "core/env/builtin_envs.h"
#include "core/env/env_process.h"
#include "core/env/shared_environment.h"

namespace tandem {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

EpisodeEval EpisodeSetup::eval(int64_t slots) const {
  EpisodeEval e;
  e.env = env.get();
  e.format = conversation.get();
  e.limits = limits;
  e.stop = env->hello().stop;
  e.slots = slots;
  return e;
}

EpisodeSetup make_episode_setup(const Config& config, const PromptFormat& format, const models::Tokenizer& tokenizer,
                                const std::vector<parallel::Communicator*>& peers) {
  const ArTrackConfig& ar = config.tracks.ar;
  const ArEnvConfig& e = ar.env;
  if (!format.templated())
    throw UserError("tracks.ar.env.name " + e.name +
                    ": episodes are rendered by the model's chat template, and this tokenizer has none "
                    "(set tracks.ar.data.chat_template to a Jinja file)");
  // Under tp / cp the model's peers generate together: one of them talks to the environment and
  // shares its answers (SharedEnvironment), so all of them see the same episodes.
  bool leader = true;
  for (auto* g : peers) leader = leader && g->rank() == 0;
  std::unique_ptr<env::Environment> inner;
  if (leader && e.name == "command")
    inner = std::make_unique<env::EnvProcess>(env::EnvProcessOptions{*e.command, e.timeout_s, true});
  else if (leader)
    inner = std::make_unique<env::InProcessEnv>(env::make_builtin_env(e.name));
  EpisodeSetup s;
  s.env = peers.empty() ? std::move(inner) : std::make_unique<env::SharedEnvironment>(std::move(inner), peers);
  const env::EnvHello& hello = s.env->hello();
  nlohmann::ordered_json tools = hello.tools.empty() ? nlohmann::ordered_json(nullptr) : hello.tools;
  s.conversation = std::make_unique<env::ConversationFormat>(
      env::ConversationFormat{format.chat_template(), &tokenizer, std::move(tools),
                              nlohmann::json::parse(format.template_kwargs()), format.template_origin()});
  s.limits.max_turns =
      e.max_turns > 0 ? static_cast<int>(std::min<int64_t>(e.max_turns, hello.max_turns)) : hello.max_turns;
  s.limits.max_turn_tokens = e.max_turn_tokens.value_or(ar.rollout.max_new_tokens);
  s.limits.max_tokens = e.max_tokens.value_or(ar.model.max_seq_len);
  std::vector<std::string> tool_names;
  for (const auto& t : hello.tools)
    tool_names.push_back(t.value("function", nlohmann::ordered_json::object()).value("name", "?"));
  spdlog::info("ar env: {} ({}), tools: {}; max_turns {}, stop strings: {}; {} tokens per turn, {} per episode",
               hello.name, e.name == "command" ? "'" + *e.command + "'" : "built in", joined(tool_names),
               s.limits.max_turns, joined(hello.stop), s.limits.max_turn_tokens, s.limits.max_tokens);
  return s;
}

}  // namespace tandem
