// run_episodes: one loop over environment events and generator steps until every episode ended.
#include "core/env/episode_runner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include "common/error.h"
#include "core/env/tool_calls.h"

namespace tandem::env {

namespace {

using ojson = nlohmann::ordered_json;

struct State {
  std::optional<Episode> episode;
  EpisodeOutcome out;
  int64_t fed = 0;  // episode tokens the generator holds
  bool started = false;
  bool live = false;  // its turn is being generated (it can be finished only once paused)
  bool over = false;
};

}  // namespace

const char* episode_end_name(EpisodeEnd end) {
  switch (end) {
    case EpisodeEnd::kDone:
      return "done";
    case EpisodeEnd::kMaxTurns:
      return "max_turns";
    case EpisodeEnd::kMaxTokens:
      return "max_tokens";
    case EpisodeEnd::kFailed:
      return "failed";
  }
  return "failed";
}

std::vector<EpisodeOutcome> run_episodes(Environment& env, TurnGenerator& generator, const ConversationFormat& format,
                                         const std::vector<EpisodeSpec>& specs, const EpisodeLimits& limits,
                                         const std::vector<int64_t>& end_of_turn,
                                         const std::optional<std::string>& system_prompt) {
  std::vector<State> states(specs.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!index.emplace(specs[i].id, i).second) throw std::invalid_argument("run_episodes: episode ids repeat");
    env.reset(specs[i].id, specs[i].row, specs[i].env_seed);
  }
  size_t remaining = specs.size();
  const auto end = [&](size_t i, EpisodeEnd how, std::string why = "") {
    State& st = states[i];
    if (st.started && !st.live) generator.finish(static_cast<int64_t>(i));  // else when its turn ends
    env.close(specs[i].id);
    st.over = true;
    st.out.end = how;
    st.out.failure = std::move(why);
    --remaining;
  };
  // Starts or resumes the sequence with what the episode gained since the generator saw it.
  const auto go_on = [&](size_t i) {
    State& st = states[i];
    const auto& tokens = st.episode->tokens();
    const int64_t room = limits.max_tokens - static_cast<int64_t>(tokens.size());
    if (room < 1) return end(i, EpisodeEnd::kMaxTokens);
    const int64_t max_new = std::min(limits.max_turn_tokens, room);
    if (!st.started) {
      generator.start(static_cast<int64_t>(i), tokens, specs[i].sample_seed, max_new);
      st.started = true;
    } else {
      generator.resume(static_cast<int64_t>(i), std::vector<int64_t>(tokens.begin() + st.fed, tokens.end()), max_new);
    }
    st.fed = static_cast<int64_t>(tokens.size());
    st.live = true;
  };

  while (remaining > 0) {
    const bool busy = generator.busy();
    if (!busy && env.pending() == 0)
      throw std::logic_error("run_episodes: " + std::to_string(remaining) + " episodes wait on nothing");
    for (EnvEvent& ev : env.poll(std::chrono::milliseconds(busy ? 0 : 50))) {
      const size_t i = index.at(ev.episode);
      State& st = states[i];
      if (st.over) continue;
      if (ev.failure) {
        end(i, EpisodeEnd::kFailed, *ev.failure);
        continue;
      }
      if (ev.answer.error) {
        end(i, EpisodeEnd::kFailed, "the environment answered an error: " + *ev.answer.error);
        continue;
      }
      try {
        if (ev.reset) {
          ojson first = ojson::array();
          // As demonstration_sample lays a warm-start episode out: the recipe's system prompt
          // unless the environment opens with its own (two would render one mid-prompt).
          const bool env_system = !ev.answer.messages.empty() && ev.answer.messages[0]["role"] == "system";
          if (system_prompt && !env_system) first.push_back(ojson{{"role", "system"}, {"content", *system_prompt}});
          for (auto& m : ev.answer.messages) first.push_back(std::move(m));
          st.episode.emplace(format, std::move(first), limits.max_tokens);
          st.out.prompt_len = st.episode->prompt_tokens();
          if (st.out.prompt_len >= limits.max_tokens) {
            end(i, EpisodeEnd::kFailed,
                "its first messages take " + std::to_string(st.out.prompt_len) + " tokens, env.max_tokens is " +
                    std::to_string(limits.max_tokens));
            continue;
          }
          go_on(i);
          continue;
        }
        st.out.reward += ev.answer.reward;
        if (ev.answer.done) {
          end(i, EpisodeEnd::kDone);
        } else if (st.episode->turns() >= limits.max_turns) {
          end(i, EpisodeEnd::kMaxTurns);
        } else if (!st.episode->add_observation(ev.answer.messages)) {
          end(i, EpisodeEnd::kMaxTokens);
        } else {
          go_on(i);
        }
      } catch (const NotAppendOnly& e) {
        end(i, EpisodeEnd::kFailed, e.what());
      } catch (const UserError& e) {  // a template that cannot render the environment's messages
        end(i, EpisodeEnd::kFailed, e.what());
      }
    }
    if (!generator.busy()) continue;
    for (GeneratedTurn& turn : generator.step()) {
      const auto i = static_cast<size_t>(turn.id);
      State& st = states[i];
      st.live = false;
      if (st.over) {  // it failed while generating (its environment process was restarted)
        generator.finish(turn.id);
        continue;
      }
      const bool end_of_turn_id = turn.stopped && !turn.tokens.empty() &&
                                  std::count(end_of_turn.begin(), end_of_turn.end(), turn.tokens.back()) > 0;
      std::string text;
      try {
        text = st.episode->add_model_turn(turn.tokens, end_of_turn_id);
      } catch (const std::exception& e) {
        end(i, EpisodeEnd::kFailed, e.what());
        continue;
      }
      const auto [b, e] = st.episode->turn_spans().back();
      st.out.logp.resize(st.episode->tokens().size(), 0.0);
      std::copy(turn.logp.begin(), turn.logp.end(), st.out.logp.begin() + b);
      st.fed = e;
      ParsedToolCalls parsed = parse_tool_calls(text);
      st.out.tool_calls += static_cast<int>(parsed.calls.size());
      st.out.parse_errors += parsed.error ? 1 : 0;
      StepInput input;
      input.text = std::move(text);
      input.tool_calls = std::move(parsed.calls);
      input.parse_error = std::move(parsed.error);
      input.end = end_of_turn_id ? TurnEnd::kStop : turn.stopped ? TurnEnd::kStopString : TurnEnd::kLength;
      env.step(specs[i].id, input);
    }
  }

  std::vector<EpisodeOutcome> out;
  for (State& st : states) {
    if (st.episode) {
      st.out.tokens = st.episode->tokens();
      st.out.sources = st.episode->sources();
      st.out.logp.resize(st.out.tokens.size(), 0.0);
      st.out.turns = st.episode->turns();
      st.out.messages = st.episode->messages();
    }
    out.push_back(std::move(st.out));
  }
  return out;
}

ArSample episode_sample(const EpisodeOutcome& out) {
  ArSample s;
  s.tokens = out.tokens;
  s.prompt_len = out.prompt_len;
  for (size_t t = static_cast<size_t>(out.prompt_len); t < out.tokens.size(); ++t) {
    s.response_mask.push_back(out.sources[t] == TokenSource::kModel ? 1 : 0);
    s.rollout_logp.push_back(out.logp[t]);
  }
  s.reward = out.reward;
  return s;
}

}  // namespace tandem::env
